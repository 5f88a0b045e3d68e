"""Fetching a result within a row and byte budget (``QueryLimits.max_result_rows`` /
``max_result_bytes``).

Rows are fetched in chunks; after each chunk the rows held so far are counted and their
memory estimated, and fetching stops at the first chunk past the budget: a result too
large to hold becomes a ``too_large`` error within a chunk of the budget, instead of
filling memory until the deadline. The estimate is cheap (no ``sys.getsizeof``): a fixed
cost per row and per cell, plus the length of each text and blob cell, computed column by
column so a column of numbers costs one type check per chunk.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Protocol

from tools.db.results import QueryResult, ToolError
from tools.db.statements import cut_cell

if TYPE_CHECKING:
    from tools.db.guards import Run

FETCH_CHUNK = 1024
"""Rows per ``fetchmany`` when a budget applies: how far past the budget a fetch can go."""
ROW_BYTES = 64
"""A row's tuple: header, GC links and allocator rounding (CPython, 64-bit)."""
CELL_BYTES = 48
"""One cell: the tuple's pointer and a number object (int 28, float 24 bytes) or the
fixed part of a text / blob object (49 / 33 bytes), rounded up."""

_FIXED_SIZE = frozenset({int, float, type(None)})
_SIZED = (str, bytes)


def estimate_bytes(rows: list[tuple[Any, ...]]) -> int:
    """Approximate Python memory of ``rows``: ``ROW_BYTES`` per row, ``CELL_BYTES`` per
    cell, plus ``len`` of each ``str`` / ``bytes`` cell.

    >>> estimate_bytes([(1, "abc"), (2, None)])
    323
    """
    if not rows:
        return 0
    total = len(rows) * (ROW_BYTES + len(rows[0]) * CELL_BYTES)
    for column in zip(*rows, strict=True):
        kinds = set(map(type, column))
        if kinds <= _FIXED_SIZE:
            continue
        if kinds <= {str} or kinds <= {bytes}:
            total += sum(map(len, column))
        else:
            total += sum(len(v) for v in column if isinstance(v, _SIZED))
    return total


class RowSource(Protocol):
    """What a fetch reads from: a ``sqlite3.Cursor`` or a backend's cursor wrapper."""

    def fetchmany(self, size: int = ..., /) -> list[Any]: ...

    def fetchall(self) -> list[Any]: ...


def fetch_within_budget(
    cursor: RowSource, limit: int | None, max_rows: int | None, max_bytes: int | None
) -> list[tuple[Any, ...]] | ToolError:
    """Up to ``limit`` rows of ``cursor`` (None: all), or a ``too_large`` error as soon as
    the rows held exceed ``max_rows`` rows or an estimated ``max_bytes`` bytes."""
    if max_rows is None and max_bytes is None:
        return cursor.fetchall() if limit is None else cursor.fetchmany(limit)
    rows: list[tuple[Any, ...]] = []
    size = 0
    while limit is None or len(rows) < limit:
        chunk = cursor.fetchmany(FETCH_CHUNK if limit is None else min(FETCH_CHUNK, limit - len(rows)))
        if not chunk:
            break
        rows += chunk
        if max_rows is not None and len(rows) > max_rows:
            return too_large(f"more than {max_rows:,} rows", "max_result_rows")
        if max_bytes is not None:
            size += estimate_bytes(chunk)
            if size > max_bytes:
                return too_large(f"more than {_mb(max_bytes)} (about {len(rows):,} rows so far)", "max_result_bytes")
    return rows


def too_large(what: str, knob: str) -> ToolError:
    """The error of a result past the budget; ``knob`` names the setting that raises it."""
    return ToolError(
        "too_large",
        f"the result holds {what} and was stopped; a result this large is not scored ({knob} sets the budget)",
        "add selective WHERE conditions, avoid cross joins, aggregate, or add LIMIT",
    )


def _mb(n: int) -> str:
    return f"{n / (1 << 20):,.1f} MiB" if n >= 1 << 20 else f"{n:,} bytes"


def collect_result(
    rows_in: RowSource,
    columns: tuple[str, ...],
    run: Run,
    started: float,
    driver_error: type[Exception],
    rest: RowSource | None = None,
) -> QueryResult | ToolError:
    """A query's result under ``run.limits``, the same on every backend: the first
    ``max_rows`` rows (within the result budget, each cell cut to ``max_cell_chars``) and
    the full row count. The rows past the cap are counted from ``rest`` (default
    ``rows_in``); if that trips the deadline (``driver_error`` with ``run.tripped`` set), the
    count is a lower bound instead of failing a query whose first rows are in hand."""
    limits = run.limits
    uncapped = limits.full_schema_queries and run.schema_query
    cap = None if uncapped else limits.max_rows
    fetched = fetch_within_budget(
        rows_in, None if cap is None else cap + 1, limits.max_result_rows, limits.max_result_bytes
    )
    if isinstance(fetched, ToolError):
        return fetched
    rows = fetched
    count, lower_bound = len(rows), False
    if cap is not None and count > cap:  # more rows than the cap: count the rest, keep the first ``cap``
        source = rest or rows_in
        try:
            while chunk := source.fetchmany(4096):
                count += len(chunk)
        except driver_error:
            if run.tripped is None:
                raise
            lower_bound = True
        rows = rows[:cap]
    cell_cap = None if uncapped else limits.max_cell_chars
    if cell_cap is not None:
        rows = [tuple(cut_cell(v, cell_cap) for v in row) for row in rows]
    return QueryResult(
        columns=columns,
        rows=tuple(rows),
        row_count=count,
        truncated=count > len(rows),
        elapsed_s=time.monotonic() - started,
        row_count_is_lower_bound=lower_bound,
    )
