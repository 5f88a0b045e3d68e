"""Executor presets at BIRD's real table sizes (100k rows per table).

Gold-like queries that need more than 15M SQLite VM steps (counted by the project's own
guard) run through TRUST-SQL's and DualSQL's executor tools, ReToolSQL's executor keeps
its paper's 15M-step cap, and a runaway query is still stopped by each preset's deadline.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from tools import PRESETS, QueryLimits, ToolBox, get_database
from tools.db.guards import Run, open_readonly

ROWS = 100_000
REGIONS = 50
RETOOLSQL_STEPS = 15_000_000
UNCAPPED_TOOLS = {"trustsql": "execute_sql_query", "dualsql": "execute_sql"}

GOLD_LIKE = {
    "orders per region, a join and GROUP BY over 100k rows": (
        "SELECT r.name, count(*) FROM orders AS o JOIN regions AS r ON o.customer % 50 = r.id - 1 "
        "GROUP BY r.name ORDER BY count(*) DESC, r.name LIMIT 3"
    ),
    "a recursive count to 2,000,000": (
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 2000000) SELECT count(*) FROM c"
    ),
}
RUNAWAY = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT count(*) FROM r"


@pytest.fixture(scope="module")
def sales_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``orders`` with 100k rows (BIRD's larger tables) and a 50-row ``regions``."""
    path = tmp_path_factory.mktemp("bird_size") / "sales.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE regions(id INTEGER PRIMARY KEY, name TEXT)")
    conn.executemany("INSERT INTO regions VALUES (?, ?)", [(i, f"region {i:02d}") for i in range(1, REGIONS + 1)])
    conn.execute("CREATE TABLE orders(id INTEGER PRIMARY KEY, customer INTEGER, amount REAL)")
    conn.execute(
        "INSERT INTO orders(id, customer, amount) "
        f"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {ROWS}) "
        "SELECT i, i % 1000, (i * 7919) % 997 / 10.0 FROM n"
    )
    conn.commit()
    conn.close()
    return path


def _steps_and_rows(path: Path, sql: str) -> tuple[int, list[list[Any]]]:
    """The VM steps ``sql`` takes, counted by the guard every executor runs under, and its rows."""
    limits = QueryLimits(max_rows=None, timeout_s=600.0, max_vm_steps=None)
    conn, slot = open_readonly(path, limits)
    run = slot.run = Run(limits, time.monotonic() + limits.timeout_s)
    try:
        rows = conn.execute(sql).fetchall()
    finally:
        slot.run = None
        conn.close()
    return run.steps, [list(row) for row in rows]


def _call(path: Path, tool: str, sql: str) -> tuple[Any, float]:
    db = get_database(path)
    started = time.monotonic()
    reply = ToolBox(db, [tool]).call(tool, {"db_id": db.db_id, "sql": sql})
    return reply, time.monotonic() - started


@pytest.mark.parametrize("sql", GOLD_LIKE.values(), ids=list(GOLD_LIKE))
def test_gold_like_queries_over_15m_steps_run_under_trustsql_and_dualsql(sales_db: Path, sql: str) -> None:
    steps, rows = _steps_and_rows(sales_db, sql)
    assert steps > RETOOLSQL_STEPS, f"{steps:,} steps: the query no longer exercises the 15M cap"
    for preset, tool in UNCAPPED_TOOLS.items():
        reply, took = _call(sales_db, tool, sql)
        assert reply.ok, (preset, reply.payload)
        assert reply.payload["rows"] == rows and rows
        assert took < PRESETS[preset].timeout_s / 3, (preset, took)  # far from the deadline
    refused, _ = _call(sales_db, "sqlite_query", sql)
    assert refused.error_kind == "step_limit", refused.payload
    assert f"{RETOOLSQL_STEPS:,}" in refused.payload["error"]["message"]


def test_a_runaway_query_stops_at_each_presets_deadline(sales_db: Path) -> None:
    """Without a step cap the deadline is what stops a runaway. The presets' own 30 s would
    hold two cores for half a minute, so the runaway runs under each preset's limits with
    only the deadline shortened; the presets themselves are checked to have one."""
    from dataclasses import replace

    from tools import execute

    db = get_database(sales_db)
    for preset in UNCAPPED_TOOLS:
        limits = PRESETS[preset]
        assert limits.max_vm_steps is None and limits.timeout_s == 30.0, (preset, limits)
        start = time.monotonic()
        reply = execute(db, RUNAWAY, replace(limits, timeout_s=1.0))
        took = time.monotonic() - start
        assert getattr(reply, "kind", None) == "timeout", (preset, reply)
        assert "1 s deadline" in reply.message and 1.0 <= took < 10.0, (preset, took, reply.message)
