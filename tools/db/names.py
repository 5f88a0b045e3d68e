"""Resolve model-written table and column names against the real schema
(case-insensitive), with "did you mean" errors for near misses."""

from __future__ import annotations

from collections.abc import Sequence

from tools.db.backend import Backend
from tools.db.results import ToolError
from tools.spelling import close_matches, list_hint


def _hint(name: str, choices: Sequence[str], what: str) -> str:
    close = close_matches(name, choices)
    if close:
        return "did you mean " + " or ".join(repr(c) for c in close) + "?"
    return list_hint(what, choices, limit=30)


def resolve_table(db: Backend, table: str) -> str | ToolError:
    """The real spelling of ``table``, or a ``no_such_table`` error with a suggestion."""
    schema = db.schema()
    for real in schema:
        if real.lower() == table.strip().lower():
            return real
    return ToolError("no_such_table", f"no such table: {table}", _hint(table, list(schema), "tables"))


def resolve_columns(db: Backend, table: str, columns: Sequence[str]) -> list[str] | ToolError:
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
