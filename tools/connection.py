"""The one read-only SQLite connection helper every tool, reward and evaluation uses.

Layers of defence, each enough on its own for the case it covers:

* the file is opened with a ``file:…?mode=ro`` URI and ``PRAGMA query_only=ON``;
* an authorizer allows only reads (SELECT, column reads, recursive CTEs, functions other
  than ``load_extension`` & co., and the metadata PRAGMAs a preset allows); every write,
  ATTACH/DETACH, transaction, temp table and state-changing PRAGMA is denied, and the
  denial reason is reported to the model;
* a progress handler counts VM steps (step limit) and checks a wall-clock deadline; a
  watchdog thread interrupts the connection if a single long VM operation overruns;
* SQLite limits cap a value at 32 MiB (``randomblob(1e9)`` fails instead of allocating
  1 GB), the SQL text at 1 MB, and attached databases at 0;
* one statement per call; presets may require SELECT/WITH.

Each thread gets its own connection (``Database.connect``), so readers never share a
connection and never see "database is locked" from each other.
"""

from __future__ import annotations

import difflib
import hashlib
import heapq
import itertools
import re
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tools.errors import ConfigError, DataError
from tools.results import QueryResult, ToolError

if TYPE_CHECKING:
    from tools.profile import DatabaseProfile

BUSY_TIMEOUT_S = 5.0
MAX_VALUE_BYTES = 32 * 1024 * 1024
MAX_SQL_BYTES = 1_000_000
PROGRESS_EVERY = 1000  # VM instructions between progress-handler calls
WATCHDOG_GRACE_S = 0.05  # the watchdog fires this long after the deadline (backstop only)

METADATA_PRAGMAS: frozenset[str] = frozenset(
    {"table_info", "table_xinfo", "index_list", "index_info", "foreign_key_list"}
)
READONLY_PRAGMAS: frozenset[str] = METADATA_PRAGMAS | {"index_xinfo"}
"""PRAGMAs that only read the schema; the only ones a preset may allow."""

DENIED_FUNCTIONS: frozenset[str] = frozenset(
    {"load_extension", "fts3_tokenizer", "readfile", "writefile", "edit", "sqlite_dbpage"}
)
SCHEMA_TABLES: frozenset[str] = frozenset({"sqlite_master", "sqlite_schema", "sqlite_temp_master"})
SELECT_KEYWORDS: frozenset[str] = frozenset({"SELECT", "WITH", "VALUES"})
OTHER_STATEMENT_KEYWORDS: frozenset[str] = frozenset(
    {
        "INSERT", "UPDATE", "DELETE", "REPLACE", "UPSERT", "CREATE", "DROP", "ALTER", "ATTACH",
        "DETACH", "PRAGMA", "BEGIN", "COMMIT", "END", "ROLLBACK", "SAVEPOINT", "RELEASE",
        "VACUUM", "REINDEX", "ANALYZE", "EXPLAIN",
    }
)
"""First keywords of non-SELECT statements: refused up front with a clear message (any
other first word goes to SQLite, which reports the syntax error)."""


@dataclass(frozen=True)
class QueryLimits:
    """What one execution may do and how much of its result comes back.

    ``max_rows``: rows returned (``None`` = all); ``max_cell_chars``: text cells longer than
    this are cut with a marker; ``timeout_s``: wall-clock deadline; ``max_vm_steps``: SQLite
    VM instruction budget (``None`` = unlimited); ``select_only``: the statement must start
    with SELECT/WITH/VALUES (or PRAGMA when ``allowed_pragmas`` is non-empty);
    ``allowed_pragmas``: read-only metadata PRAGMAs allowed (statement or table-valued
    ``pragma_x(...)`` form); ``full_schema_queries``: queries that read ``sqlite_master``
    or a metadata PRAGMA ignore the row and cell caps (DualSQL).
    """

    max_rows: int | None = 100
    max_cell_chars: int | None = None
    timeout_s: float = 5.0
    max_vm_steps: int | None = 15_000_000
    select_only: bool = True
    allowed_pragmas: frozenset[str] = frozenset()
    full_schema_queries: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "allowed_pragmas", frozenset(p.lower() for p in self.allowed_pragmas))
        bad = sorted(self.allowed_pragmas - READONLY_PRAGMAS)
        if bad:
            raise ConfigError(
                f"QueryLimits.allowed_pragmas holds {bad}, which are not read-only metadata "
                f"PRAGMAs; allow only some of {sorted(READONLY_PRAGMAS)}"
            )
        for name in ("max_rows", "max_cell_chars", "max_vm_steps"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 0):
                raise ConfigError(f"QueryLimits.{name}={value!r}; use a non-negative int or None")
        if not self.timeout_s > 0:
            raise ConfigError(f"QueryLimits.timeout_s={self.timeout_s!r}; use a positive number of seconds")


