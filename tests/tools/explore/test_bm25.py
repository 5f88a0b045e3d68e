"""bm25_search_sqlite: BM25 + substring hits, ``where``, engines, the on-disk cache."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tools import get_database
from tools.db.connection import Database
from tools.db.results import ToolError
from tools.explore import bm25
from tools.explore.bm25 import ValueIndex, bm25_search_sqlite, get_index, index_folder

CITIES = [
    "New York",
    "York",
    "New Haven",
    "Newark",
    "San Francisco",
    "South San Francisco",
    "Los Angeles",
    "Yorktown Heights",
    "Old York Road",
]


@pytest.fixture
def city_db(tmp_path: Path) -> Path:
    path = tmp_path / "cities.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE place (id INTEGER PRIMARY KEY, city TEXT, state TEXT, empty TEXT)")
    rows = [(c, "NY" if "York" in c else "CA") for c in CITIES for _ in range(2)]
    conn.executemany("INSERT INTO place(city, state) VALUES (?, ?)", rows)
    conn.execute("INSERT INTO place(city, state) VALUES (CAST(X'4e6577ff' AS TEXT), 'XX')")  # not UTF-8
    conn.execute("INSERT INTO place(city, state) VALUES (NULL, 'CA')")
    conn.commit()
    conn.close()
    return path


@pytest.fixture(autouse=True)
def _fresh_memory() -> None:
    bm25._MEMORY.clear()


@pytest.mark.parametrize("engine", ["bm25s", "fts5"])
def test_search_ranks_and_labels_matchers(city_db: Path, engine: str) -> None:
    out = bm25_search_sqlite(get_database(city_db), "Place", "CITY", "new york", top_k=3, engine=engine)
    assert not isinstance(out, ToolError)
    assert out["table"] == "place" and out["column"] == "city" and out["distinct_values"] == 10
    hits = out["hits"]
    assert hits[0]["value"] == "New York" and hits[0]["matcher"] == "bm25+substring"
    assert hits[0]["substring_score"] == 1.0
    assert len(hits) <= 6
    bm25_hits = [h for h in hits if "bm25" in h["matcher"]]
    assert len(bm25_hits) == 3 and bm25_hits == sorted(bm25_hits, key=lambda h: -h["score"])


def test_substring_fallback_finds_what_bm25_cannot(city_db: Path) -> None:
    out = bm25_search_sqlite(get_database(city_db), "place", "city", "FRANCISCO", top_k=5)
    assert not isinstance(out, ToolError)
    values = {h["value"]: h for h in out["hits"]}
    assert set(values) == {"San Francisco", "South San Francisco"}
    # A word fragment has no BM25 term: only the substring matcher finds it.
    out = bm25_search_sqlite(get_database(city_db), "place", "city", "ork", top_k=10)
    assert not isinstance(out, ToolError)
    assert {h["matcher"] for h in out["hits"]} == {"substring"}
    assert {"York", "New York", "Newark"} - {h["value"] for h in out["hits"]} == {"Newark"}


def test_where_restricts_rows(city_db: Path) -> None:
    out = bm25_search_sqlite(get_database(city_db), "place", "city", "san", top_k=5, where="state = 'NY'")
    assert not isinstance(out, ToolError)
    assert out["hits"] == [] and out["distinct_values"] == 4
    err = bm25_search_sqlite(get_database(city_db), "place", "city", "san", where="1; DROP TABLE place")
    assert isinstance(err, ToolError) and err.kind in {"syntax", "forbidden", "too_many_statements"}


def test_errors_and_odd_columns(city_db: Path) -> None:
    db = get_database(city_db)
    err = bm25_search_sqlite(db, "place", "cty", "york")
    assert isinstance(err, ToolError) and err.kind == "no_such_column" and "'city'" in (err.suggestion or "")
    err = bm25_search_sqlite(db, "places", "city", "york")
    assert isinstance(err, ToolError) and err.kind == "no_such_table"
    empty = bm25_search_sqlite(db, "place", "empty", "york")
    assert not isinstance(empty, ToolError) and empty["hits"] == [] and empty["distinct_values"] == 0
    odd = bm25_search_sqlite(db, "place", "city", "new\ufffd")
    assert not isinstance(odd, ToolError) and any(h["value"] == "New\ufffd" for h in odd["hits"])
    punct = bm25_search_sqlite(db, "place", "city", '" OR * (')
    assert not isinstance(punct, ToolError)


@pytest.mark.parametrize("engine", ["bm25s", "fts5"])
def test_index_cached_on_disk_and_rebuilt_on_change(
    city_db: Path, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = get_database(city_db)
    first = bm25_search_sqlite(db, "place", "city", "york", engine=engine)
    folder = index_folder(db, "place", "city", engine)
    assert (folder / "meta.json").is_file() and (folder / "values.json").is_file()
    assert city_db.parent not in folder.parents  # never next to (or in) the database
    # "Restart": empty memory, building forbidden -> the index must come from disk.
    bm25._MEMORY.clear()
    with monkeypatch.context() as patch:  # undo only this patch, not the cache-root env
        patch.setattr(ValueIndex, "build", classmethod(lambda cls, *a, **k: pytest.fail("rebuilt")))
        fresh = Database(city_db)
        assert bm25_search_sqlite(fresh, "place", "city", "york", engine=engine) == first
    conn = sqlite3.connect(city_db)
    conn.execute("INSERT INTO place(city, state) VALUES ('York Harbor', 'ME')")
    conn.commit()
    conn.close()
    changed = Database(city_db)
    assert index_folder(changed, "place", "city", engine) != folder
    out = bm25_search_sqlite(changed, "place", "city", "york harbor", engine=engine)
    assert not isinstance(out, ToolError) and out["hits"][0]["value"] == "York Harbor"


def test_memory_cache_returns_same_object(city_db: Path) -> None:
    db = get_database(city_db)
    assert get_index(db, "place", "city") is get_index(db, "place", "city")


def test_engines_agree_on_the_best_hit(city_db: Path) -> None:
    db = get_database(city_db)
    for query in ("los angeles", "haven", "heights yorktown", "south san"):
        tops = [
            bm25_search_sqlite(db, "place", "city", query, top_k=1, engine=e)["hits"][0]["value"]
            for e in ("bm25s", "fts5")
        ]  # type: ignore[index]
        assert tops[0] == tops[1], (query, tops)


def test_engines_are_a_registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.helpers.registries import isolate_registry
    from tools.errors import UnknownNameError

    with pytest.raises(UnknownNameError, match="did you mean 'bm25s'.*registered BM25 engines: bm25s, fts5"):
        ValueIndex.build(["Fresno"], engine="bm25z")
    engines = isolate_registry(monkeypatch, "tools.explore.bm25.ENGINES")
    bm25.register_bm25_engine("in_memory")(bm25.Bm25sRanker)  # another name for one engine class
    index = ValueIndex.build(["Fresno", "Clovis"], engine="in_memory")
    assert index.engine == "in_memory" and index.search("fresno", 1)[0]["value"] == "Fresno"
    assert engines.names() == ["bm25s", "fts5", "in_memory"]
    with pytest.raises(ValueError, match="already registered"):
        bm25.register_bm25_engine("fts5")(bm25.Bm25sRanker)
