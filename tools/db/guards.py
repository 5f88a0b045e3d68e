"""The guards on every read-only connection (see ``tools.db.connection``): the authorizer
policy, the VM-step / deadline progress handler, the watchdog thread, and the SQLite
limits, installed once per connection by ``open_readonly``."""

from __future__ import annotations

import heapq
import itertools
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from tools.db.limits import DENIED_FUNCTIONS, INTERNAL_LIMITS, SCHEMA_TABLES, QueryLimits

BUSY_TIMEOUT_S = 5.0
MAX_VALUE_BYTES = 32 * 1024 * 1024
MAX_SQL_BYTES = 1_000_000
PROGRESS_EVERY = 1000  # VM instructions between progress-handler calls
WATCHDOG_GRACE_S = 0.05  # the watchdog fires this long after the deadline (backstop only)


@dataclass
class Run:
    """State of one execution, read by the authorizer and progress handler."""

    limits: QueryLimits
    deadline: float
    steps: int = 0
    tripped: str | None = None  # "timeout" | "step_limit"
    denied: str | None = None  # why the authorizer refused
    schema_query: bool = False


@dataclass
class Slot:
    """Per-connection policy and current run (the guards are installed once).

    A connection serves one ``QueryLimits`` policy, so SQLite's prepared-statement cache
    never reuses a statement that was authorized under another policy. ``schema_sql``
    remembers which cached statements read the schema (the authorizer only runs when a
    statement is prepared, not when a cached one is reused).
    """

    limits: QueryLimits
    run: Run | None = None
    schema_sql: dict[str, bool] = field(default_factory=dict)


_ACTION_NAMES: dict[int, str] = {
    getattr(sqlite3, name): name[len("SQLITE_") :]
    for name in dir(sqlite3)
    if name.startswith("SQLITE_")
    and name[len("SQLITE_") :]
    in {
        "CREATE_INDEX",
        "CREATE_TABLE",
        "CREATE_TEMP_INDEX",
        "CREATE_TEMP_TABLE",
        "CREATE_TEMP_TRIGGER",
        "CREATE_TEMP_VIEW",
        "CREATE_TRIGGER",
        "CREATE_VIEW",
        "DELETE",
        "DROP_INDEX",
        "DROP_TABLE",
        "DROP_TEMP_INDEX",
        "DROP_TEMP_TABLE",
        "DROP_TEMP_TRIGGER",
        "DROP_TEMP_VIEW",
        "DROP_TRIGGER",
        "DROP_VIEW",
        "INSERT",
        "PRAGMA",
        "READ",
        "SELECT",
        "TRANSACTION",
        "UPDATE",
        "ATTACH",
        "DETACH",
        "ALTER_TABLE",
        "REINDEX",
        "ANALYZE",
        "CREATE_VTABLE",
        "DROP_VTABLE",
        "FUNCTION",
        "SAVEPOINT",
        "RECURSIVE",
    }
}


def _authorizer(slot: Slot) -> Callable[[int, str | None, str | None, str | None, str | None], int]:
    def authorize(action: int, arg1: str | None, arg2: str | None, _db: str | None, _trig: str | None) -> int:
        # Outside ``execute`` (a caller using ``Database.connect()`` directly) the
        # connection's own policy applies, without a deadline.
        run = slot.run or Run(slot.limits, float("inf"))
        verdict, reason = _decide(run, action, arg1, arg2)
        if verdict == sqlite3.SQLITE_DENY and run.denied is None:
            run.denied = reason
        return verdict

    return authorize


