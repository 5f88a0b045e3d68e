"""PostgreSQL errors as the structured ``ToolError`` kinds every backend reports
(``tools.db.sql_errors`` has SQLite's, ``tools.db.duckdb_backend.classify_duckdb`` DuckDB's),
read from the error's SQLSTATE."""

from __future__ import annotations

import re
from collections.abc import Callable

from tools.db.guards import Run
from tools.db.results import ToolError
from tools.spelling import close_matches, list_hint

FORBIDDEN_STATES = frozenset({"42501", "25006", "0A000", "25001", "2F003", "38002", "38003", "38004"})
"""Insufficient privilege, read-only transaction, refused feature (a data-modifying WITH in a
cursor), and the SQL-routine access violations."""
TOO_LARGE_STATES = frozenset({"53000", "53100", "53200", "53300", "53400", "54000", "54001"})
"""Out of memory, disk, connections or a program limit."""


def classify_postgres(exc: Exception, run: Run, schema: Callable[[], dict[str, list[str]]]) -> ToolError:
    """Turn a psycopg exception into a structured error the model can act on."""
    state = getattr(exc, "sqlstate", None) or ""
    message = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    if run.tripped == "timeout" or state == "57014":
        return ToolError(
            "timeout",
            f"the query ran past the {run.limits.timeout_s:g} s deadline and was stopped",
            "add selective WHERE conditions, avoid cross joins, or add LIMIT",
        )
    if state == "42601" and "multiple commands" in message:
        return ToolError(
            "too_many_statements",
            "only one SQL statement per call is allowed",
            "send one statement, without ';' between statements",
        )
    if state in FORBIDDEN_STATES:
        return ToolError("forbidden", message, "only read-only SELECT queries on this database's tables run here")
    if state == "42P01":
        tables = list(schema())
        bad = re.search(r'relation "([^"]+)" does not exist', message)
        close = close_matches(bad.group(1), tables) if bad else []
        hint = " or ".join(repr(t) for t in close)
        return ToolError("no_such_table", message, f"did you mean {hint}?" if close else list_hint("tables", tables))
    if state == "42703":
        return ToolError("no_such_column", message, "check the column names with the schema")
    if state == "42601":
        return ToolError("syntax", message)
    if state in TOO_LARGE_STATES:
        return ToolError("too_large", message, "add selective WHERE conditions, avoid cross joins, aggregate")
    return ToolError("other", message)
