"""The PostgreSQL backend: one schema of a server database read through the same tools,
guards and limits (psycopg 3).

A database here is a *locator*: a libpq URI naming a login role and database, with the
schema (the ``db_id``) after ``#``: ``postgresql://reader@host/bench#clinic``
(``postgres_locator``); databases that share one schema name their ``db_id`` after it:
``postgresql://reader@host/BIRD#public/financial``. ``tools.get_database`` opens a locator with this class; the
question's ``db_id`` picks the schema, which becomes the connection's ``search_path``, so
the questions' SQL names tables without a schema, as on SQLite.

Layers of defence (``tools.db.connection`` has SQLite's, ``tools.db.duckdb_backend`` DuckDB's):

* the role: the connection must be a role that can only read (no superuser, no INSERT /
  UPDATE / DELETE / TRUNCATE on any table of the schema, no CREATE on it), checked when
  the connection opens (``eval.data.postgres_copy`` creates such a role);
* every query runs in a ``READ ONLY`` transaction that is always rolled back, with
  ``statement_timeout`` set from the deadline, through a server-side cursor (``DECLARE …
  CURSOR FOR``: PostgreSQL refuses anything but a query there, and a data-modifying ``WITH``),
  all sent in one pipelined round trip (``tools.db.postgres_rows``: the server skips what
  follows a failed command); the session's ``default_transaction_read_only`` is on as well;
* one statement per call: the text is sent through the extended protocol, which refuses a
  second statement, and a text opening with a statement's keyword (``COPY``, ``SET``, ``DO``,
  ``CALL``, ``TRUNCATE`` …) is refused before it is sent;
* functions that reach outside the query are refused by name (wherever the name appears,
  quoted or not) before anything runs: ``set_config``, ``pg_terminate_backend`` /
  ``pg_cancel_backend``, advisory locks, large objects (``lo_*``), server files
  (``pg_read_file``, ``pg_ls_dir`` & co.), ``dblink``, and those that run SQL text
  (``query_to_xml``, ``ts_stat``, ``ts_rewrite``); so are ``U&"…"`` identifiers, which
  could spell them. Most fail on the role's privileges or the read-only transaction anyway;
  ``set_config`` and ``pg_terminate_backend`` would not (another reader's session);
* the deadline: ``statement_timeout`` on the server, and the shared watchdog thread
  (``tools.db.guards.WATCHDOG``) sends a cancel request when a run overruns across fetches.
  There is no step counter (``QueryLimits.max_vm_steps`` does not apply);
* the row cap, cell cap and result budget are applied while fetching
  (``tools.db.budget.collect_result``); the rows past the cap are counted with ``MOVE
  FORWARD ALL`` on the server, without being sent. A capped run without a result budget
  (the executor tools) is one round trip: the rows, the count and the rollback. A query
  naming the catalogue (``information_schema``, ``pg_catalog``, ``pg_class`` & co.) is a
  schema query: a preset with ``full_schema_queries`` returns it whole.

Not bounded here: the size of one value (SQLite caps it at 32 MiB): a cell such as
``repeat('x', 500000000)`` is built on the server and sent whole before the result budget
counts it; only the deadline limits it. A session the server ended (a restart, an idle
timeout) is replaced and the query run once more on a fresh one.

Cells come back as SQLite would return them: ``numeric`` → ``int`` when it has no
fractional digits (``SUM`` of ``bigint``) else ``float``; ``boolean`` → 0/1; dates, times,
timestamps and intervals → PostgreSQL's ISO text; ``json``/``jsonb`` → their text; arrays →
JSON text (``[1, 2]``, as DuckDB's lists); other types → their text.

``content_hash`` fingerprints the schema's columns and types plus each table's storage file
(``pg_relation_filenode``, new after ``TRUNCATE``) and its cumulative insert / update /
delete counters (``pg_stat_user_tables``): one catalogue query, no scan. It changes when
the content does once the writing session's statistics reach the server (PostgreSQL sends
them after a commit, within a minute at most; at once after ``pg_stat_force_next_flush()``,
which ``eval.data.postgres_copy`` calls).
"""

from __future__ import annotations

