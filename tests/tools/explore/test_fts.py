"""fts_search: FTS5 over schema names and values, in a separate cache file."""

from __future__ import annotations

import hashlib
from pathlib import Path

from tools import get_database
from tools.explore.fts import ensure_fts_index, fts_search, split_name


def test_split_name() -> None:
    assert split_name("schoolName") == "school Name"
    assert split_name("school_id") == "school id"
    assert split_name("CDSCode") == "CDS Code"


def test_schema_and_value_matches(school_db: Path) -> None:
    db = get_database(school_db)
    before = hashlib.sha256(school_db.read_bytes()).hexdigest()
    out = fts_search(db, "Berkeley school fair", k=5)
    assert {"table": "schools"} in out["schema_matches"]
    assert {"table": "scores", "column": "school_id"} in out["schema_matches"]
    groups = {(g["table"], g["column"]): g["values"] for g in out["value_matches"]}
    assert groups[("schools", "city")] == ["Berkeley"]
    assert groups[("schools", "name")] == ["Berkeley Arts"]
    assert sorted(groups[("events", "kind")]) == ["science fair", "sports fair"]
    assert all(len(v) <= 5 and len(v) == len(set(v)) for v in groups.values())
    assert hashlib.sha256(school_db.read_bytes()).hexdigest() == before


def test_at_most_five_values_per_column_and_k_columns(school_db: Path) -> None:
    out = fts_search(get_database(school_db), "note", k=1)
    assert len(out["value_matches"]) == 1
    assert out["value_matches"][0]["column"] == "note" and len(out["value_matches"][0]["values"]) == 5


def test_index_is_a_separate_cached_file(school_db: Path, _cache_dir: Path) -> None:
    db = get_database(school_db)
    path = ensure_fts_index(db)
    assert path.is_file() and _cache_dir in path.parents
    stamp = path.stat().st_mtime_ns
    fts_search(db, "open day")
    assert ensure_fts_index(db) == path and path.stat().st_mtime_ns == stamp
    assert sorted(p.name for p in school_db.parent.iterdir()) == ["schools.sqlite"]


def test_queries_with_fts_syntax_or_nothing(school_db: Path) -> None:
    db = get_database(school_db)
    for query in ('" AND OR NOT (', "*", "", "NEAR(open day)", "kind:fair"):
        out = fts_search(db, query)
        assert set(out) == {"query", "schema_matches", "value_matches"}
    assert fts_search(db, "???")["value_matches"] == []
