"""The DuckDB backend: a ``.duckdb`` file read through the same tools, guards and limits.

Layers of defence (``tools.db.connection`` has SQLite's):

* the file is opened ``read_only`` with ``enable_external_access=false`` (no file, URL or
  ``ATTACH`` access: ``read_csv``, ``COPY … TO``, ``httpfs`` URLs, ``INSTALL`` all fail),
  extension auto-loading and auto-installing off, community extensions off, spilling to a
  temporary folder off (nothing is ever written beside the file), a ``memory_limit``, and
  ``lock_configuration=true`` so no ``SET`` / ``PRAGMA`` can change any of it;
* DuckDB's own parser splits the text: one statement per call, and it must be a SELECT
  (``FROM t``, ``VALUES``, ``WITH``, ``DESCRIBE``, ``SHOW`` are SELECTs there); every other
  kind (``CREATE TEMP TABLE``, ``SET``, ``LOAD``, ``CHECKPOINT``, ``EXPORT``, ``CALL``, ``PRAGMA``)
  is refused before it runs;
* the deadline: the shared watchdog thread (``tools.db.guards.WATCHDOG``) calls the
  connection's ``interrupt()`` when a run overruns. DuckDB has no VM-step counter, so
  ``QueryLimits.max_vm_steps`` does not apply here (the memory limit bounds the work instead);
* the row cap, cell cap and result budget are applied while fetching, as for SQLite.

Cells are converted to the values SQLite would return (``to_sqlite_value``): ``bool`` →
``int``, ``Decimal`` → ``float``, dates and times → ISO text, ``HUGEINT`` stays ``int``;
lists, structs and maps become JSON text. Metrics therefore compare the same values on
either engine. The file is read as it was when first opened in the process (DuckDB keeps
its own cache); ``content_hash`` still follows the bytes on disk.
"""

from __future__ import annotations

import atexit
import datetime
import decimal
import json
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tools.db.backend import DUCKDB_MAGIC, Backend
from tools.db.budget import collect_result
from tools.db.guards import WATCHDOG, Run
from tools.db.limits import INTERNAL_LIMITS, QueryLimits
from tools.db.results import QueryResult, ToolError
from tools.db.statements import check_statement_kind, first_keyword, sha256_file, strip_sql
from tools.errors import DataError
from tools.spelling import close_matches, list_hint

if TYPE_CHECKING:
    import duckdb

    from tools.schema.profile import DatabaseProfile

MEMORY_LIMIT = "2GB"
"""Most memory one database's queries may hold together (project choice: a runaway join
fails with an out-of-memory error instead of swapping the machine)."""
THREADS = 2
"""Worker threads per database (project choice: rollouts run many queries at once)."""

READ_ONLY_CONFIG: dict[str, str | bool | int] = {
    "enable_external_access": False,
    "autoload_known_extensions": False,
    "autoinstall_known_extensions": False,
    "allow_community_extensions": False,
    "temp_directory": "",
    "memory_limit": MEMORY_LIMIT,
    "threads": THREADS,
    "lock_configuration": True,
}
"""The configuration every DuckDB connection is opened with (``read_only=True`` besides)."""

_SCHEMA_NAMES = re.compile(r"\b(information_schema|duckdb_\w+|pragma_\w+|sqlite_master|sqlite_schema)\b", re.I)
"""Catalogue reads: a query naming one is a schema query (``QueryLimits.full_schema_queries``)."""


