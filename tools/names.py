"""Resolve model-written table and column names against the real schema
(case-insensitive), with "did you mean" errors for near misses."""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from tools.connection import Database
from tools.results import ToolError


def _close(name: str, choices: Sequence[str]) -> list[str]:
    lowered = {c.lower(): c for c in choices}
    return [lowered[c] for c in difflib.get_close_matches(name.lower(), list(lowered), n=3, cutoff=0.6)]


def _hint(name: str, choices: Sequence[str], what: str) -> str:
    close = _close(name, choices)
    if close:
        return "did you mean " + " or ".join(repr(c) for c in close) + "?"
    shown = ", ".join(choices[:30]) + (", …" if len(choices) > 30 else "")
    return f"the {what} are: {shown}"


def resolve_table(db: Database, table: str) -> str | ToolError:
    """The real spelling of ``table``, or a ``no_such_table`` error with a suggestion."""
    schema = db.schema()
    for real in schema:
        if real.lower() == table.strip().lower():
            return real
    return ToolError("no_such_table", f"no such table: {table}", _hint(table, list(schema), "tables"))


def resolve_columns(db: Database, table: str, columns: Sequence[str]) -> list[str] | ToolError:
    """The real spellings of ``columns`` of ``table`` (all columns when empty)."""
    real_columns = db.schema()[table]
    if not columns:
        return list(real_columns)
    by_lower = {c.lower(): c for c in real_columns}
    out = []
    for col in columns:
        found = by_lower.get(col.strip().lower())
        if found is None:
            return ToolError(
                "no_such_column",
                f"no such column: {table}.{col}",
                _hint(col, real_columns, f"columns of {table}"),
            )
        out.append(found)
    return out


def quote_identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
