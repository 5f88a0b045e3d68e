"""A PostgreSQL query's rows through a server-side cursor opened in one round trip
(``tools.db.postgres_backend`` runs every query through ``ServerRows``).

psycopg 3's pipeline mode sends ``BEGIN READ ONLY``, the run's settings (``statement_timeout``
from the time left; ``cursor_tuple_fraction`` = 1, as every row is read or counted), the
``DECLARE … NO SCROLL CURSOR FOR <query>`` and its first ``FETCH`` together and reads the
answers once. The server runs them in order and skips every command after the first that
fails (up to the pipeline's sync), so the query never runs outside the read-only
transaction or without its timeout; the first error is raised when the pipeline ends. The
extended protocol refuses a second statement in the query's text.

A run under a row cap and no result budget (the executor tools) asks for the cap's rows
plus one, and the same round trip counts the rest with ``MOVE FORWARD ALL`` (no cell
crosses the wire) and ends with ``ROLLBACK``: one round trip per query, as a plain
``execute``. Otherwise (a result budget: fetched in chunks, stopped as soon as it is
exceeded) a first fetch that returns fewer rows than it asked for has read the whole
result, so no further ``FETCH`` is sent, and the caller's rollback is a second round trip.
The caller rolls back whatever happened (a no-op when the transaction has ended).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tools.db.duckdb_backend import to_sqlite_value

if TYPE_CHECKING:
    import psycopg

CURSOR = "tool_rows"
"""The cursor's name: one at a time per connection, each run's rollback closes it."""
SETTINGS = "SELECT set_config('statement_timeout', %s, true), set_config('cursor_tuple_fraction', '1', true)"
"""The run's settings, local to its transaction (``true``): the rollback undoes them."""
PLAIN_OIDS = frozenset({16, 17, 18, 19, 20, 21, 23, 25, 26, 700, 701, 705, 1042, 1043, 1700})
"""Types whose loaded values need no conversion (the backend's loaders already convert
bool, numeric and the date, time and JSON types)."""


class ServerRows:
    """The rows of ``query`` (psycopg placeholders, ``params``) from a cursor declared in a
    read-only transaction with ``statement_timeout`` = ``timeout_ms``; ``first`` rows come in
    the round trip that opens it. Cells of the types the loaders leave as Python objects
    (arrays, geometric and network types) come back through ``to_sqlite_value``.

    ``end=True`` (a caller that takes at most ``first`` rows): the same round trip counts
    the rows past them (``MOVE FORWARD ALL``) and ends the transaction (``ROLLBACK``), so a
    capped query costs one round trip. If the count fails after the rows came (the deadline),
    ``count_rest`` raises its error, for the caller to decide."""

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        query: str,
        params: tuple[Any, ...],
        timeout_ms: int,
        first: int,
        *,
        end: bool = False,
    ) -> None:
        self._conn = conn
        commands, fetched, moved = conn.cursor(), conn.cursor(), conn.cursor()
        self._count_error: psycopg.Error | None = None

        def send() -> None:
            commands.execute("BEGIN READ ONLY")
            commands.execute(SETTINGS, (f"{timeout_ms}ms",))
            commands.execute(f"DECLARE {CURSOR} NO SCROLL CURSOR FOR {query}", params)
            fetched.execute(f"FETCH FORWARD {first} FROM {CURSOR}")
            if end:
                moved.execute(f"MOVE FORWARD ALL IN {CURSOR}")
                commands.execute("ROLLBACK")

        failed = first_error_of_pipeline(conn, send)
        if failed is not None:
            if not end or fetched.pgresult is None:  # the rows did not come: the query failed
                raise failed
            self._count_error = failed  # the server skipped the ROLLBACK: the caller's rollback ends it
        described = fetched.description or []
        self.columns = tuple(d.name for d in described)
        self._convert = [d.type_code not in PLAIN_OIDS for d in described]
        self._any = any(self._convert)
        self._held: list[Any] = self._fix(fetched.fetchall())
        self._ended = end or len(self._held) < first
        self._moved = max(moved.rowcount, 0) if end else 0

    def _fix(self, rows: list[Any]) -> list[Any]:
        if not self._any or not rows:
            return rows
        flags = self._convert
        return [tuple(to_sqlite_value(v) if f else v for v, f in zip(row, flags, strict=True)) for row in rows]

    def _fetch(self, size: int | None) -> list[Any]:
        """``size`` more rows from the server (None: all), or none once the cursor has ended."""
        if self._ended:
            return []
        count = "ALL" if size is None else str(size)
        rows = self._fix(self._conn.execute(f"FETCH FORWARD {count} FROM {CURSOR}").fetchall())
        self._ended = size is None or len(rows) < size
        return rows

    def fetchmany(self, size: int = 1) -> list[Any]:
        """Up to ``size`` rows: the held ones first, then from the server (DB-API: fewer only at the end)."""
        taken, self._held = self._held[:size], self._held[size:]
        if len(taken) < size:
            taken += self._fetch(size - len(taken))
        return taken

    def fetchall(self) -> list[Any]:
        taken, self._held = self._held, []
        return taken + self._fetch(None)

    def count_rest(self) -> int:
        """How many rows are left (held or on the server), counted without fetching their cells."""
        if self._count_error is not None:
            raise self._count_error
        left, self._held = len(self._held) + self._moved, []
        self._moved = 0
        if not self._ended:
            moved = self._conn.execute(f"MOVE FORWARD ALL IN {CURSOR}")
            left += max(moved.rowcount, 0)
            self._ended = True
        return left

    @property
    def rest(self) -> _CountedRest:
        """The rows left, for ``collect_result``'s count past the cap: empty rows, counted on the server."""
        return _CountedRest(self)


class _CountedRest:
    """``ServerRows.count_rest`` as a row source of empty rows (``collect_result`` counts them)."""

    def __init__(self, rows: ServerRows) -> None:
        self._rows, self._left = rows, -1

    def fetchmany(self, size: int = 1) -> list[Any]:
        if self._left < 0:
            self._left = self._rows.count_rest()
        take = min(size, self._left)
        self._left -= take
        return [()] * take

    def fetchall(self) -> list[Any]:
        return self.fetchmany(1 << 62)


def first_error_of_pipeline(conn: psycopg.Connection[Any], send: Callable[[], None]) -> psycopg.Error | None:
    """Run ``send`` (the statements) in one pipeline; the first server error, or None. The
    error is kept inside the pipeline's block, not raised through its exit, where psycopg would
    log its own "pipeline aborted" as a warning on the console for every failed query."""
    import psycopg

    failed: psycopg.Error | None = None
    try:
        with conn.pipeline():
            try:
                send()
            except psycopg.Error as exc:
                failed = exc
    except psycopg.Error as exc:  # the first error surfaced at the pipeline's sync
        failed = failed or exc
    return failed
