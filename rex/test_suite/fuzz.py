"""One fuzzed neighbour database: the original's schema, new contents, keys consistent.

Each table gets between a quarter of ``rows_per_table`` and all of it. A row starts as
one of the original's sampled rows; each other column is then, at random, kept, resampled
from the column's observed values, or set to a literal the gold queries compare it with.
Keys stay consistent: an INTEGER PRIMARY KEY is unique, a foreign key takes one of the
parent rows written (a few parents get most of the children, so groups of every size
occur), and ``INSERT OR IGNORE`` drops a row that breaks a UNIQUE, NOT NULL or CHECK
constraint of the copied DDL. ``PRAGMA foreign_key_check`` is clean on the result.
"""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path
from typing import Any

from rex.test_suite.domain import Plan, TablePlan, quote

KEEP, RESAMPLE, LITERAL = "keep", "resample", "literal"


def write_neighbour(plan: Plan, path: str | Path, seed: int, rows_per_table: int) -> None:
    """Create the neighbour database at ``path`` (a new file) from ``plan``."""
    rng = random.Random(seed)
    change = rng.choice((0.2, 0.4, 0.7))  # how far rows drift from the original's
    conn = sqlite3.connect(str(path), isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=OFF")
        conn.execute("PRAGMA synchronous=OFF")
        conn.execute("BEGIN")
        for table in plan.tables:
            conn.execute(table.ddl)
        written: dict[str, dict[str, list[Any]]] = {}
        for table in plan.tables:
            rows = _rows(table, written, rng, rows_per_table, change)
            marks = ", ".join("?" for _ in table.columns)
            conn.executemany(f"INSERT OR IGNORE INTO {quote(table.name)} VALUES ({marks})", rows)
            kept = conn.execute(f"SELECT * FROM {quote(table.name)}").fetchall()
            written[table.name.lower()] = {c: [r[i] for r in kept] for i, c in enumerate(table.columns)}
        for ddl in plan.extra_ddl:
            conn.execute(ddl)
        conn.execute("COMMIT")
    finally:
        conn.close()


def _rows(
    table: TablePlan, written: dict[str, dict[str, list[Any]]], rng: random.Random, cap: int, change: float
) -> list[tuple[Any, ...]]:
    count = rng.randint(max(1, cap // 4), cap)
    if not table.rows:
        count = rng.randint(0, max(1, cap // 4))
    parents = {c: _hot_values(written.get(p.lower(), {}).get(pc, []), rng) for c, (p, pc) in table.foreign.items()}
    used_keys: set[Any] = set()
    next_key = (
        1 + max((r[table.columns.index(table.integer_key)] or 0 for r in table.rows), default=0)
        if (table.integer_key and all(isinstance(r[table.columns.index(table.integer_key)], int) for r in table.rows))
        else None
    )
    out = []
    for _ in range(count):
        base = list(rng.choice(table.rows)) if table.rows else [None] * len(table.columns)
        for i, column in enumerate(table.columns):
            if column in parents:
                base[i] = _foreign_value(parents[column], column in table.nullable, rng)
            elif column == table.integer_key:
                continue
            else:
                base[i] = _value(table, column, base[i], rng, change)
        if table.integer_key is not None:
            at = table.columns.index(table.integer_key)
            if base[at] in used_keys or base[at] is None:
                if next_key is None:
                    continue
                base[at], next_key = next_key, next_key + 1
            used_keys.add(base[at])
        out.append(tuple(base))
    return out


def _value(table: TablePlan, column: str, current: Any, rng: random.Random, change: float) -> Any:
    literals = table.literals.get(column, [])
    if literals and rng.random() < change / 2:
        return rng.choice(literals)
    if rng.random() >= change:
        return current
    if column in table.nullable and rng.random() < 0.1:
        return None
    values = table.values.get(column) or literals
    return rng.choice(values) if values else current


def _hot_values(values: list[Any], rng: random.Random) -> tuple[list[Any], list[Any]]:
    """The parent key values written, and a few 'hot' ones that get most children."""
    present = [v for v in values if v is not None]
    hot = rng.sample(present, min(len(present), rng.choice((1, 2, 3)))) if present else []
    return present, hot


def _foreign_value(pools: tuple[list[Any], list[Any]], nullable: bool, rng: random.Random) -> Any:
    present, hot = pools
    if not present or (nullable and rng.random() < 0.05):
        return None
    return rng.choice(hot) if rng.random() < 0.5 else rng.choice(present)


def foreign_key_problems(path: str | Path) -> list[tuple[Any, ...]]:
    """``PRAGMA foreign_key_check`` of a database (read-only): the rows whose parent is missing."""
    conn = sqlite3.connect(f"file:{Path(path).resolve()}?mode=ro", uri=True)
    try:
        return conn.execute("PRAGMA foreign_key_check").fetchall()
    finally:
        conn.close()
