"""Result and error values returned by every tool (small dataclasses with a JSON form).

Tools never raise on model text: a failed call is a ``ToolError`` value whose ``kind`` the
agents and rewards can count (``syntax``, ``timeout``, ...), and whose ``message`` and
``suggestion`` are written so the model can repair its next call.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

ERROR_KINDS: frozenset[str] = frozenset(
    {
        "syntax",
        "no_such_table",
        "no_such_column",
        "forbidden",
        "timeout",
        "step_limit",
        "too_many_statements",
        "too_large",
        "bad_arguments",
        "unknown_tool",
        "unknown_database",
        "other",
    }
)

BLOB_PREVIEW_BYTES = 16


@dataclass(frozen=True)
class ToolError:
    """A structured tool failure. ``kind`` is one of ``ERROR_KINDS``."""

    kind: str
    message: str
    suggestion: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in ERROR_KINDS:
            raise ValueError(f"unknown ToolError kind {self.kind!r}; use one of {sorted(ERROR_KINDS)}")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "message": self.message}
        if self.suggestion:
            out["suggestion"] = self.suggestion
        return out


@dataclass(frozen=True)
class QueryResult:
    """Rows of one query. ``rows`` hold raw Python values (int, float, str, bytes, None) so
    metrics compare what SQLite returned; ``to_json`` makes them printable.

    ``row_count`` is the number of rows the query produced (it can exceed ``len(rows)``
    when the row cap cut the output; then ``truncated`` is true). When counting the rows
    past the cap ran out of time or steps, ``row_count_is_lower_bound`` is true.
    """

    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    row_count: int
    truncated: bool
    elapsed_s: float
    row_count_is_lower_bound: bool = False

    def to_json(self, timing: bool = False) -> dict[str, Any]:
        """The JSON form. ``timing`` adds ``elapsed_s``; it is off by default because
        observations shown to a model must be identical from run to run."""
        out: dict[str, Any] = {
            "columns": list(self.columns),
            "rows": [[json_cell(v) for v in row] for row in self.rows],
            "row_count": self.row_count,
            "truncated": self.truncated,
        }
        if timing:
            out["elapsed_s"] = round(self.elapsed_s, 4)
        if self.row_count_is_lower_bound:
            out["row_count_is_lower_bound"] = True
        return out


def json_cell(value: Any) -> Any:
    """A JSON-safe form of one SQLite value: blobs become a short description (models
    cannot use raw bytes), non-finite floats become strings (JSON has no Infinity)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
        preview = data[:BLOB_PREVIEW_BYTES].hex()
        more = "…" if len(data) > BLOB_PREVIEW_BYTES else ""
        return f"<blob {len(data)} bytes: {preview}{more}>"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value
