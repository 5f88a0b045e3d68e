"""Writing SQLite databases into a PostgreSQL database, one schema per ``db_id``, and the
role that reads them.

Each column's type follows the values SQLite holds in it, as for DuckDB copies
(``eval.data.duckdb_copy``): only integers → ``bigint``, integers and reals → ``double
precision``, only blobs → ``bytea``, anything holding text → ``text``. Table and column
names keep their case (they are created quoted); questions' SQL that names them unquoted
works when they are lower case, as in the bundled benchmark. Text cannot hold a NUL
character in PostgreSQL: NULs are dropped from text cells. Keys and indexes are not copied.

The reader role (``create_reader_role``) can log in, use the schemas and SELECT their
tables, and nothing else: no CREATE on any schema, no TEMP tables, reads only by default
(``default_transaction_read_only``); ``tools.db.postgres_backend`` refuses to run through a
role that can write.
"""

from __future__ import annotations

import contextlib
import sqlite3
import urllib.parse
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from eval.data.duckdb_copy import _column_types
from tools.errors import DataError

if TYPE_CHECKING:
    import psycopg

READER_ROLE = "sqlagent_reader"
"""The SELECT-only login role ``write_postgres`` creates (project choice)."""
PG_TYPES = {"BIGINT": "bigint", "DOUBLE": "double precision", "BLOB": "bytea", "VARCHAR": "text"}


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def copy_sqlite_to_postgres(source: str | Path, conn: psycopg.Connection, schema: str) -> list[str]:
    """Write the tables of the SQLite file ``source`` into the new schema ``schema`` through
    ``conn`` (a role that may create it; not committed here); returns ``table.column`` for
    each column that mixed text with numbers (now text)."""
    source = Path(source)
    found = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone()
    if found:
        raise DataError(f"schema {schema!r} exists in the PostgreSQL database; drop it first (DROP SCHEMA … CASCADE)")
    conn.execute(f"CREATE SCHEMA {_ident(schema)}")
    mixed: list[str] = []
    src = sqlite3.connect(f"{source.resolve().as_uri()}?mode=ro", uri=True)
    src.text_factory = lambda data: data.decode("utf-8", errors="replace")
    try:
        tables = [
            name
            for (name,) in src.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' "
                "ORDER BY rowid"
            )
        ]
        for table in tables:
            columns = _column_types(src, table)
            mixed += [f"{table}.{c}" for c, (_, was_mixed) in columns.items() if was_mixed]
            _copy_table(src, conn, schema, table, {c: t for c, (t, _) in columns.items()})
    finally:
        src.close()
    return mixed


def _copy_table(
    src: sqlite3.Connection, conn: psycopg.Connection, schema: str, table: str, types: dict[str, str]
) -> None:
    target = f"{_ident(schema)}.{_ident(table)}"
    definition = ", ".join(f"{_ident(c)} {PG_TYPES[t]}" for c, t in types.items())
    conn.execute(f"CREATE TABLE {target} ({definition})")
    select = ", ".join(f"CAST({_ident(c)} AS TEXT)" if t == "VARCHAR" else _ident(c) for c, t in types.items())
    texts = [i for i, t in enumerate(types.values()) if t == "VARCHAR"]
    names = ", ".join(_ident(c) for c in types)
    with conn.cursor().copy(f"COPY {target} ({names}) FROM STDIN") as copy:
        for row in src.execute(f"SELECT {select} FROM {_ident(table)}"):
            if texts:
                row = list(row)
                for i in texts:
                    if row[i] is not None and "\x00" in row[i]:
                        row[i] = row[i].replace("\x00", "")
            copy.write_row(row)


def create_reader_role(conn: psycopg.Connection, role: str, schemas: Iterable[str]) -> None:
    """Create (or reset) the login role ``role``: USAGE on ``schemas`` and SELECT on their
    tables, nothing else (see the module docstring). Not committed here."""
    database = conn.execute("SELECT current_database()").fetchone()
    exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone()
    if not exists:
        conn.execute(f"CREATE ROLE {_ident(role)} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT")
    conn.execute(f"ALTER ROLE {_ident(role)} SET default_transaction_read_only = on")
    db = _ident(database[0] if database else "postgres")
    conn.execute(f"REVOKE TEMPORARY ON DATABASE {db} FROM PUBLIC")
    conn.execute(f"GRANT CONNECT ON DATABASE {db} TO {_ident(role)}")
    conn.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
    for schema in schemas:
        conn.execute(f"GRANT USAGE ON SCHEMA {_ident(schema)} TO {_ident(role)}")
        conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA {_ident(schema)} TO {_ident(role)}")


def role_dsn(dsn: str, role: str) -> str:
    """``dsn`` with its user replaced by ``role`` (and no password).

    >>> role_dsn("postgresql://admin:pw@db.example:5433/bench?sslmode=require", "reader")
    'postgresql://reader@db.example:5433/bench?sslmode=require'
    """
    parts = urllib.parse.urlsplit(dsn)
    host = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{urllib.parse.quote(role, safe='')}@{host}"))


def write_postgres(root: str | Path, admin_dsn: str, role: str = READER_ROLE) -> str:
    """Write every ``<db>.sqlite`` under ``root`` (a BIRD layout) into the database
    ``admin_dsn`` names, schema ``<db>``, and create the reader role; returns the role's DSN
    (``data.dsn`` for a recipe: its questions' ``db_id`` pick the schemas)."""
    import psycopg

    sources = sorted(Path(root).rglob("*.sqlite"))
    by_schema: dict[str, Path] = {}
    for path in sources:
        if path.stem in by_schema:
            raise DataError(f"two databases named {path.stem!r} ({by_schema[path.stem]}, {path}): one schema each")
        by_schema[path.stem] = path
    if not by_schema:
        raise DataError(f"no .sqlite files under {root} to write into PostgreSQL")
    try:
        with contextlib.closing(psycopg.connect(admin_dsn)) as conn:
            for schema, path in by_schema.items():
                copy_sqlite_to_postgres(path, conn, schema)
            create_reader_role(conn, role, by_schema)
            conn.execute("SELECT pg_stat_force_next_flush()")  # fingerprints see the rows at once
            conn.commit()
    except psycopg.Error as exc:
        raise DataError(f"cannot write into PostgreSQL ({exc})".strip()) from exc
    return role_dsn(admin_dsn, role)