class DuckDBDatabase(Backend):
    """One DuckDB file, read-only: a root connection opened once, a cursor per thread."""

    dialect = "duckdb"

    def __init__(self, path: str | Path, db_id: str | None = None) -> None:
        self.path = Path(path).resolve()
        _check_duckdb_file(self.path)
        self.db_id = db_id or self.path.stem
        self._local = threading.local()
        self._lock = threading.Lock()
        self._profile_lock = threading.Lock()
        self._root: duckdb.DuckDBPyConnection | None = None
        self._cursors: list[duckdb.DuckDBPyConnection] = []
        self._hash_key: tuple[int, int] | None = None
        self._hash = ""
        self._schema: tuple[str, dict[str, list[str]]] | None = None
        self._profile: tuple[str, DatabaseProfile] | None = None

    def __repr__(self) -> str:
        return f"DuckDBDatabase(db_id={self.db_id!r}, path={str(self.path)!r})"

    @property
    def content_hash(self) -> str:
        """sha256 hex of the file bytes; recomputed when the file's size or mtime change."""
        stat = self.path.stat()
        key = (stat.st_size, stat.st_mtime_ns)
        with self._lock:
            if key != self._hash_key:
                self._hash = sha256_file(self.path)
                self._hash_key = key
            return self._hash

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """This thread's connection to the database (DuckDB's ``cursor()`` of the root)."""
        cursor = getattr(self._local, "cursor", None)
        if cursor is None:
            import duckdb

            with self._lock:
                if self._root is None:
                    try:
                        self._root = duckdb.connect(str(self.path), read_only=True, config=dict(READ_ONLY_CONFIG))
                    except duckdb.Error as exc:
                        raise DataError(f"cannot open DuckDB database {self.path}: {exc}") from exc
                    atexit.register(self.close)
                cursor = self._local.cursor = self._root.cursor()
                self._cursors.append(cursor)
        return cursor

    def close(self) -> None:
        """Close every connection (at exit; a later query opens them again)."""
        with self._lock:
            for cursor in self._cursors:
                cursor.close()
            if self._root is not None:
                self._root.close()
            self._cursors, self._root = [], None
            self._local = threading.local()

    def run(self, sql: str, limits: QueryLimits, as_written: bool = False) -> QueryResult | ToolError:
        """One SELECT under ``limits``; never raises on SQL text (see the module docstring)."""
        import duckdb

        if not isinstance(sql, str):
            return ToolError("bad_arguments", f"sql must be a string, got {type(sql).__name__}")
        text = sql if as_written else strip_sql(sql)
        if not as_written:
            keyword = first_keyword(text)
            if not keyword.strip():
                return ToolError("syntax", "the SQL is empty", "write one SELECT statement")
            refused = check_statement_kind(keyword, limits)
            if refused is not None:
                return refused
        try:
            cursor = self.cursor()
        except DataError as exc:
            return ToolError("other", f"cannot open database {self.db_id!r}: {exc}")
        started = time.monotonic()
        run = Run(limits, started + limits.timeout_s)
        try:
            statements = cursor.extract_statements(text)
        except duckdb.Error as exc:
            return self._classify(exc, run)
        if not statements:
            if as_written:  # only whitespace or comments: no statement, no rows
                return QueryResult((), (), 0, False, time.monotonic() - started)
            return ToolError("syntax", "the SQL holds no statement", "write one SELECT statement")
        if len(statements) > 1:
            return ToolError(
                "too_many_statements",
                "only one SQL statement per call is allowed",
                "send one statement, without ';' between statements",
            )
        kind = statements[0].type.name
        if kind != "SELECT":
            return ToolError(
                "forbidden",
                f"{kind} statements are not allowed: the database is read-only and only SELECT queries run",
                "rewrite the request as a single SELECT query",
            )
        run.schema_query = bool(_SCHEMA_NAMES.search(text))
        token = WATCHDOG.arm(cursor, run)
        try:
            cursor.execute(text)
            rows_in = _Converted(cursor)  # counting the rest past the cap needs no conversion
            return collect_result(rows_in, rows_in.columns, run, started, duckdb.Error, rest=cursor)
        except duckdb.Error as exc:
            return self._classify(exc, run)
        except (ValueError, OverflowError, MemoryError) as exc:
            return ToolError("other", str(exc) or type(exc).__name__)
        finally:
            WATCHDOG.disarm(token)

    def _classify(self, exc: Exception, run: Run) -> ToolError:
        return classify_duckdb(exc, run, self.schema)

    def query_internal(self, sql: str, params: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
        """The toolkit's own read-only query; every row, cells converted like ``run``'s."""
        return list(self.iter_internal(sql, params))

    def iter_internal(self, sql: str, params: Iterable[Any] = (), chunk: int = 10_000) -> Iterator[tuple[Any, ...]]:
        """Like ``query_internal`` but streams the rows. Only SELECTs run (the connection
        is read-only and locked whatever the text)."""
        import duckdb

        cursor = self.cursor()
        run = Run(INTERNAL_LIMITS, time.monotonic() + INTERNAL_LIMITS.timeout_s)
        token = WATCHDOG.arm(cursor, run)
        try:
            statements = cursor.extract_statements(sql)
            if len(statements) != 1 or statements[0].type.name != "SELECT":
                raise DataError(f"{self.path}: internal queries must be one SELECT: {sql}")
            cursor.execute(sql, list(params))
            rows = _Converted(cursor)
            while batch := rows.fetchmany(chunk):
                yield from batch
        except duckdb.Error as exc:
            raise DataError(f"{self.path}: internal query failed ({exc}): {sql}") from exc
        finally:
            WATCHDOG.disarm(token)

    def schema(self) -> dict[str, list[str]]:
        """``{table: [column, ...]}`` for every table and view of the file, in declaration
        order of columns; tables in the order of DuckDB's catalogue (by name once the file
        is reopened: DuckDB keeps no creation order). Tables of a schema other than ``main``
        are named ``schema.table``."""
        digest = self.content_hash
        cached = self._schema
        if cached is not None and cached[0] == digest:
            return {t: list(c) for t, c in cached[1].items()}
        rows = self.query_internal(
            "SELECT schema_name, table_name, column_name FROM duckdb_columns() "
            "WHERE database_name = current_database() AND NOT internal "
            "ORDER BY table_oid, column_index"
        )
        schema: dict[str, list[str]] = {}
        for schema_name, table, column in rows:
            name = table if schema_name == "main" else f"{schema_name}.{table}"
            schema.setdefault(name, []).append(column)
        self._schema = (digest, schema)
        return {t: list(c) for t, c in schema.items()}


def _check_duckdb_file(path: Path) -> None:
    if not path.is_file():
        raise DataError(f"no DuckDB database at {path}; pass the path of an existing .duckdb file")
    with path.open("rb") as handle:
        header = handle.read(12)
    if header[8:12] != DUCKDB_MAGIC:
        raise DataError(f"{path} is not a DuckDB database (no {DUCKDB_MAGIC!r} signature at byte 8)")


# --------------------------------------------------------------------------- values


def to_sqlite_value(value: Any) -> Any:
    """The value SQLite would hold for a DuckDB cell: ``int``, ``float``, ``str``, ``bytes`` or None.

    >>> to_sqlite_value(True), to_sqlite_value(decimal.Decimal("1.50")), to_sqlite_value(datetime.date(2020, 1, 2))
    (1, 1.5, '2020-01-02')
    """
    if value is None or type(value) in (int, float, str, bytes):
        return value
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, datetime.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, (int, float, str, bytes)):  # subclasses
        return value
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, default=str, ensure_ascii=False)
    if isinstance(value, (uuid.UUID, datetime.timedelta)):
        return str(value)
    return str(value)