def _decide(run: Run, action: int, arg1: str | None, arg2: str | None) -> tuple[int, str]:
    """The authorizer's policy: reads pass, everything else is refused with a reason."""
    if action in (sqlite3.SQLITE_SELECT, sqlite3.SQLITE_RECURSIVE):
        return sqlite3.SQLITE_OK, ""
    if action == sqlite3.SQLITE_READ:
        if (arg1 or "").lower() in SCHEMA_TABLES:
            run.schema_query = True
        return sqlite3.SQLITE_OK, ""
    if action == sqlite3.SQLITE_FUNCTION:
        name = (arg2 or "").lower()
        if name in DENIED_FUNCTIONS:
            return sqlite3.SQLITE_DENY, f"the function {name}() is not allowed"
        return sqlite3.SQLITE_OK, ""
    if action == sqlite3.SQLITE_PRAGMA:
        name = (arg1 or "").lower()
        if name in run.limits.allowed_pragmas:
            run.schema_query = True
            return sqlite3.SQLITE_OK, ""
        allowed = ", ".join(sorted(run.limits.allowed_pragmas)) or "none"
        return sqlite3.SQLITE_DENY, f"PRAGMA {name} is not allowed (read-only metadata PRAGMAs allowed here: {allowed})"
    if action == sqlite3.SQLITE_UPDATE and (arg1 or "").lower() in SCHEMA_TABLES:
        # Preparing a table-valued pragma_x() reports an UPDATE of sqlite_master; IGNORE
        # turns any such update into a no-op, so nothing can be written this way.
        return sqlite3.SQLITE_IGNORE, ""
    what = _ACTION_NAMES.get(action, f"action {action}").replace("_", " ")
    target = f" {arg1}" if arg1 else ""
    return sqlite3.SQLITE_DENY, f"{what}{target} is not allowed: the database is read-only"


def _progress(slot: Slot) -> Callable[[], int]:
    def handler() -> int:
        run = slot.run
        if run is None:
            return 0
        run.steps += PROGRESS_EVERY
        limit = run.limits.max_vm_steps
        if limit is not None and run.steps > limit:
            run.tripped = run.tripped or "step_limit"
            return 1
        if time.monotonic() > run.deadline:
            run.tripped = run.tripped or "timeout"
            return 1
        return 0

    return handler


class Interruptible(Protocol):
    """A connection the watchdog can stop (``sqlite3.Connection``, a DuckDB connection)."""

    def interrupt(self) -> None: ...


class _Watchdog:
    """One daemon thread that interrupts connections whose run overran its deadline.

    The progress handler catches almost every overrun; this covers a single VM operation
    that runs long without yielding to the handler. For DuckDB, which has no progress
    handler, it is the deadline itself (``tools.db.duckdb_backend``).
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int]] = []
        self._armed: dict[int, tuple[Interruptible, Run]] = {}
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None

    def arm(self, conn: Interruptible, run: Run) -> int:
        token = next(self._ids)
        with self._cond:
            self._armed[token] = (conn, run)
            entry = (run.deadline + WATCHDOG_GRACE_S, token)
            heapq.heappush(self._heap, entry)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="sqlite-watchdog", daemon=True)
                self._thread.start()
            if self._heap[0] is entry:
                self._cond.notify()  # the watcher sleeps until the earliest deadline
        return token

    def disarm(self, token: int) -> None:
        with self._cond:
            self._armed.pop(token, None)

    def _loop(self) -> None:
        while True:
            with self._cond:
                while self._heap and self._heap[0][1] not in self._armed:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._cond.wait()
                    continue
                due, token = self._heap[0]
                wait = due - time.monotonic()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                heapq.heappop(self._heap)
                conn, run = self._armed.pop(token)
                run.tripped = run.tripped or "timeout"
                conn.interrupt()


WATCHDOG = _Watchdog()


def lenient_text(data: bytes) -> str:
    """text_factory for cells that are not valid UTF-8: replace bad bytes, never crash."""
    return data.decode("utf-8", errors="replace")


def open_readonly(
    path: str | Path, limits: QueryLimits = INTERNAL_LIMITS, busy_timeout_s: float = BUSY_TIMEOUT_S
) -> tuple[sqlite3.Connection, Slot]:
    """Open ``path`` read-only with every guard installed, under the authorizer policy of
    ``limits``; returns the connection and the slot through which ``execute`` hands the
    guards their current run."""
    uri = "file:" + urllib.parse.quote(str(Path(path).resolve())) + "?mode=ro"
    conn = sqlite3.connect(uri, uri=True, timeout=busy_timeout_s, isolation_level=None, cached_statements=64)
    conn.execute("PRAGMA query_only = ON")
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
    conn.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, MAX_SQL_BYTES)
    conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
    slot = Slot(limits)
    conn.set_authorizer(_authorizer(slot))
    conn.set_progress_handler(_progress(slot), PROGRESS_EVERY)
    return conn, slot
