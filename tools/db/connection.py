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
* one statement per call; presets may require SELECT/WITH;
* a result budget (``QueryLimits.max_result_rows`` / ``max_result_bytes``; the metric
  preset has one): fetching stops once the rows held pass it, and the run is ``too_large``.

Each thread gets its own connection (``Database.connect``), so readers never share a
connection and never see "database is locked" from each other.

``Database`` is the SQLite implementation of ``tools.db.backend.Backend``; ``get_database``
opens a ``.duckdb`` file with ``tools.db.duckdb_backend.DuckDBDatabase`` instead.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tools.db.backend import SQLITE_HEADER, Backend, dialect_of
from tools.db.budget import collect_result
from tools.db.duckdb_backend import DuckDBDatabase
from tools.db.guards import WATCHDOG, Run, Slot, lenient_text, open_readonly
from tools.db.limits import INTERNAL_LIMITS, QueryLimits
from tools.db.postgres_backend import PostgresDatabase, is_postgres_locator
from tools.db.results import QueryResult, ToolError
from tools.db.sql_errors import classify
from tools.db.statements import check_statement_kind as _check_statement_kind
from tools.db.statements import first_keyword as _first_keyword
from tools.db.statements import sha256_file as _sha256_file
from tools.db.statements import strip_sql as _strip_sql
from tools.errors import DataError

if TYPE_CHECKING:
    from tools.schema.profile import DatabaseProfile

# --------------------------------------------------------------------------- Database


class Database(Backend):
    """One SQLite file: its path, content hash, thread-local read-only connections, and
    cached schema / profile. Get instances through ``get_database`` (one per path)."""

    dialect = "sqlite"

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

    def _connection(self, limits: QueryLimits) -> tuple[sqlite3.Connection, Slot]:
        """One connection per thread and authorizer policy. The policy is the set of
        allowed PRAGMAs (everything else in ``QueryLimits`` is enforced per run), so a
        handful of connections serve every preset and every ``max_rows`` override."""
        pairs: dict[frozenset[str], tuple[sqlite3.Connection, Slot]] | None = getattr(self._local, "pairs", None)
        if pairs is None:
            pairs = self._local.pairs = {}
        pair = pairs.get(limits.allowed_pragmas)
        if pair is None:
            pair = pairs[limits.allowed_pragmas] = open_readonly(self.path, limits)
        return pair

    def run(self, sql: str, limits: QueryLimits, as_written: bool = False) -> QueryResult | ToolError:
        """One statement under ``limits`` (see ``execute``)."""
        return _execute_sqlite(self, sql, limits, as_written)

    def query_internal(self, sql: str, params: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
        """Run the toolkit's own read-only query (metadata, profiling) and return all rows.

        Same guards as model queries but no row cap or step limit; raises ``DataError``
        on failure, since a failure here is a toolkit or database problem."""
        conn, slot = self._connection(INTERNAL_LIMITS)
        run = Run(INTERNAL_LIMITS, time.monotonic() + INTERNAL_LIMITS.timeout_s)
        slot.run = run
        previous = conn.text_factory
        conn.text_factory = lenient_text
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
        slot.run = Run(INTERNAL_LIMITS, time.monotonic() + INTERNAL_LIMITS.timeout_s)
        previous = conn.text_factory
        conn.text_factory = lenient_text
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


_DATABASES: dict[tuple[str, str], Backend] = {}
_DATABASES_LOCK = threading.Lock()


def get_database(path: str | os.PathLike[str], db_id: str | None = None) -> Backend:
    """The process-wide backend for ``path`` (one object per path and db_id): a
    ``PostgresDatabase`` for a ``postgresql://…#schema`` locator, a ``DuckDBDatabase`` for a
    DuckDB file (by its signature, whatever its name; by a ``.duckdb`` suffix if it has none),
    a SQLite ``Database`` for any other."""
    if is_postgres_locator(path):
        locator = str(path)
        with _DATABASES_LOCK:
            found = _DATABASES.get((locator, db_id or ""))
            if found is None:
                found = _DATABASES[(locator, db_id or "")] = PostgresDatabase(locator, db_id)
            return found
    resolved = Path(path).expanduser().resolve()
    key = (str(resolved), db_id or resolved.stem)
    with _DATABASES_LOCK:
        db = _DATABASES.get(key)
        if db is None:
            db = DuckDBDatabase(resolved, db_id) if dialect_of(resolved) == "duckdb" else Database(resolved, db_id)
            _DATABASES[key] = db
        return db


def _check_sqlite_file(path: Path) -> None:
    if not path.is_file():
        raise DataError(f"no SQLite database at {path}; pass the path of an existing .sqlite file")
    with path.open("rb") as handle:
        header = handle.read(len(SQLITE_HEADER))
    if header and header != SQLITE_HEADER:
        raise DataError(f"{path} is not a SQLite 3 database (bad header {header!r})")


# --------------------------------------------------------------------------- execute


def execute(db: Backend, sql: str, limits: QueryLimits, as_written: bool = False) -> QueryResult | ToolError:
    """Run one statement on ``db`` (any backend) under ``limits``: ``db.run(sql, limits, as_written)``."""
    return db.run(sql, limits, as_written)


def _execute_sqlite(db: Database, sql: str, limits: QueryLimits, as_written: bool = False) -> QueryResult | ToolError:
    """Run one statement on ``db``'s read-only SQLite connection under ``limits``.

    Never raises on SQL text: every failure is a ``ToolError`` (kind, message, "did you
    mean" suggestion for near-miss table and column names).

    ``as_written=True`` runs ``sql`` exactly as Python's sqlite3 ``cursor.execute`` does
    (what BIRD's evaluation script does, ``rex.bird_ex``): nothing is trimmed; a text that
    is only whitespace, comments or semicolons runs as no statement and returns no rows;
    anything but whitespace or comments after the first statement (even a second ``;``) is
    ``too_many_statements``; a cell that is not valid UTF-8 is an error instead of being
    decoded with replacement characters. The read-only guards apply as always.
    """
    if not isinstance(sql, str):
        return ToolError("bad_arguments", f"sql must be a string, got {type(sql).__name__}")
    text = sql if as_written else _strip_sql(sql)
    if not as_written:
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
        if as_written:
            return ToolError("other", str(exc), "a cell of the result is not valid UTF-8 text")
        # Some cell is not valid UTF-8: run again decoding with replacement characters.
        conn.text_factory = lenient_text
        try:
            return _run_guarded(db, conn, slot, text, limits, started)
        finally:
            conn.text_factory = str


def _run_guarded(
    db: Database, conn: sqlite3.Connection, slot: Slot, text: str, limits: QueryLimits, started: float
) -> QueryResult | ToolError:
    run = Run(limits, started + limits.timeout_s)
    slot.run = run
    token = WATCHDOG.arm(conn, run)
    cursor: sqlite3.Cursor | None = None
    try:
        cursor = conn.execute(text)
        if run.schema_query:
            slot.schema_sql[text] = True
        elif slot.schema_sql.get(text):
            run.schema_query = True  # a cached statement: the authorizer did not run again
        columns = tuple(d[0] for d in cursor.description or ())
        return collect_result(cursor, columns, run, started, sqlite3.OperationalError)
    except sqlite3.OperationalError as exc:
        if "decode" in str(exc).lower() and conn.text_factory is str:
            raise
        return classify(exc, run, db.schema)
    except (sqlite3.Error, sqlite3.Warning, ValueError, OverflowError, MemoryError) as exc:
        return classify(exc, run, db.schema)
    finally:
        if cursor is not None:
            cursor.close()
        WATCHDOG.disarm(token)
        slot.run = None
