"""``python -m tools build-cache``: every profile and search index built once, found again
by a rerun without reading the databases, and used by the tools instead of a rebuild."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tools import build_cache
from tools.__main__ import main as tools_main
from tools.cache import CACHE_ENV


def make_db(path: Path, rows: int = 30) -> Path:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE city (id INTEGER PRIMARY KEY, name TEXT, country TEXT, population INTEGER)")
    conn.executemany(
        "INSERT INTO city VALUES (?, ?, ?, ?)",
        [(i, f"Town {i}", ["France", "Peru", "Chad"][i % 3], 1000 + i) for i in range(rows)],
    )
    conn.commit()
    conn.close()
    return path


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv(CACHE_ENV, str(root))
    return root


def test_builds_every_index_once_and_a_rerun_finds_them(
    tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dbs = [make_db(tmp_path / "a.sqlite"), make_db(tmp_path / "b.sqlite", rows=10)]
    assert build_cache.missing(dbs) == [str(p.resolve()) for p in dbs]
    assert tools_main(["build-cache", "--db", str(dbs[0]), "--db", str(dbs[1])]) == 0
    first = capsys.readouterr().out
    assert "built 2 and found 0 cached of 2 database(s)" in first
    files = build_cache.manifest_files(dbs)
    # per database: the profile, the FTS index and one BM25 index per column (4)
    assert len(files) == 2 * (1 + 1 + 4) and all((cache / f).exists() for f in files)
    assert build_cache.missing(dbs) == []
    stamps = {f: (cache / f).stat().st_mtime_ns for f in files}

    assert tools_main(["build-cache", "--db", str(dbs[0]), "--db", str(dbs[1])]) == 0
    assert "all 2 database(s) cached" in capsys.readouterr().out
    assert {f: (cache / f).stat().st_mtime_ns for f in files} == stamps  # nothing rewritten

    conn = sqlite3.connect(dbs[1])  # a changed database is stale, then rebuilt
    conn.execute("INSERT INTO city VALUES (99, 'Lima', 'Peru', 5)")
    conn.commit()
    conn.close()
    assert build_cache.missing(dbs) == [str(dbs[1].resolve())]
    report = build_cache.build(dbs, progress=False, say=lambda _: None)
    assert report.built == [str(dbs[1].resolve())] and report.cached == [str(dbs[0].resolve())]


def test_the_tools_read_the_built_caches_instead_of_building(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tools.explore.bm25 as bm25
    import tools.explore.fts as fts
    import tools.schema.profile as profile
    from tools.db.connection import Database

    db_path = make_db(tmp_path / "a.sqlite")
    build_cache.build([db_path], progress=False, say=lambda _: None)

    def no_build(*args: object, **kwargs: object) -> None:
        raise AssertionError("rebuilt a cache that build-cache had built")

    monkeypatch.setattr(bm25.ValueIndex, "build", no_build)
    monkeypatch.setattr(fts, "_build", no_build)
    monkeypatch.setattr(profile, "build_profile", no_build)
    monkeypatch.setattr(bm25, "_MEMORY", type(bm25._MEMORY)())  # as in a fresh rollout worker
    db = Database(db_path)  # a fresh object: nothing in memory
    assert [t.name for t in db.profile().tables] == ["city"]
    hits = bm25.bm25_search_sqlite(db, "city", "country", "peru")
    assert isinstance(hits, dict) and hits["hits"][0]["value"] == "Peru"
    assert fts.fts_search(db, "Chad")["value_matches"]


def test_only_some_kinds_and_bad_arguments(tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = make_db(tmp_path / "a.sqlite")
    assert tools_main(["build-cache", "--db", str(db), "--only", "profile,fts"]) == 0
    assert build_cache.missing([db], ("profile", "fts")) == [] and build_cache.missing([db]) == [str(db.resolve())]
    assert build_cache.build([db], ("bm25",), "text", say=lambda _: None, progress=False).built == [str(db.resolve())]
    assert len(build_cache.manifest_files([db])) == 2 + 2  # the text columns: name, country
    assert tools_main(["build-cache", "--db", str(db), "--only", "profile,nope"]) == 2
    assert "choose among profile, fts, bm25" in capsys.readouterr().err
    assert tools_main(["build-cache", "data=minibird", "--db", str(db)]) == 2
