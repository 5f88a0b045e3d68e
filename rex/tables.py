"""Result tables as the metrics see them: a successful result or a failure.

The metrics accept ``tools.QueryResult`` / ``tools.ToolError`` (what ``tools.execute``
returns) and, so that fixtures and notebooks stay simple, a plain ``(columns, rows)``
pair. Duck typing keeps ``rex`` importable without opening a database.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tools.errors import ToolkitError

TIMEOUT_KINDS: frozenset[str] = frozenset({"timeout", "step_limit"})
"""ToolError kinds that mean "ran out of budget" rather than "is wrong SQL"."""
TOO_LARGE_KIND = "too_large"
"""The ToolError kind of a result past the result budget (``QueryLimits.max_result_rows`` /
``max_result_bytes``): it ran, but is too large to hold and score."""

Row = tuple[Any, ...]


class MetricInputError(ToolkitError, ValueError):
    """A metric was handed something that is not a result table (programmer error)."""


@dataclass(frozen=True)
class Table:
    """A complete query result: column names and every row, as tuples."""

    columns: tuple[str, ...]
    rows: tuple[Row, ...]

    @property
    def empty(self) -> bool:
        return not self.rows


@dataclass(frozen=True)
class Failure:
    """A query that did not produce a result. ``timeout`` separates budget overruns
    (timeouts, VM step limits) and ``too_large`` results past the result budget from
    errors (syntax, unknown table, forbidden, ...)."""

    kind: str
    message: str = ""

    @property
    def timeout(self) -> bool:
        return self.kind in TIMEOUT_KINDS

    @property
    def too_large(self) -> bool:
        return self.kind == TOO_LARGE_KIND


ResultLike = Any | tuple[Sequence[str], Sequence[Sequence[Any]]]
"""``tools.QueryResult`` | ``tools.ToolError`` | ``(columns, rows)`` | ``Table`` | ``Failure``."""


def as_outcome(value: ResultLike) -> Table | Failure:
    """Coerce any accepted result form to ``Table`` or ``Failure``.

    A ``QueryResult`` cut by a row cap (``truncated``) is refused: comparing a prefix of
    the rows is exactly the bug this package exists to avoid; execute with
    ``tools.PRESETS["metric"]`` (no row cap).
    """
    if isinstance(value, (Table, Failure)):
        return value
    kind = getattr(value, "kind", None)
    if isinstance(kind, str) and hasattr(value, "message"):
        return Failure(kind=kind, message=str(getattr(value, "message", "")))
    rows = getattr(value, "rows", None)
    columns = getattr(value, "columns", None)
    if rows is not None and columns is not None:
        if getattr(value, "truncated", False):
            raise MetricInputError(
                "the result was truncated by a row cap; metrics need the whole result — "
                'execute with tools.PRESETS["metric"] (max_rows=None)'
            )
        return Table(tuple(str(c) for c in columns), tuple(tuple(r) for r in rows))
    if isinstance(value, (tuple, list)) and len(value) == 2:
        columns, rows = value
        if isinstance(columns, (tuple, list)) and isinstance(rows, (tuple, list)):
            return Table(tuple(str(c) for c in columns), tuple(tuple(r) for r in rows))
    raise MetricInputError(
        f"expected a tools.QueryResult, a tools.ToolError or a (columns, rows) pair, "
        f"got {type(value).__name__}: {str(value)[:80]!r}"
    )


def as_table(value: ResultLike, role: str) -> Table:
    """Like ``as_outcome`` but a failure is a programmer error here (``role`` names the
    argument in the message)."""
    out = as_outcome(value)
    if isinstance(out, Failure):
        raise MetricInputError(
            f"{role} is a failed query ({out.kind}: {out.message[:80]}); this metric needs "
            "two results — check execution_match's outcome first"
        )
    return out
