"""DualSQL's executor (``execute_sql``): at most 10 rows, cells cut at 150 characters, and
schema queries (``sqlite_master``, metadata PRAGMAs) returned in full. Its other tools,
``fts_search`` and ``get_profile``, are the tool layer's own."""

from __future__ import annotations

from tools import METADATA_PRAGMAS, QueryLimits
from tools.executor_tool import register_executor_tool

PRESET = "dualsql"
TOOLS = ("execute_sql", "fts_search", "get_profile")

register_executor_tool(
    "execute_sql",
    "Execute one read-only SQL query; returns at most 10 rows with long cells cut "
    "at 150 characters (schema queries on sqlite_master or PRAGMA come back in full).",
    PRESET,
    QueryLimits(
        max_rows=10,
        max_cell_chars=150,
        timeout_s=5.0,
        allowed_pragmas=METADATA_PRAGMAS,
        full_schema_queries=True,
    ),
)
