"""The SQL executor tools of the four designs: one executor, per-design presets.

``sqlite_query`` (ReToolSQL), ``execute_sql_query`` (TRUST-SQL) and ``execute_sql``
(DualSQL) are the same ``tools.connection.execute`` call; only the ``QueryLimits`` differ.
"""

from __future__ import annotations

import dataclasses

from tools.connection import Database, execute
from tools.limits import PRESETS, QueryLimits
from tools.results import QueryResult, ToolError

MAX_RETURN_ROWS_CAP = 1000
"""The most rows a model may ask ``sqlite_query`` for (keeps observations bounded)."""

DEFAULT_PRESET = {"sqlite_query": "retoolsql", "execute_sql_query": "trustsql", "execute_sql": "dualsql"}


def run_sql(
    db: Database, sql: str, limits: QueryLimits | str, max_return_rows: int | None = None
) -> QueryResult | ToolError:
    """Execute ``sql`` under a preset (by name or value); ``max_return_rows`` overrides
    the preset's row cap, clamped to ``MAX_RETURN_ROWS_CAP``."""
    if isinstance(limits, str):
        if limits not in PRESETS:
            return ToolError("bad_arguments", f"unknown preset {limits!r}; use one of {sorted(PRESETS)}")
        limits = PRESETS[limits]
    if max_return_rows is not None:
        if isinstance(max_return_rows, bool) or not isinstance(max_return_rows, int) or max_return_rows < 1:
            return ToolError("bad_arguments", f"max_return_rows must be a positive integer, got {max_return_rows!r}")
        limits = dataclasses.replace(limits, max_rows=min(max_return_rows, MAX_RETURN_ROWS_CAP))
    return execute(db, sql, limits)


def sqlite_query(
    db: Database, sql: str, max_return_rows: int = 100, preset: str = "retoolsql"
) -> QueryResult | ToolError:
    """ReToolSQL's executor: SELECT/WITH only, 15M VM steps, row cap ``max_return_rows``."""
    return run_sql(db, sql, preset, max_return_rows)


def execute_sql_query(db: Database, sql: str, preset: str = "trustsql") -> QueryResult | ToolError:
    """TRUST-SQL's executor: also allows the read-only metadata PRAGMAs."""
    return run_sql(db, sql, preset)


def execute_sql(db: Database, sql: str, preset: str = "dualsql") -> QueryResult | ToolError:
    """DualSQL's executor: 10 rows, 150-char cells, schema queries in full."""
    return run_sql(db, sql, preset)