PRESETS: dict[str, QueryLimits] = {
    # ReToolSQL sqlite_query: SELECT/WITH only, 100 rows, 15M VM steps.
    "retoolsql": QueryLimits(max_rows=100, timeout_s=5.0, max_vm_steps=15_000_000),
    # TRUST-SQL execute_sql_query: schema discovery through metadata PRAGMAs.
    "trustsql": QueryLimits(max_rows=100, timeout_s=5.0, allowed_pragmas=METADATA_PRAGMAS),
    # DualSQL executor: 10 rows, 150-char cells, schema queries in full.
    "dualsql": QueryLimits(
        max_rows=10,
        max_cell_chars=150,
        timeout_s=5.0,
        allowed_pragmas=METADATA_PRAGMAS,
        full_schema_queries=True,
    ),
    # Rewards and evaluation (EX/REX/QATCH): whole results, 30 s per query.
    "metric": QueryLimits(max_rows=None, timeout_s=30.0, max_vm_steps=None),
}

INTERNAL_LIMITS = QueryLimits(
    max_rows=None, timeout_s=600.0, max_vm_steps=None, allowed_pragmas=READONLY_PRAGMAS
)
"""For the toolkit's own metadata and profiling queries (still read-only)."""


# --------------------------------------------------------------------------- guards


@dataclass
class _Run:
    """State of one execution, read by the authorizer and progress handler."""

    limits: QueryLimits
    deadline: float
    steps: int = 0
    tripped: str | None = None  # "timeout" | "step_limit"
    denied: str | None = None  # why the authorizer refused
    schema_query: bool = False


@dataclass
class _Slot:
    """Per-connection policy and current run (the guards are installed once).

    A connection serves one ``QueryLimits`` policy, so SQLite's prepared-statement cache
    never reuses a statement that was authorized under another policy. ``schema_sql``
    remembers which cached statements read the schema (the authorizer only runs when a
    statement is prepared, not when a cached one is reused).
    """

    limits: QueryLimits
    run: _Run | None = None
    schema_sql: dict[str, bool] = field(default_factory=dict)


_ACTION_NAMES: dict[int, str] = {
    getattr(sqlite3, name): name[len("SQLITE_") :]
    for name in dir(sqlite3)
    if name.startswith("SQLITE_")
    and name[len("SQLITE_") :]
    in {
        "CREATE_INDEX", "CREATE_TABLE", "CREATE_TEMP_INDEX", "CREATE_TEMP_TABLE",
        "CREATE_TEMP_TRIGGER", "CREATE_TEMP_VIEW", "CREATE_TRIGGER", "CREATE_VIEW", "DELETE",
        "DROP_INDEX", "DROP_TABLE", "DROP_TEMP_INDEX", "DROP_TEMP_TABLE", "DROP_TEMP_TRIGGER",
        "DROP_TEMP_VIEW", "DROP_TRIGGER", "DROP_VIEW", "INSERT", "PRAGMA", "READ", "SELECT",
        "TRANSACTION", "UPDATE", "ATTACH", "DETACH", "ALTER_TABLE", "REINDEX", "ANALYZE",
        "CREATE_VTABLE", "DROP_VTABLE", "FUNCTION", "SAVEPOINT", "RECURSIVE",
    }
}


def _authorizer(slot: _Slot) -> Callable[[int, str | None, str | None, str | None, str | None], int]:
    def authorize(action: int, arg1: str | None, arg2: str | None, _db: str | None, _trig: str | None) -> int:
        # Outside ``execute`` (a caller using ``Database.connect()`` directly) the
        # connection's own policy applies, without a deadline.
        run = slot.run or _Run(slot.limits, float("inf"))
        verdict, reason = _decide(run, action, arg1, arg2)
        if verdict == sqlite3.SQLITE_DENY and run.denied is None:
            run.denied = reason
        return verdict

    return authorize