_PLAIN_TYPES = frozenset(
    {"BIGINT", "INTEGER", "SMALLINT", "TINYINT", "UBIGINT", "UINTEGER", "USMALLINT", "UTINYINT"}
    | {"HUGEINT", "UHUGEINT", "DOUBLE", "FLOAT", "VARCHAR", "BLOB", '"NULL"', "NULL"}
)
"""DuckDB column types whose Python values are already what SQLite returns."""


class _Converted:
    """A cursor whose rows come back with ``to_sqlite_value`` applied, column by column
    (columns of a plain type are passed through untouched)."""

    def __init__(self, cursor: duckdb.DuckDBPyConnection) -> None:
        self._cursor = cursor
        described = cursor.description or []
        self.columns = tuple(d[0] for d in described)
        self._convert = [str(d[1]) not in _PLAIN_TYPES for d in described]
        self._any = any(self._convert)

    def _fix(self, rows: list[Any]) -> list[Any]:
        if not self._any or not rows:
            return rows
        flags = self._convert
        return [tuple(to_sqlite_value(v) if f else v for v, f in zip(row, flags, strict=True)) for row in rows]

    def fetchmany(self, size: int = 1) -> list[Any]:
        return self._fix(self._cursor.fetchmany(size))

    def fetchall(self) -> list[Any]:
        return self._fix(self._cursor.fetchall())


# --------------------------------------------------------------------------- errors


def classify_duckdb(exc: Exception, run: Run, schema: Callable[[], dict[str, list[str]]]) -> ToolError:
    """Turn a DuckDB exception into a structured error the model can act on."""
    message = str(exc).strip()
    name = type(exc).__name__
    lowered = message.lower()
    if run.tripped == "timeout" or name == "InterruptException":
        return ToolError(
            "timeout",
            f"the query ran past the {run.limits.timeout_s:g} s deadline and was stopped",
            "add selective WHERE conditions, avoid cross joins, or add LIMIT",
        )
    if name == "PermissionException" or "read-only mode" in lowered or "configuration has been locked" in lowered:
        return ToolError("forbidden", message, "only read-only SELECT queries on this database's tables run here")
    if name == "ParserException":
        return ToolError("syntax", message)
    if name == "CatalogException" and "table with name" in lowered:
        tables = list(_safe(schema))
        bad = re.search(r"table with name (\S+) does not exist", message, re.I)
        close = close_matches(bad.group(1).strip('"'), tables) if bad else []
        hint = " or ".join(repr(t) for t in close)
        return ToolError("no_such_table", message, f"did you mean {hint}?" if close else list_hint("tables", tables))
    if name == "BinderException" and ("referenced column" in lowered or 'column "' in lowered):
        return ToolError("no_such_column", message, "check the column names with the schema")
    if name == "OutOfMemoryException":
        return ToolError("too_large", message, "add selective WHERE conditions, avoid cross joins, aggregate")
    return ToolError("other", message or name)


def _safe(schema: Callable[[], dict[str, list[str]]]) -> dict[str, list[str]]:
    try:
        return schema()
    except DataError:
        return {}
