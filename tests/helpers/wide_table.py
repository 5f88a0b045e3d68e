"""A real SQLite file whose three-way self cross join explodes (3,000 rows: 27 billion
joined rows), for the result-budget tests and benchmark."""

from __future__ import annotations

import sqlite3
from pathlib import Path

ROWS = 3_000
CROSS_JOIN = "SELECT * FROM t a, t b, t c"


def build_wide_table(path: Path, rows: int = ROWS) -> Path:
    """``t(id INTEGER PRIMARY KEY, name TEXT, value REAL)`` with ``rows`` rows."""
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT, value REAL)")
    conn.executemany("INSERT INTO t VALUES (?, ?, ?)", [(i, f"name {i}", i * 1.5) for i in range(rows)])
    conn.commit()
    conn.close()
    return path
