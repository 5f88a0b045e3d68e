"""ReToolSQL's executor (``sqlite_query``): SELECT/WITH only, 15M VM steps, and a row cap the
model picks (default 100). Its other tools, ``sqlite_peek`` and ``bm25_search_sqlite``, are
the tool layer's own."""

from __future__ import annotations

from tools import QueryLimits
from tools.executor_tool import register_executor_tool

PRESET = "retoolsql"
TOOLS = ("sqlite_query", "sqlite_peek", "bm25_search_sqlite")

register_executor_tool(
    "sqlite_query",
    "Run one read-only SELECT/WITH query on the database and return columns, rows "
    "(at most max_return_rows), the row count and whether rows were cut; errors say "
    "what went wrong and suggest close table/column names.",
    PRESET,
    QueryLimits(max_rows=100, timeout_s=5.0, max_vm_steps=15_000_000),
    max_return_rows=100,
)