def _decide(run: _Run, action: int, arg1: str | None, arg2: str | None) -> tuple[int, str]:
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


def _progress(slot: _Slot) -> Callable[[], int]:
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


class _Watchdog:
    """One daemon thread that interrupts connections whose run overran its deadline.

    The progress handler catches almost every overrun; this covers a single VM operation
    that runs long without yielding to the handler.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int]] = []
        self._armed: dict[int, tuple[sqlite3.Connection, _Run]] = {}
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None

    def arm(self, conn: sqlite3.Connection, run: _Run) -> int:
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


_WATCHDOG = _Watchdog()


def _lenient_text(data: bytes) -> str:
    """text_factory for cells that are not valid UTF-8: replace bad bytes, never crash."""
    return data.decode("utf-8", errors="replace")


def open_readonly(
    path: str | Path, limits: QueryLimits = INTERNAL_LIMITS, busy_timeout_s: float = BUSY_TIMEOUT_S
) -> tuple[sqlite3.Connection, _Slot]:
    """Open ``path`` read-only with every guard installed, under the authorizer policy of
    ``limits``; returns the connection and the slot through which ``execute`` hands the
    guards their current run."""
    uri = "file:" + urllib.parse.quote(str(Path(path).resolve())) + "?mode=ro"
    conn = sqlite3.connect(uri, uri=True, timeout=busy_timeout_s, isolation_level=None, cached_statements=64)
    conn.execute("PRAGMA query_only = ON")
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
    conn.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, MAX_SQL_BYTES)
    conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
    slot = _Slot(limits)
    conn.set_authorizer(_authorizer(slot))
    conn.set_progress_handler(_progress(slot), PROGRESS_EVERY)
    return conn, slot


# --------------------------------------------------------------------------- Database


class Database:
    """One SQLite file: its path, content hash, thread-local read-only connections, and
    cached schema / profile. Get instances through ``get_database`` (one per path)."""

    def __init__(self, path: str | Path, db_id: str | None = None) -> None:
        self.path = Path(path).resolve()
        _check_sqlite_file(self.path)
        self.db_id = db_id or self.path.stem
        self._local = threading.local()
        self._lock = threading.Lock()
        self._profile_lock = threading.Lock()
        self._hash_key: tuple[int, int] | None = None
        self._hash = ""
        self._schema: tuple[str, dict[str, list[str]]] | None = None
        self._profile: tuple[str, DatabaseProfile] | None = None

    def __repr__(self) -> str:
        return f"Database(db_id={self.db_id!r}, path={str(self.path)!r})"

    @property
    def content_hash(self) -> str:
        """sha256 hex of the file bytes; recomputed when the file's size or mtime change."""
        stat = self.path.stat()
        key = (stat.st_size, stat.st_mtime_ns)
        with self._lock:
            if key != self._hash_key:
                self._hash = _sha256_file(self.path)
                self._hash_key = key
            return self._hash

    def connect(self, limits: QueryLimits | None = None) -> sqlite3.Connection:
        """This thread's read-only connection (guards installed, created on first use).

        Used directly, it enforces the read-only authorizer of ``limits`` (default: the
        toolkit's internal policy: reads and metadata PRAGMAs) but no deadline or row cap;
        ``tools.execute`` adds those."""
        return self._connection(limits or INTERNAL_LIMITS)[0]

    def _connection(self, limits: QueryLimits) -> tuple[sqlite3.Connection, _Slot]:
        """One connection per thread and authorizer policy. The policy is the set of
        allowed PRAGMAs (everything else in ``QueryLimits`` is enforced per run), so a
        handful of connections serve every preset and every ``max_rows`` override."""
        pairs: dict[frozenset[str], tuple[sqlite3.Connection, _Slot]] | None = getattr(self._local, "pairs", None)
        if pairs is None:
            pairs = self._local.pairs = {}
        pair = pairs.get(limits.allowed_pragmas)
        if pair is None:
            pair = pairs[limits.allowed_pragmas] = open_readonly(self.path, limits)
        return pair

    def execute(self, sql: str, limits: QueryLimits | str = "retoolsql") -> QueryResult | ToolError:
        """``execute(self, sql, limits)``; ``limits`` may name a preset."""
        return execute(self, sql, PRESETS[limits] if isinstance(limits, str) else limits)

    def query_internal(self, sql: str, params: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
        """Run the toolkit's own read-only query (metadata, profiling) and return all rows.

        Same guards as model queries but no row cap or step limit; raises ``DataError``
        on failure, since a failure here is a toolkit or database problem."""
        conn, slot = self._connection(INTERNAL_LIMITS)
        run = _Run(INTERNAL_LIMITS, time.monotonic() + INTERNAL_LIMITS.timeout_s)
        slot.run = run
        previous = conn.text_factory
        conn.text_factory = _lenient_text
        try:
            return conn.execute(sql, tuple(params)).fetchall()
        except sqlite3.Error as exc:
            raise DataError(f"{self.path}: internal query failed ({exc}): {sql}") from exc
        finally:
            conn.text_factory = previous
            slot.run = None

    def iter_internal(self, sql: str, params: Iterable[Any] = (), chunk: int = 10_000) -> Iterator[tuple[Any, ...]]:
        """Like ``query_internal`` but streams the rows (large scans, bounded memory).
        Consume it before running another internal query in the same thread."""
        conn, slot = self._connection(INTERNAL_LIMITS)
        slot.run = _Run(INTERNAL_LIMITS, time.monotonic() + INTERNAL_LIMITS.timeout_s)
        previous = conn.text_factory
        conn.text_factory = _lenient_text
        try:
            cursor = conn.execute(sql, tuple(params))
            while rows := cursor.fetchmany(chunk):
                yield from rows
            cursor.close()
        except sqlite3.Error as exc:
            raise DataError(f"{self.path}: internal query failed ({exc}): {sql}") from exc
        finally:
            conn.text_factory = previous
            slot.run = None

    def schema(self) -> dict[str, list[str]]:
        """``{table: [column, ...]}`` for every table and view, in declaration order."""
        digest = self.content_hash
        cached = self._schema
        if cached is not None and cached[0] == digest:
            return {t: list(c) for t, c in cached[1].items()}
        names = self.query_internal(
            "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') "
            "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY rowid"
        )
        schema = {
            name: [row[1] for row in self.query_internal("SELECT * FROM pragma_table_info(?)", (name,))]
            for (name,) in names
        }
        self._schema = (digest, schema)
        return {t: list(c) for t, c in schema.items()}

    def profile(self) -> DatabaseProfile:
        """The database profile, cached in memory and on disk by content hash."""
        from tools.profile import load_or_build_profile

        digest = self.content_hash
        with self._profile_lock:  # threads wait for one build instead of each building
            cached = self._profile
            if cached is not None and cached[0] == digest:
                return cached[1]
            profile = load_or_build_profile(self)
            self._profile = (digest, profile)
            return profile


_DATABASES: dict[tuple[str, str], Database] = {}
_DATABASES_LOCK = threading.Lock()


def get_database(path: str | Path, db_id: str | None = None) -> Database:
    """The process-wide ``Database`` for ``path`` (one object per path and db_id)."""
    resolved = Path(path).expanduser().resolve()
    key = (str(resolved), db_id or resolved.stem)
    with _DATABASES_LOCK:
        db = _DATABASES.get(key)
        if db is None:
            db = Database(resolved, db_id)
            _DATABASES[key] = db
        return db


def _check_sqlite_file(path: Path) -> None:
    if not path.is_file():
        raise DataError(f"no SQLite database at {path}; pass the path of an existing .sqlite file")
    with path.open("rb") as handle:
        header = handle.read(16)
    if header and header != b"SQLite format 3\x00":
        raise DataError(f"{path} is not a SQLite 3 database (bad header {header[:16]!r})")


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


# --------------------------------------------------------------------------- execute

_COMMENT_OR_SPACE = re.compile(r"(?:\s+|--[^\n]*(?:\n|$)|/\*.*?(?:\*/|$))", re.DOTALL)
_FIRST_WORD = re.compile(r"[A-Za-z_]+")


def _strip_sql(sql: str) -> str:
    """Drop trailing whitespace and semicolons (``SELECT 1;;`` is still one statement)."""
    return sql.strip().rstrip(";").rstrip()


def _first_keyword(sql: str) -> str:
    pos = 0
    while True:
        match = _COMMENT_OR_SPACE.match(sql, pos)
        if not match or match.end() == pos:
            break
        pos = match.end()
    word = _FIRST_WORD.match(sql, pos)
    return word.group(0).upper() if word else sql[pos : pos + 10]


def _check_statement_kind(keyword: str, limits: QueryLimits) -> ToolError | None:
    """Refuse a non-SELECT statement by its first keyword, with a clear message."""
    if not limits.select_only or keyword in SELECT_KEYWORDS or keyword not in OTHER_STATEMENT_KEYWORDS:
        return None
    if keyword == "PRAGMA" and limits.allowed_pragmas:
        return None
    kinds = "SELECT/WITH" + (" or a metadata PRAGMA" if limits.allowed_pragmas else "")
    return ToolError(
        "forbidden",
        f"only {kinds} statements are allowed here (got {keyword or 'nothing'}); the database is read-only",
        "rewrite the request as a single SELECT query",
    )


def execute(db: Database, sql: str, limits: QueryLimits) -> QueryResult | ToolError:
    """Run one statement on ``db``'s read-only connection under ``limits``.

    Never raises on SQL text: every failure is a ``ToolError`` (kind, message, "did you
    mean" suggestion for near-miss table and column names).
    """
    if not isinstance(sql, str):
        return ToolError("bad_arguments", f"sql must be a string, got {type(sql).__name__}")
    text = _strip_sql(sql)
    keyword = _first_keyword(text)
    if not keyword.strip():
        return ToolError("syntax", "the SQL is empty", "write one SELECT statement")
    refused = _check_statement_kind(keyword, limits)
    if refused is not None:
        return refused
    try:
        conn, slot = db._connection(limits)
    except (sqlite3.Error, OSError) as exc:
        return ToolError("other", f"cannot open database {db.db_id!r}: {exc}")
    started = time.monotonic()
    try:
        return _run_guarded(db, conn, slot, text, limits, started)
    except sqlite3.OperationalError as exc:
        if "decode" not in str(exc).lower():
            raise
        # Some cell is not valid UTF-8: run again decoding with replacement characters.
        conn.text_factory = _lenient_text
        try:
            return _run_guarded(db, conn, slot, text, limits, started)
        finally:
            conn.text_factory = str


def _run_guarded(
    db: Database, conn: sqlite3.Connection, slot: _Slot, text: str, limits: QueryLimits, started: float
) -> QueryResult | ToolError:
    run = _Run(limits, started + limits.timeout_s)
    slot.run = run
    token = _WATCHDOG.arm(conn, run)
    cursor: sqlite3.Cursor | None = None
    try:
        cursor = conn.execute(text)
        if run.schema_query:
            slot.schema_sql[text] = True
        elif slot.schema_sql.get(text):
            run.schema_query = True  # a cached statement: the authorizer did not run again
        return _collect(cursor, run, started)
    except sqlite3.OperationalError as exc:
        if "decode" in str(exc).lower() and conn.text_factory is str:
            raise
        return _classify(exc, run, db)
    except (sqlite3.Error, sqlite3.Warning, ValueError, OverflowError, MemoryError) as exc:
        return _classify(exc, run, db)
    finally:
        if cursor is not None:
            cursor.close()
        _WATCHDOG.disarm(token)
        slot.run = None


def _collect(cursor: sqlite3.Cursor, run: _Run, started: float) -> QueryResult:
    limits = run.limits
    columns = tuple(d[0] for d in cursor.description or ())
    uncapped = limits.full_schema_queries and run.schema_query
    cap = None if uncapped else limits.max_rows
    if cap is None:
        rows = cursor.fetchall()
        count, lower_bound = len(rows), False
    else:
        rows = cursor.fetchmany(cap + 1)
        count, lower_bound = len(rows), False
        if count > cap:  # more rows than the cap: count the rest, keep the first ``cap``
            count, lower_bound = _count_rest(cursor, count, run)
            rows = rows[:cap]
    cell_cap = None if uncapped else limits.max_cell_chars
    if cell_cap is not None:
        rows = [tuple(_cut_cell(v, cell_cap) for v in row) for row in rows]
    return QueryResult(
        columns=columns,
        rows=tuple(rows),
        row_count=count,
        truncated=count > len(rows),
        elapsed_s=time.monotonic() - started,
        row_count_is_lower_bound=lower_bound,
    )


def _count_rest(cursor: sqlite3.Cursor, fetched: int, run: _Run) -> tuple[int, bool]:
    """Count the rows past the cap; if that runs out of time or steps, report a lower
    bound instead of failing a query whose first rows are already in hand."""
    count = fetched
    try:
        while True:
            chunk = cursor.fetchmany(4096)
            if not chunk:
                return count, False
            count += len(chunk)
    except sqlite3.OperationalError:
        if run.tripped is None:
            raise
        return count, True


def _cut_cell(value: Any, limit: int) -> Any:
    if isinstance(value, str) and len(value) > limit:
        return f"{value[:limit]}…[+{len(value) - limit} chars]"
    return value


# --------------------------------------------------------------------------- errors


def _classify(exc: BaseException, run: _Run, db: Database) -> ToolError:
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
        return ToolError("too_many_statements", "only one SQL statement per call is allowed", "send one statement, without ';' between statements")
    if lowered.startswith("no such table"):
        return _name_error(db, "no_such_table", message)
    if lowered.startswith("no such column"):
        return _name_error(db, "no_such_column", message)
    if "syntax error" in lowered or "incomplete input" in lowered or "unrecognized token" in lowered:
        return ToolError("syntax", message)
    if lowered.startswith("no such function"):
        return ToolError("other", message, _function_hint(message.split(":", 1)[-1].strip()))
    if lowered.startswith("ambiguous column name"):
        return ToolError("other", message, "qualify the column with its table name or alias, e.g. T1.id")
    if "too big" in lowered:
        return ToolError("other", f"{message}: a value may be at most {MAX_VALUE_BYTES // (1 << 20)} MiB")
    return ToolError("other", message or type(exc).__name__)


def _name_error(db: Database, kind: str, message: str) -> ToolError:
    bad = message.split(":", 1)[1].strip() if ":" in message else ""
    try:
        schema = db.schema()
    except DataError:
        return ToolError(kind, message)
    if kind == "no_such_table":
        close = _close_names(bad.split(".")[-1], list(schema))
        hint = " or ".join(repr(t) for t in close)
        return ToolError(kind, message, f"did you mean {hint}?" if close else _list_hint("tables", list(schema)))
    owners: dict[str, list[str]] = {}
    for table, columns in schema.items():
        for col in columns:
            owners.setdefault(col, []).append(table)
    close = _close_names(bad.split(".")[-1], list(owners))
    if not close:
        return ToolError(kind, message, "check the column names with the schema (a qualifier must be a table name or alias in FROM)")
    hint = " or ".join(f"{c!r} (table {', '.join(owners[c][:3])})" for c in close)
    return ToolError(kind, message, f"did you mean {hint}?")


_FUNCTION_HINTS = {
    "year": "strftime('%Y', col)", "month": "strftime('%m', col)", "day": "strftime('%d', col)",
    "now": "date('now') or datetime('now')", "curdate": "date('now')", "datediff": "julianday(a) - julianday(b)",
    "concat": "a || b", "len": "length(x)", "isnull": "ifnull(x, y)", "if": "iif(cond, a, b) or CASE WHEN",
    "to_date": "date(x)", "str_to_date": "date(x)", "date_format": "strftime(format, x)",
    "extract": "strftime(format, x)", "left": "substr(x, 1, n)", "right": "substr(x, -n)",
    "position": "instr(x, y)", "locate": "instr(x, y)", "ceil": "CAST(x AS INTEGER) + (x > CAST(x AS INTEGER))",
    "floor": "CAST(x AS INTEGER) for x >= 0", "truncate": "CAST(x AS INTEGER)",
}
"""SQLite spellings of functions other SQL dialects have (models often reach for them)."""


def _function_hint(name: str) -> str:
    hint = _FUNCTION_HINTS.get(name.lower())
    if hint:
        return f"SQLite has no {name}(); use {hint}"
    return "use a built-in SQLite function (e.g. strftime, substr, instr, ifnull, cast)"


def _close_names(name: str, choices: list[str]) -> list[str]:
    """Up to three real names close to ``name`` (case-insensitive), original spelling."""
    lowered = {c.lower(): c for c in choices}
    return [lowered[c] for c in difflib.get_close_matches(name.lower(), list(lowered), n=3, cutoff=0.6)]


def _list_hint(what: str, names: list[str], limit: int = 20) -> str:
    shown = ", ".join(names[:limit]) + (", …" if len(names) > limit else "")
    return f"the {what} are: {shown}"
