"""``fts_search`` (DualSQL): SQLite FTS5 over schema names and cell values.

The index lives in its own cache file (``cache_root()/fts/<db_id>-<hash16>.sqlite``, with
its manifest: ``tools.cache``), never in the database, and is keyed by the database content
hash. It returns the schema elements whose names match and, per matching column, up to 5
distinct matching values.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
import threading
from pathlib import Path
from typing import Any

from tools.cache import cache_root, check_cached, load_checked, writing_cache_file
from tools.db.backend import Backend
from tools.explore.bm25 import tokenize
from tools.schema.profile_sql import dialect_of, is_text_sql
from tools.spelling import quote_identifier

FTS_VERSION = 1
VALUES_PER_COLUMN = 5
MAX_VALUES_INDEXED_PER_COLUMN = 200_000
MAX_K = 50
VALUE_CANDIDATES = 2000
_TOKENIZER = "unicode61 remove_diacritics 2"
_BUILD_LOCK = threading.Lock()


def fts_index_path(db: Backend) -> Path:
    folder = cache_root() / "fts"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{db.db_id}-{db.content_hash[:16]}-v{FTS_VERSION}.sqlite"


def split_name(name: str) -> str:
    """``schoolName`` / ``school_name`` / ``SchoolNAME`` -> words, so names match words."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", " ", name)
    return " ".join(re.split(r"[\W_]+", spaced)).strip()


def ensure_fts_index(db: Backend) -> Path:
    """Build the index file once per database content (atomic rename when done); a damaged
    one (``tools.cache`` checks it against its manifest) is rebuilt with a warning."""
    path = fts_index_path(db)
    if check_cached(path) is None:  # once per process, then a stat per query
        return path
    with _BUILD_LOCK:
        if load_checked(path, lambda found: found, structure=_readable_index) is not None:
            return path
        with writing_cache_file(path) as tmp:
            _build(db, tmp)
    return path


def _readable_index(path: Path) -> None:
    """The structural check of an index written before manifests: SQLite's page check and
    both tables readable."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        verdict = conn.execute("PRAGMA quick_check").fetchone()[0]
        if verdict != "ok":
            raise sqlite3.DatabaseError(f"quick_check: {verdict}")
        conn.execute("SELECT count(*) FROM schema_fts").fetchone()
        conn.execute("SELECT count(*) FROM value_fts").fetchone()
    finally:
        conn.close()


def _build(db: Backend, target: Path) -> None:
    with contextlib.closing(sqlite3.connect(target)) as conn:  # closed on a failure too: no journal left
        _fill(db, conn)


def _fill(db: Backend, conn: sqlite3.Connection) -> None:
    conn.execute(
        f"CREATE VIRTUAL TABLE schema_fts USING fts5(kind UNINDEXED, table_name UNINDEXED, "
        f"column_name UNINDEXED, body, tokenize = '{_TOKENIZER}')"
    )
    conn.execute(
        f"CREATE VIRTUAL TABLE value_fts USING fts5(table_name UNINDEXED, column_name UNINDEXED, "
        f"value, tokenize = '{_TOKENIZER}')"
    )
    for table, columns in db.schema().items():
        conn.execute("INSERT INTO schema_fts VALUES ('table', ?, NULL, ?)", (table, f"{table} {split_name(table)}"))
        for column in columns:
            conn.execute(
                "INSERT INTO schema_fts VALUES ('column', ?, ?, ?)", (table, column, f"{column} {split_name(column)}")
            )
            c = quote_identifier(column)
            rows = db.query_internal(
                f"SELECT DISTINCT {c} FROM {quote_identifier(table)} WHERE {is_text_sql(c, dialect_of(db))} "
                f"LIMIT {MAX_VALUES_INDEXED_PER_COLUMN}"
            )
            conn.executemany("INSERT INTO value_fts VALUES (?, ?, ?)", ((table, column, v) for (v,) in rows))
    conn.commit()


def _match_expression(query: str) -> str | None:
    """Model text -> an FTS5 query: OR of quoted words (prefix match for 3+ letters).
    Only word tokens reach FTS5, so no query syntax can be injected."""
    words = list(dict.fromkeys(tokenize(query)))
    if not words:
        return None
    return " OR ".join(f'"{w}"' + ("*" if len(w) >= 3 else "") for w in words)


def fts_search(db: Backend, query: str, k: int = 10) -> dict[str, Any]:
    """Schema elements and cell values matching ``query``; at most ``k`` of each kind,
    up to 5 distinct values per column, best BM25 rank first."""
    k = max(1, min(int(k), MAX_K))
    out: dict[str, Any] = {"query": query, "schema_matches": [], "value_matches": []}
    match = _match_expression(query)
    if match is None:
        return out
    conn = sqlite3.connect(f"file:{ensure_fts_index(db)}?mode=ro", uri=True)
    try:
        out["schema_matches"] = [
            {"table": t, "column": c} if c is not None else {"table": t}
            for _, t, c in conn.execute(
                "SELECT kind, table_name, column_name FROM schema_fts WHERE schema_fts MATCH ? ORDER BY rank LIMIT ?",
                (match, k),
            )
        ]
        out["value_matches"] = _grouped_values(conn, match, k)
    finally:
        conn.close()
    return out


def _grouped_values(conn: sqlite3.Connection, match: str, k: int) -> list[dict[str, Any]]:
    groups: dict[tuple[str, str], list[str]] = {}
    rows = conn.execute(
        "SELECT table_name, column_name, value FROM value_fts WHERE value_fts MATCH ? ORDER BY rank LIMIT ?",
        (match, VALUE_CANDIDATES),
    )
    for table, column, value in rows:
        key = (table, column)
        if key not in groups:
            if len(groups) >= k:
                continue
            groups[key] = []
        if len(groups[key]) < VALUES_PER_COLUMN and value not in groups[key]:
            groups[key].append(value)
    return [{"table": t, "column": c, "values": v} for (t, c), v in groups.items()]
