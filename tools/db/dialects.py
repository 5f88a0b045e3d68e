"""What an agent is told about the SQL dialect its database runs, one entry per backend dialect.

Prompts and tool descriptions name the dialect (``$dialect``), say where the schema lives
(``$catalogue``) and show an exploration query; TRUST-SQL's schema-discovering turns
(its demonstration and its Schema-Prefill turn) run ``table_ddl_sql``. Each entry is keyed
on a backend's ``dialect`` attribute (``tools.db.backend.Backend.dialect``): a new backend
plugs in by registering its ``Dialect`` here (``register_dialect``), and every prompt and
tool description follows.

The SQLite entry holds the texts the prompts always had, so a SQLite prompt is unchanged
byte for byte. The other entries read the engine's own catalogue
(``information_schema``, ``duckdb_tables()``, ``duckdb_columns()``) where SQLite uses
``sqlite_master`` and PRAGMAs, and give results of the same shape: ``table_ddl_sql`` returns
``(name, sql)`` rows, one per table, ``sql`` its ``CREATE TABLE`` text (PostgreSQL keeps no
such text: it is assembled from ``information_schema.columns``, names and types only).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from string import Template

from tools.db.backend import dialect_of
from tools.db.postgres_backend import is_postgres_locator
from tools.errors import ConfigError


@dataclass(frozen=True)
class Dialect:
    """One SQL dialect as agents see it.

    ``name``: the backend's ``dialect`` value; ``display``: its name in prompts ("SQLite");
    ``catalogue``: where the schema can be read, as prompts list it; ``list_tables_sql``:
    a query listing the table names (a column ``name``), the example of an exploration
    call; ``table_ddl_sql``: a query giving ``(name, sql)`` for every table, no ``ORDER BY``
    (callers may append one).
    """

    name: str
    display: str
    catalogue: str
    list_tables_sql: str
    table_ddl_sql: str

    def fields(self) -> dict[str, str]:
        """The prompt placeholders this dialect fills: ``dialect``, ``catalogue``, ``list_tables_sql``."""
        return {"dialect": self.display, "catalogue": self.catalogue, "list_tables_sql": self.list_tables_sql}

    def fill(self, template: str) -> str:
        """``template`` with ``$dialect``, ``$catalogue`` and ``$list_tables_sql`` filled
        (other ``$`` placeholders are left for the caller)."""
        return Template(template).safe_substitute(self.fields())


DIALECTS: dict[str, Dialect] = {}


def database_dialect(path: str | Path) -> str:
    """The dialect of the database at ``path`` (a file or a ``postgresql://`` locator) without
    opening it: ``"postgres"`` for a locator, else by the file's first bytes or suffix (``dialect_of``)."""
    return "postgres" if is_postgres_locator(path) else dialect_of(path)


def register_dialect(dialect: Dialect) -> Dialect:
    """Add (or replace) the entry of ``dialect.name``."""
    DIALECTS[dialect.name] = dialect
    return dialect


def dialect_info(name: str) -> Dialect:
    """The entry of dialect ``name``; a ``ConfigError`` naming the known ones if there is none."""
    try:
        return DIALECTS[name]
    except KeyError:
        raise ConfigError(
            f"no SQL dialect entry {name!r} for agents' prompts; known: {', '.join(sorted(DIALECTS))} "
            "(a new backend registers one with tools.db.dialects.register_dialect)"
        ) from None


SQLITE = register_dialect(
    Dialect(
        name="sqlite",
        display="SQLite",
        catalogue="sqlite_master, PRAGMA table_info(...), PRAGMA foreign_key_list(...)",
        list_tables_sql="SELECT name FROM sqlite_master WHERE type = 'table'",
        table_ddl_sql="SELECT name, sql FROM sqlite_master WHERE type = 'table'",
    )
)
DUCKDB = register_dialect(
    Dialect(
        name="duckdb",
        display="DuckDB",
        catalogue=(
            "information_schema.tables, information_schema.columns, duckdb_tables(), "
            "duckdb_columns(), duckdb_constraints()"
        ),
        list_tables_sql="SELECT table_name AS name FROM information_schema.tables WHERE table_schema = 'main'",
        table_ddl_sql="SELECT table_name AS name, sql FROM duckdb_tables() WHERE NOT internal",
    )
)
POSTGRES = register_dialect(
    Dialect(
        name="postgres",
        display="PostgreSQL",
        catalogue=(
            "information_schema.tables, information_schema.columns, "
            "information_schema.table_constraints, information_schema.key_column_usage"
        ),
        list_tables_sql=(
            "SELECT table_name AS name FROM information_schema.tables WHERE table_schema = current_schema()"
        ),
        table_ddl_sql=(
            "SELECT table_name AS name, 'CREATE TABLE ' || quote_ident(table_name) || ' (' || "
            "string_agg(quote_ident(column_name) || ' ' || data_type, ', ' ORDER BY ordinal_position) || ')' AS sql "
            "FROM information_schema.columns WHERE table_schema = current_schema() GROUP BY table_name"
        ),
    )
)
