"""TRUST-SQL's executor (``execute_sql_query``): the schema is unknown, so besides SELECT/WITH
it allows the read-only metadata PRAGMAs the agent explores the schema with."""

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
    QueryLimits(max_rows=100, timeout_s=5.0, allowed_pragmas=METADATA_PRAGMAS),
)
