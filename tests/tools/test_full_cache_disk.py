"""Writes on a full disk, for real: a small tmpfs (tests/helpers/small_disk.py) filled up.
An atomic write, a record append and every cache build (profile, FTS5 index, BM25 index)
raise ``DiskFullError`` naming the directory, the bytes free there and the bytes needed;
the old file stays, no temporary or half-written file is left, and once room is made the
cache builds."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.small_disk import fill_leaving, small_disk
from tools.db.connection import Database, get_database
from tools.errors import DiskFullError, ToolkitError
from tools.explore.bm25 import bm25_search_sqlite
from tools.explore.fts import fts_search
from tools.files import append_text, atomic_write_text
from tools.schema.profile import load_or_build_profile


@pytest.fixture
def disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A 4 MiB tmpfs, also the cache root ($SQLAGENT_RL_CACHE)."""
    with small_disk(tmp_path / "small", 4 << 20) as mounted:
        monkeypatch.setenv("SQLAGENT_RL_CACHE", str(mounted))
        yield mounted


@pytest.fixture
def db(school_db: Path) -> Database:
    return get_database(school_db)  # on the ordinary disk: only the caches go to the small one


def files_under(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def test_an_atomic_write_on_a_full_disk_keeps_the_old_file(disk: Path) -> None:
    target = disk / "summary.json"
    target.write_text("old")
    fill_leaving(disk, 0)
    with pytest.raises(DiskFullError) as err:
        atomic_write_text(target, "x" * 200_000)
    message = str(err.value)
    assert str(disk) in message and "free there" in message and "200,000 bytes" in message, message
    assert isinstance(err.value, ToolkitError) and isinstance(err.value, OSError)
    assert target.read_text() == "old"
    assert files_under(disk) == ["filler.bin", "summary.json"]  # no temporary file left


def test_a_record_that_does_not_fit_leaves_no_half_line(disk: Path) -> None:
    path = disk / "records.jsonl"
    append_text(path, json.dumps({"step": 1}) + "\n")
    fill_leaving(disk, 4096)  # room for part of the next line only
    line = json.dumps({"step": 2, "text": "y" * 50_000}) + "\n"
    with pytest.raises(DiskFullError, match=f"{len(line.encode()):,} bytes"):
        append_text(path, line)
    assert path.read_text() == '{"step": 1}\n'


@pytest.mark.parametrize(
    ("kind", "build"),
    [
        ("profiles", lambda db: load_or_build_profile(db)),
        ("fts", lambda db: fts_search(db, "science fair")),
        ("bm25", lambda db: bm25_search_sqlite(db, "events", "note", "note 3")),
    ],
)
def test_a_cache_build_on_a_full_disk_says_so_and_leaves_nothing(disk: Path, db: Database, kind: str, build) -> None:
    filler = fill_leaving(disk, 0)
    with pytest.raises(DiskFullError) as err:
        build(db)
    message = str(err.value)
    assert str(disk / kind) in message and "SQLAGENT_RL_CACHE" in message and "free there" in message, message
    assert files_under(disk) == ["filler.bin"]  # no temporary file, journal or half-built folder
    filler.unlink()  # room made: the cache builds
    assert build(db)
    assert files_under(disk / kind)
