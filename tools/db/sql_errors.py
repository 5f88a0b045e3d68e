"""Turning a failed query into a ``ToolError`` the model can act on: the kind, SQLite's
message, and a hint (near-miss table and column names, SQLite spellings of functions)."""

from __future__ import annotations

from collections.abc import Callable

from tools.db.guards import MAX_VALUE_BYTES, Run
from tools.db.results import ToolError
from tools.errors import DataError
from tools.spelling import close_matches, list_hint


def classify(exc: BaseException, run: Run, schema: Callable[[], dict[str, list[str]]]) -> ToolError:
    """Turn a sqlite3 exception into a structured error the model can act on."""
    message = str(exc)
    lowered = message.lower()
    if run.tripped == "timeout" or (lowered == "interrupted" and run.tripped is None):
        return ToolError(
            "timeout",
            f"the query ran past the {run.limits.timeout_s:g} s deadline and was stopped",
            "add selective WHERE conditions, avoid cross joins, or add LIMIT",
        )
    if run.tripped == "step_limit":
        return ToolError(
            "step_limit",
            f"the query exceeded {run.limits.max_vm_steps:,} SQLite VM steps and was stopped",
            "add selective WHERE conditions, avoid cross joins, or add LIMIT",
        )
    if run.denied is not None or "not authorized" in lowered or "readonly" in lowered:
        return ToolError("forbidden", run.denied or message, "only read-only SELECT queries run here")
    if "one statement at a time" in lowered:
        return ToolError(
            "too_many_statements",
            "only one SQL statement per call is allowed",
            "send one statement, without ';' between statements",
        )
    if lowered.startswith("no such table"):
        return _name_error(schema, "no_such_table", message)
    if lowered.startswith("no such column"):
        return _name_error(schema, "no_such_column", message)
    if "syntax error" in lowered or "incomplete input" in lowered or "unrecognized token" in lowered:
        return ToolError("syntax", message)
    if lowered.startswith("no such function"):
        return ToolError("other", message, _function_hint(message.split(":", 1)[-1].strip()))
    if lowered.startswith("ambiguous column name"):
        return ToolError("other", message, "qualify the column with its table name or alias, e.g. T1.id")
    if "too big" in lowered:
        return ToolError("other", f"{message}: a value may be at most {MAX_VALUE_BYTES // (1 << 20)} MiB")
    return ToolError("other", message or type(exc).__name__)


def _name_error(schema_of: Callable[[], dict[str, list[str]]], kind: str, message: str) -> ToolError:
    bad = message.split(":", 1)[1].strip() if ":" in message else ""
    try:
        schema = schema_of()
    except DataError:
        return ToolError(kind, message)
    if kind == "no_such_table":
        close = close_matches(bad.split(".")[-1], list(schema))
        hint = " or ".join(repr(t) for t in close)
        return ToolError(kind, message, f"did you mean {hint}?" if close else list_hint("tables", list(schema)))
    owners: dict[str, list[str]] = {}
    for table, columns in schema.items():
        for col in columns:
            owners.setdefault(col, []).append(table)
    close = close_matches(bad.split(".")[-1], list(owners))
    if not close:
        hint = "check the column names with the schema (a qualifier must be a table name or alias in FROM)"
        return ToolError(kind, message, hint)
    hint = " or ".join(f"{c!r} (table {', '.join(owners[c][:3])})" for c in close)
    return ToolError(kind, message, f"did you mean {hint}?")


_FUNCTION_HINTS = {
    "year": "strftime('%Y', col)",
    "month": "strftime('%m', col)",
    "day": "strftime('%d', col)",
    "now": "date('now') or datetime('now')",
    "curdate": "date('now')",
    "datediff": "julianday(a) - julianday(b)",
    "concat": "a || b",
    "len": "length(x)",
    "isnull": "ifnull(x, y)",
    "if": "iif(cond, a, b) or CASE WHEN",
    "to_date": "date(x)",
    "str_to_date": "date(x)",
    "date_format": "strftime(format, x)",
    "extract": "strftime(format, x)",
    "left": "substr(x, 1, n)",
    "right": "substr(x, -n)",
    "position": "instr(x, y)",
    "locate": "instr(x, y)",
    "ceil": "CAST(x AS INTEGER) + (x > CAST(x AS INTEGER))",
    "floor": "CAST(x AS INTEGER) for x >= 0",
    "truncate": "CAST(x AS INTEGER)",
}
"""SQLite spellings of functions other SQL dialects have (models often reach for them)."""


def _function_hint(name: str) -> str:
    hint = _FUNCTION_HINTS.get(name.lower())
    if hint:
        return f"SQLite has no {name}(); use {hint}"
    return "use a built-in SQLite function (e.g. strftime, substr, instr, ifnull, cast)"