import atexit
import hashlib
import re
import threading
import time
import urllib.parse
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tools.db.backend import Backend
from tools.db.budget import FETCH_CHUNK, collect_result
from tools.db.guards import WATCHDOG, Run
from tools.db.limits import INTERNAL_LIMITS, QueryLimits
from tools.db.postgres_errors import classify_postgres
from tools.db.postgres_rows import ServerRows
from tools.db.results import QueryResult, ToolError
from tools.db.statements import first_keyword, strip_sql
from tools.errors import DataError

if TYPE_CHECKING:
    import psycopg

    from tools.schema.profile import DatabaseProfile

SCHEMES = ("postgresql://", "postgres://")
"""How a locator begins (``is_postgres_locator``)."""
STATEMENT_KEYWORDS = frozenset(
    "ABORT ALTER ANALYZE BEGIN CALL CHECKPOINT CLOSE CLUSTER COMMENT COMMIT COPY CREATE DEALLOCATE DECLARE "
    "DELETE DISCARD DO DROP END EXECUTE EXPLAIN FETCH GRANT IMPORT INSERT LISTEN LOAD LOCK MERGE MOVE NOTIFY "
    "PREPARE REASSIGN REFRESH REINDEX RELEASE RESET REVOKE ROLLBACK SAVEPOINT SECURITY SET SHOW START "
    "TRUNCATE UNLISTEN UPDATE VACUUM".split()
)
"""First words of PostgreSQL's statements that are not queries: refused up front with a clear
message (any other first word goes to the server, which reports the syntax error)."""
DENIED_FUNCTIONS = re.compile(
    r"""(?<![\w$])("?)(set_config|pg_terminate_backend|pg_cancel_backend|pg_(?:try_)?advisory\w*|"""
    r"""lo_(?:import|export|creat|create|unlink|from_bytea|put|get|open|close|write|read|lseek\w*|tell\w*|truncate\w*)|"""
    r"""pg_read_\w+|pg_ls_\w+|pg_stat_file|pg_file_\w+|dblink\w*|query_to_xml\w*|cursor_to_xml\w*|"""
    r"""ts_stat|ts_rewrite|pg_reload_conf|pg_rotate_logfile|pg_stat_reset\w*|pg_notify)\1(?![\w$])|U&(")""",
    re.IGNORECASE,
)
"""Functions refused by name wherever the name appears as a word, quoted or not, called or
not (a comment between a name and its ``(`` hides nothing); identifiers written with
Unicode escapes (``U&"…"``) are refused too, as they could spell any of these names."""
SCHEMA_NAMES = re.compile(
    r"\b(information_schema|pg_catalog|pg_(?:class|attribute|namespace|tables|views|constraint|indexes|index|type|description))\b",
    re.IGNORECASE,
)
"""Catalogue reads: a query naming one is a schema query (``QueryLimits.full_schema_queries``)."""
_TEXT_TYPES = ("date", "time", "timetz", "timestamp", "timestamptz", "interval", "json", "jsonb", "uuid")

_ADAPTERS: Any = None


def is_postgres_locator(path: object) -> bool:
    """Whether ``path`` is a PostgreSQL locator (a ``postgresql://`` URI) rather than a file."""
    return isinstance(path, str) and path.startswith(SCHEMES)


def postgres_locator(dsn: str, schema: str, db_id: str | None = None) -> str:
    """The locator of ``schema`` in the database ``dsn`` names: ``<dsn>#<schema>``; with a
    ``db_id`` other than the schema (databases sharing one schema, as in BIRD mini-dev's
    PostgreSQL dump), ``<dsn>#<schema>/<db_id>``."""
    if not is_postgres_locator(dsn):
        raise DataError(f"data.dsn={dsn!r} is not a PostgreSQL URI; write postgresql://user@host/database")
    shared = f"/{urllib.parse.quote(db_id, safe='')}" if db_id and db_id != schema else ""
    return f"{dsn.partition('#')[0]}#{urllib.parse.quote(schema, safe='')}{shared}"


def _adapters() -> Any:
    """psycopg's loaders, with bool, numeric, dates, times and JSON loaded as SQLite would hold them."""
    global _ADAPTERS
    if _ADAPTERS is None:
        import psycopg
        from psycopg.adapt import AdaptersMap, Loader
        from psycopg.types.string import TextLoader

        class BoolLoader(Loader):
            def load(self, data: Any) -> int:
                return 1 if bytes(data) == b"t" else 0

        class NumericLoader(Loader):
            def load(self, data: Any) -> int | float:
                text = bytes(data).decode()
                if text.lstrip("-").isdigit():
                    return int(text)
                return float(text)  # NaN and Infinity included

        adapters = AdaptersMap(psycopg.adapters)
        adapters.register_loader("bool", BoolLoader)
        adapters.register_loader("numeric", NumericLoader)
        for name in _TEXT_TYPES:
            adapters.register_loader(name, TextLoader)
        _ADAPTERS = adapters
    return _ADAPTERS


