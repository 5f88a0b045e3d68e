"""TRUST-SQL's executor (``execute_sql_query``): the schema is unknown, so besides SELECT/WITH
it allows the read-only metadata PRAGMAs the agent explores the schema with (on another
dialect, the engine's catalogue: ``tools.db.dialects``)."""

from __future__ import annotations

from tools import METADATA_PRAGMAS, QueryLimits
from tools.executor_tool import register_executor_tool

PRESET = "trustsql"
TOOL = "execute_sql_query"

register_executor_tool(
    TOOL,
    "Execute one read-only SQL query (SELECT/WITH, or PRAGMA table_info / "
    "foreign_key_list / index_list to explore the schema) and return the result.",
    PRESET,
    # No VM-step cap: BIRD's own gold queries need up to ~174M steps (5 s in raw sqlite3) at
    # its real table sizes; the 30 s deadline (the reward's and BIRD's evaluation script's
    # per-query time) runs every query that can be scored and still stops runaways.
    QueryLimits(max_rows=100, timeout_s=30.0, max_vm_steps=None, allowed_pragmas=METADATA_PRAGMAS),
    other_dialects=(
        "Execute one read-only $dialect query (SELECT/WITH; read the catalogue - $catalogue - "
        "to explore the schema) and return the result."
    ),
)
