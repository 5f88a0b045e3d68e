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
        # No VM-step cap: BIRD's own gold queries need up to ~174M steps (5 s in raw sqlite3)
        # at its real table sizes; the 30 s deadline (the reward's and BIRD's evaluation
        # script's per-query time) runs every query that can be scored and still stops runaways.
        timeout_s=30.0,
        max_vm_steps=None,
        allowed_pragmas=METADATA_PRAGMAS,
        full_schema_queries=True,
    ),
    other_dialects=(
        "Execute one read-only $dialect query; returns at most 10 rows with long cells cut "
        "at 150 characters (schema queries on the catalogue - $catalogue - come back in full)."
    ),
)