class _Canceller:
    """What the watchdog interrupts: a cancel request to the connection's server process."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def interrupt(self) -> None:
        import psycopg

        try:
            self._conn.cancel_safe(timeout=5.0)
        except psycopg.Error:
            pass  # the server is gone: the fetch fails on its own


class PostgresDatabase(Backend):
    """One schema of a PostgreSQL database, read-only: a connection per thread."""

    dialect = "postgres"

    def __init__(self, locator: str, db_id: str | None = None, descriptions: str | Path | None = None) -> None:
        if not is_postgres_locator(locator):
            raise DataError(f"{locator!r} is not a PostgreSQL locator; write postgresql://user@host/database#schema")
        dsn, _, fragment = locator.partition("#")
        schema, _, shared_id = fragment.partition("/")  # a quoted name holds no "/"
        self.dsn = dsn
        self.schema_name = urllib.parse.unquote(schema) or "public"
        self.db_id = db_id or urllib.parse.unquote(shared_id) or self.schema_name
        # Description files (BIRD's database_description) sit in <descriptions>/<db_id>/; the
        # profile reads them beside ``path``. Without a folder, ``path`` names none that exists.
        base = Path(descriptions) if descriptions else Path("/nonexistent-postgres-descriptions")
        self.path = base / self.db_id / self.db_id
        self._local = threading.local()
        self._lock = threading.Lock()
        self._profile_lock = threading.Lock()
        self._connections: list[psycopg.Connection[Any]] = []
        self._schema: tuple[str, dict[str, list[str]]] | None = None
        self._profile: tuple[str, DatabaseProfile] | None = None
        self._exit_hook = False

    def __repr__(self) -> str:
        return f"PostgresDatabase(db_id={self.db_id!r}, locator={self.locator!r})"

    @property
    def locator(self) -> str:
        return postgres_locator(self.dsn, self.schema_name, self.db_id)

    # ------------------------------------------------------------------ connections

    def connection(self) -> psycopg.Connection[Any]:
        """This thread's connection: read-only transactions, ``search_path`` the schema,
        the role checked to be read-only (``DataError`` otherwise)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None and not conn.closed and not conn.broken:
            return conn
        if conn is not None:
            self._drop(conn)
        import psycopg

        try:
            # Autocommit: every run opens its own READ ONLY transaction (tools.db.postgres_rows).
            # No prepared statements: psycopg forgets them at each rollback (a DEALLOCATE more).
            conn = psycopg.connect(
                self.dsn, context=_adapters(), connect_timeout=10, autocommit=True, prepare_threshold=None
            )
        except psycopg.Error as exc:
            raise DataError(f"cannot connect to PostgreSQL for {self.db_id!r}: {exc}".strip()) from exc
        try:
            found = conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = %s", (self.schema_name,)).fetchone()
            if not found or not found[0]:
                raise DataError(f"PostgreSQL database has no schema {self.schema_name!r} (db_id {self.db_id!r})")
            conn.execute("SELECT set_config('search_path', %s, false)", (_quote(self.schema_name),))
            # Session-wide too: a statement that ever ran outside a run's transaction could not write.
            conn.execute("SELECT set_config('default_transaction_read_only', 'on', false)")
            _check_read_only_role(conn, self.schema_name)
        except BaseException:
            conn.close()
            raise
        self._local.conn = conn
        with self._lock:
            self._connections.append(conn)
            if not self._exit_hook:
                atexit.register(self.close)
                self._exit_hook = True
        return conn

    def close(self) -> None:
        """Close every thread's connection (a later query opens them again)."""
        with self._lock:
            for conn in self._connections:
                conn.close()
            self._connections = []
            self._local = threading.local()

    def _drop(self, conn: psycopg.Connection[Any]) -> None:
        conn.close()
        with self._lock:
            if conn in self._connections:
                self._connections.remove(conn)
        self._local.conn = None

    # ------------------------------------------------------------------ running

    def run(self, sql: str, limits: QueryLimits, as_written: bool = False) -> QueryResult | ToolError:
        """One query under ``limits``; never raises on SQL text (see the module docstring)."""
        import psycopg

        if not isinstance(sql, str):
            return ToolError("bad_arguments", f"sql must be a string, got {type(sql).__name__}")
        text = sql if as_written else strip_sql(sql)
        keyword = first_keyword(text)
        if not keyword.strip():
            if as_written:  # only whitespace or comments: no statement, no rows
                return QueryResult((), (), 0, False, 0.0)
            return ToolError("syntax", "the SQL is empty", "write one SELECT statement")
        refused = _refuse(text, keyword)
        if refused is not None:
            return refused
        started = time.monotonic()
        for attempt in (1, 2):  # a second time only on a fresh connection when the first had died
            try:
                conn = self.connection()
            except DataError as exc:
                return ToolError("other", f"cannot open database {self.db_id!r}: {exc}")
            run = Run(limits, started + limits.timeout_s, schema_query=bool(SCHEMA_NAMES.search(text)))
            outcome = self._run_on(conn, text, run, started)
            if not isinstance(outcome, psycopg.Error):
                return outcome
            dead = isinstance(outcome, psycopg.OperationalError) and conn.closed  # closed by _rollback
            if attempt == 2 or not dead or run.tripped is not None or time.monotonic() >= run.deadline:
                # Classified after the rollback: "did you mean" reads the schema on a usable connection.
                return classify_postgres(outcome, run, self._safe_schema)
            # else the server closed the session (a restart, an idle timeout): run it on a fresh one
        raise AssertionError("unreachable: the second try always returns")

    def _run_on(
        self, conn: psycopg.Connection[Any], text: str, run: Run, started: float
    ) -> QueryResult | ToolError | psycopg.Error:
        """One try of ``run`` on ``conn``; a driver error is returned, not raised, for ``run`` to classify."""
        import psycopg

        token = WATCHDOG.arm(_Canceller(conn), run)
        try:
            timeout_ms = max(1, int((run.deadline - time.monotonic()) * 1000))
            limits = run.limits
            cap = None if limits.full_schema_queries and run.schema_query else limits.max_rows
            # A cap and no budget: collect_result takes cap + 1 rows at once, so the opening
            # round trip counts the rest and ends the run. With a budget: its first chunk.
            budget = limits.max_result_rows is not None or limits.max_result_bytes is not None
            end = cap is not None and not budget
            first = FETCH_CHUNK if cap is None else cap + 1 if end else min(cap + 1, FETCH_CHUNK)
            # parameters (none): '%' doubled, the text parsed for placeholders, sent as one statement
            rows_in = ServerRows(conn, text.replace("%", "%%"), (), timeout_ms, first, end=end)
            return collect_result(rows_in, rows_in.columns, run, started, psycopg.Error, rest=rows_in.rest)
        except psycopg.Error as exc:
            return exc
        except (ValueError, OverflowError, MemoryError) as exc:
            return ToolError("other", str(exc) or type(exc).__name__)
        finally:
            WATCHDOG.disarm(token)
            _rollback(self, conn)

    def _safe_schema(self) -> dict[str, list[str]]:
        try:
            return self.schema()
        except DataError:
            return {}

    def query_internal(self, sql: str, params: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
        """The toolkit's own read-only query (``?`` placeholders); every row, cells converted like ``run``'s."""
        return list(self.iter_internal(sql, params))

    def iter_internal(self, sql: str, params: Iterable[Any] = (), chunk: int = 10_000) -> Iterator[tuple[Any, ...]]:
        """Like ``query_internal`` but streams the rows through a server-side cursor."""
        import psycopg

        conn = self.connection()
        run = Run(INTERNAL_LIMITS, time.monotonic() + INTERNAL_LIMITS.timeout_s)
        token = WATCHDOG.arm(_Canceller(conn), run)
        try:
            rows = ServerRows(conn, qmark_to_format(sql), tuple(params), int(INTERNAL_LIMITS.timeout_s * 1000), chunk)
            while batch := rows.fetchmany(chunk):
                yield from batch
        except psycopg.Error as exc:
            raise DataError(f"{self.db_id}: internal query failed ({exc}): {sql}") from exc
        finally:
            WATCHDOG.disarm(token)
            _rollback(self, conn)

    # ------------------------------------------------------------------ catalogue

    @property
    def content_hash(self) -> str:
        """sha256 hex of the schema's columns and each table's storage and change counters."""
        rows = self.query_internal(
            "SELECT c.relname, c.relkind, pg_relation_filenode(c.oid), "
            "coalesce(s.n_tup_ins, 0), coalesce(s.n_tup_upd, 0), coalesce(s.n_tup_del, 0), "
            "(SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod), ',' ORDER BY a.attnum) "
            " FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped) "
            "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "LEFT JOIN pg_stat_all_tables s ON s.relid = c.oid "
            "WHERE n.nspname = ? AND c.relkind IN ('r', 'v', 'm', 'p', 'f') ORDER BY c.relname",
            (self.schema_name,),
        )
        return hashlib.sha256(repr((self.dsn.split("?")[0], self.schema_name, rows)).encode()).hexdigest()

    def schema(self) -> dict[str, list[str]]:
        """``{table: [column, ...]}`` for every table and view of the schema, from
        ``information_schema``: tables in creation order, columns in declaration order."""
        digest = self.content_hash
        cached = self._schema
        if cached is not None and cached[0] == digest:
            return {t: list(c) for t, c in cached[1].items()}
        rows = self.query_internal(
            "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = ? "
            "ORDER BY (quote_ident(table_schema) || '.' || quote_ident(table_name))::regclass::oid, ordinal_position",
            (self.schema_name,),
        )
        schema: dict[str, list[str]] = {}
        for table, column in rows:
            schema.setdefault(table, []).append(column)
        self._schema = (digest, schema)
        return {t: list(c) for t, c in schema.items()}


def _refuse(text: str, keyword: str) -> ToolError | None:
    """A ``forbidden`` error for a text that is not a query or calls a refused function."""
    if keyword in STATEMENT_KEYWORDS:
        return ToolError(
            "forbidden",
            f"{keyword} statements are not allowed: the database is read-only and only SELECT queries run",
            "rewrite the request as a single SELECT query",
        )
    denied = DENIED_FUNCTIONS.search(text)
    if denied is not None:
        what = f"the function {denied.group(2).lower()}()" if denied.group(2) else 'a U&"…" identifier'
        return ToolError(
            "forbidden",
            f"{what} is not allowed: queries here only read the tables",
            "rewrite the request as a single SELECT query over the tables",
        )
    return None


def _rollback(db: PostgresDatabase, conn: psycopg.Connection[Any]) -> None:
    """End the run's transaction (always a rollback); a connection that cannot is dropped."""
    import psycopg

    try:
        conn.rollback()
    except psycopg.Error:
        db._drop(conn)


def _check_read_only_role(conn: psycopg.Connection[Any], schema: str) -> None:
    row = conn.execute(
        "SELECT current_user, (SELECT rolsuper FROM pg_roles WHERE rolname = current_user), "
        "has_schema_privilege(%s, 'CREATE'), "
        "(SELECT string_agg(c.relname, ', ') FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        " WHERE n.nspname = %s AND c.relkind IN ('r', 'p') "
        " AND has_table_privilege(c.oid, 'INSERT, UPDATE, DELETE, TRUNCATE'))",
        (schema, schema),
    ).fetchone()
    user, superuser, create, writable = row if row else ("?", True, True, None)
    if superuser or create or writable:
        what = "is a superuser" if superuser else "may CREATE in the schema" if create else f"may write {writable}"
        raise DataError(
            f"PostgreSQL role {user!r} {what}; connect as a role that can only SELECT "
            "(python -m eval.data minibird --format postgres creates one: see docs/evaluation.md)"
        )


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


_QMARK = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|(\?)|(%)")


def qmark_to_format(sql: str) -> str:
    """The toolkit's ``?`` placeholders as psycopg's ``%s`` (``%`` doubled), leaving quoted text alone.

    >>> qmark_to_format("SELECT '?', x FROM t WHERE a = ? AND b LIKE 'a%'")
    "SELECT '?', x FROM t WHERE a = %s AND b LIKE 'a%%'"
    """

    def swap(match: re.Match[str]) -> str:
        if match.group(1):
            return "%s"
        if match.group(2):
            return "%%"
        return match.group(0).replace("%", "%%")

    return _QMARK.sub(swap, sql)
