"""Damaged caches (tools/cache.py): every cached profile, BM25 index and FTS5 index is
checked against its manifest when loaded; one that was cut short or had bytes flipped is
rebuilt with a warning naming the file, and answers exactly as before. A cache from before
manifests is adopted when it reads back, rebuilt when it does not."""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tools import cache
from tools.cache import CacheDamagedWarning, check_cached, manifest_path
from tools.db.connection import Database, get_database
from tools.explore import bm25
from tools.explore.bm25 import bm25_search_sqlite, index_folder
from tools.explore.fts import ensure_fts_index, fts_search
from tools.schema.profile import build_profile, load_or_build_profile, profile_cache_path


def truncate(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


def flip(path: Path) -> None:
    """One byte in the middle changed in place (the size stays)."""
    middle = path.stat().st_size // 2
    with open(path, "r+b") as handle:
        handle.seek(middle)
        byte = handle.read(1)[0]
        handle.seek(middle)
        handle.write(bytes([byte ^ 0x01]))


DAMAGES = {"truncated": truncate, "flipped": flip}


def damaged_warning(caught: list[warnings.WarningMessage]) -> str:
    found = [str(w.message) for w in caught if issubclass(w.category, CacheDamagedWarning)]
    assert len(found) == 1, found
    return found[0]


def load_warning(load: Callable[[], Any]) -> tuple[Any, list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = load()
    return value, caught


@pytest.fixture
def db(school_db: Path) -> Database:
    return get_database(school_db)


# ----------------------------------------------------------------------------- each kind, each damage


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_profile_is_rebuilt_with_a_warning(db: Database, damage: str) -> None:
    fresh = build_profile(db).to_json()
    load_or_build_profile(db)  # written with its manifest
    path = profile_cache_path(db)
    DAMAGES[damage](path)
    profile, caught = load_warning(lambda: load_or_build_profile(db))
    message = damaged_warning(caught)
    assert str(path) in message and ("bytes" in message or "SHA-256" in message), message
    assert profile.to_json() == fresh
    assert check_cached(path) is None  # the rebuilt file passes


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_fts_index_is_rebuilt_with_a_warning(db: Database, damage: str) -> None:
    before = fts_search(db, "science fair Alameda")
    assert before["value_matches"]
    path = ensure_fts_index(db)
    DAMAGES[damage](path)
    after, caught = load_warning(lambda: fts_search(db, "science fair Alameda"))
    assert str(path) in damaged_warning(caught)
    assert after == before


@pytest.mark.parametrize("engine", ["bm25s", "fts5"])
@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_every_file_of_a_damaged_bm25_index_is_caught(db: Database, engine: str, damage: str) -> None:
    def search() -> Any:
        bm25._MEMORY.clear()  # the disk copy, not this process's memory
        return bm25_search_sqlite(db, "events", "kind", "science fair", engine=engine)

    before = search()
    assert before["hits"][0]["value"] == "science fair"
    folder = index_folder(db, "events", "kind", engine)
    members = sorted(p for p in folder.rglob("*") if p.is_file() and p != manifest_path(folder))
    assert len(members) >= 3  # meta.json, values.json and the engine's files
    for member in members:
        DAMAGES[damage](member)
        after, caught = load_warning(search)
        assert str(member) in damaged_warning(caught)
        assert after == before


def test_a_cut_manifest_is_caught(db: Database) -> None:
    """(A flipped byte in a manifest's recorded time is no damage: the files are hashed,
    match, and the manifest is written again.)"""
    before = bm25_search_sqlite(db, "events", "kind", "science fair")
    bm25._MEMORY.clear()
    manifest = manifest_path(index_folder(db, "events", "kind"))
    truncate(manifest)
    after, caught = load_warning(lambda: bm25_search_sqlite(db, "events", "kind", "science fair"))
    assert str(manifest) in damaged_warning(caught) and "manifest is unreadable" in damaged_warning(caught)
    assert after == before


# ----------------------------------------------------------------------------- caches from before manifests


def test_a_cache_from_before_manifests_is_adopted_when_it_reads_back(db: Database) -> None:
    profile = load_or_build_profile(db)
    path = profile_cache_path(db)
    fts = ensure_fts_index(db)
    for cached in (path, fts):
        manifest_path(cached).unlink()
    stamps = (path.stat().st_mtime_ns, fts.stat().st_mtime_ns)
    again, caught = load_warning(lambda: (load_or_build_profile(db), ensure_fts_index(db)))
    assert not [w for w in caught if issubclass(w.category, CacheDamagedWarning)]
    assert again[0] == profile and (path.stat().st_mtime_ns, fts.stat().st_mtime_ns) == stamps  # not rebuilt
    assert manifest_path(path).is_file() and manifest_path(fts).is_file()  # checked from now on


def test_a_damaged_cache_from_before_manifests_is_rebuilt(db: Database) -> None:
    fresh = build_profile(db).to_json()
    load_or_build_profile(db)
    fts = ensure_fts_index(db)
    before = fts_search(db, "science fair")
    path = profile_cache_path(db)
    for cached in (path, fts):
        manifest_path(cached).unlink()
        truncate(cached)
    profile, caught = load_warning(lambda: load_or_build_profile(db))
    assert "could not be read" in damaged_warning(caught) and profile.to_json() == fresh
    after, caught = load_warning(lambda: fts_search(db, "science fair"))
    assert str(fts) in damaged_warning(caught) and after == before


# ----------------------------------------------------------------------------- what a check costs


def test_large_files_are_hashed_only_when_their_time_moved(db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file over HASH_ALWAYS_BYTES (the converted model) is not hashed on a normal load;
    a write to it moves its modification time, and then it is hashed and caught."""
    monkeypatch.setattr(cache, "HASH_ALWAYS_BYTES", 0)  # every file counts as large
    hashed: list[Path] = []
    real = cache._sha256
    monkeypatch.setattr(cache, "_sha256", lambda p: hashed.append(p) or real(p))
    load_or_build_profile(db)
    path = profile_cache_path(db)
    hashed.clear()
    assert check_cached(path) is None and hashed == []
    time.sleep(0.05)  # file times tick in milliseconds: the write below gets a later one
    flip(path)
    problem = check_cached(path)
    assert problem is not None and "SHA-256" in problem.what and hashed == [path]


def test_a_check_is_remembered_until_the_file_changes(db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """fts_search opens its index on every query: after one check a query costs stats."""
    monkeypatch.setattr(cache, "_SETTLED_NS", 0)
    hashed: list[Path] = []
    real = cache._sha256
    monkeypatch.setattr(cache, "_sha256", lambda p: hashed.append(p) or real(p))
    path = ensure_fts_index(db)
    hashed.clear()
    for _ in range(3):
        fts_search(db, "fair")
    assert hashed == [path]
    time.sleep(0.05)
    flip(path)
    _, caught = load_warning(lambda: fts_search(db, "fair"))
    assert str(path) in damaged_warning(caught)
