"""The SQL a profile runs, per dialect (``tools.schema.profile``).

SQLite keeps loose types, so its statistics read each cell's storage class (``typeof``) and
find numbers stored as text with ``GLOB`` patterns. A DuckDB column has one type, read once
from ``pragma_table_info``: a numeric column holds numbers, a ``VARCHAR`` column text (some of
it numbers written as text, found with a regular expression), a ``BLOB`` column blobs; dates
and other types count as text, as SQLite stores them. PostgreSQL is read the same way as
DuckDB, with its catalogue (``pg_attribute``, ``pg_constraint``) for columns and keys. All
give the same eleven statistics per column, so the profile has one shape whatever the engine.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Protocol

from tools.spelling import quote_identifier

TABLE_INFO_SQL = 'SELECT name, type, "notnull", pk FROM pragma_table_info(?)'
"""Columns of a table: name, declared type, NOT NULL, primary-key position (SQLite, DuckDB)."""
POSTGRES_TABLE_INFO_SQL = (
    "SELECT a.attname, format_type(a.atttypid, a.atttypmod), CASE WHEN a.attnotnull THEN 1 ELSE 0 END, "
    "coalesce((SELECT k.n FROM pg_index x, unnest(x.indkey) WITH ORDINALITY AS k(att, n) "
    "WHERE x.indrelid = a.attrelid AND x.indisprimary AND k.att = a.attnum), 0) "
    "FROM pg_attribute a WHERE a.attrelid = to_regclass(quote_ident(?)) AND a.attnum > 0 "
    "AND NOT a.attisdropped ORDER BY a.attnum"
)
"""The same on PostgreSQL (the table in the connection's ``search_path``)."""

_NUMERIC_TEXT = (
    "(typeof({c}) = 'text' AND trim({c}) GLOB '[0-9+.-]*' AND trim({c}) GLOB '*[0-9]*'"
    " AND trim({c}) NOT GLOB '*[^0-9.eE+-]*'"
    " AND trim({c}) NOT GLOB '*.*.*' AND trim({c}) NOT GLOB '*[eE]*[eE]*'"
    " AND (trim({c}) NOT GLOB '?*[+-]*' OR trim({c}) NOT GLOB '*[^eE][+-]*' AND trim({c}) NOT GLOB '?*[^eE][+-]*'))"
)
"""A text cell that is a well-formed number ("1200", "-3.5", "1e-5"; not "1998-09-01")."""
_IS_NUMBER = "typeof({c}) IN ('integer', 'real')"

_DUCKDB_NUMERIC_TEXT = "regexp_full_match(trim({c}), '[+-]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][+-]?[0-9]+)?')"
"""The same test on a DuckDB text column, as a regular expression."""
_DUCKDB_NUMBER_TYPES = ("INT", "DOUBLE", "FLOAT", "REAL", "DECIMAL", "NUMERIC")
_POSTGRES_NUMERIC_TEXT = "(trim({c}) ~ '^[+-]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][+-]?[0-9]+)?$')"
_POSTGRES_NUMBER_TYPES = ("int", "double", "real", "numeric", "decimal")
_POSTGRES_TEXT_TYPES = ("text", "character", "char", "name")
_POSTGRES_UNORDERED = ("boolean", "json", "jsonb", "xml", "point", "box", "polygon", "circle", "line", "lseg", "path")
"""PostgreSQL types without MIN/MAX or equality: their statistics read them as text."""

STATS_PER_COLUMN = 11


class _Queryable(Protocol):
    def query_internal(self, sql: str, params: Iterable[Any] = ()) -> list[tuple[Any, ...]]: ...


def dialect_of(db: object) -> str:
    """The backend's dialect (a stand-in without one is SQLite)."""
    return str(getattr(db, "dialect", "sqlite"))


def table_info_sql(dialect: str) -> str:
    """The query listing a table's columns (its one parameter: the table name)."""
    return POSTGRES_TABLE_INFO_SQL if dialect == "postgres" else TABLE_INFO_SQL


def stats_sql(table: str, columns: list[tuple[str, str]], dialect: str) -> str:
    """One scan of ``table``: ``COUNT(*)``, then per ``(column, declared type)``: non-null,
    distinct, min, max, numbers, numbers stored as text, texts, blobs, and the average,
    minimum and maximum of the numeric values."""
    parts = ["COUNT(*)"]
    for name, declared in columns:
        c = quote_identifier(name)
        if dialect == "postgres" and declared.lower().split("(")[0].strip() in _POSTGRES_UNORDERED:
            c = f"{c}::text"
        if dialect == "duckdb":
            is_num, num_text, text, blob, as_number = _duckdb_kinds(c, declared)
        elif dialect == "postgres":
            is_num, num_text, text, blob, as_number = _postgres_kinds(c, declared)
        else:
            num_text = _NUMERIC_TEXT.format(c=c)
            is_num = _IS_NUMBER.format(c=c)
            text, blob = f"typeof({c}) = 'text'", f"typeof({c}) = 'blob'"
            as_number = f"CAST({c} AS REAL)"
        sums = (
            [f"SUM({is_num})", f"SUM({num_text})", f"SUM({text})", f"SUM({blob})"]
            if dialect == "sqlite"
            else [f"SUM(CASE WHEN {cond} THEN 1 ELSE 0 END)" for cond in (is_num, num_text, text, blob)]
        )
        parts += [
            f"COUNT({c})",
            f"COUNT(DISTINCT {c})",
            f"MIN({c})",
            f"MAX({c})",
            *sums,
            f"AVG(CASE WHEN {is_num} OR {num_text} THEN {as_number} END)",
            f"MIN(CASE WHEN {is_num} OR {num_text} THEN {as_number} END)",
            f"MAX(CASE WHEN {is_num} OR {num_text} THEN {as_number} END)",
        ]
    return f"SELECT {', '.join(parts)} FROM {quote_identifier(table)}"


def _duckdb_kinds(c: str, declared: str) -> tuple[str, str, str, str, str]:
    """(is a number, is a number written as text, is text, is a blob, as a number) for a
    DuckDB column of type ``declared``."""
    kind = declared.upper()
    present = f"{c} IS NOT NULL"
    if any(word in kind for word in _DUCKDB_NUMBER_TYPES) and "INTERVAL" not in kind:
        return present, "FALSE", "FALSE", "FALSE", f"CAST({c} AS DOUBLE)"
    if kind == "BLOB":
        return "FALSE", "FALSE", "FALSE", present, "NULL"
    if kind == "VARCHAR":
        return "FALSE", _DUCKDB_NUMERIC_TEXT.format(c=c), present, "FALSE", f"TRY_CAST(trim({c}) AS DOUBLE)"
    return "FALSE", "FALSE", present, "FALSE", "NULL"  # dates, booleans, lists: text as SQLite keeps them


def _postgres_kinds(c: str, declared: str) -> tuple[str, str, str, str, str]:
    """``_duckdb_kinds`` for a PostgreSQL column of type ``declared`` (``format_type``'s name)."""
    kind = declared.lower()
    present = f"{c} IS NOT NULL"
    if any(word in kind for word in _POSTGRES_NUMBER_TYPES) and "interval" not in kind:
        return present, "FALSE", "FALSE", "FALSE", f"CAST({c} AS double precision)"
    if kind == "bytea":
        return "FALSE", "FALSE", "FALSE", present, "NULL"
    if kind.startswith(_POSTGRES_TEXT_TYPES):
        number = _POSTGRES_NUMERIC_TEXT.format(c=c)
        return "FALSE", number, present, "FALSE", f"CAST(trim({c}) AS double precision)"
    return "FALSE", "FALSE", present, "FALSE", "NULL"


def examples_sql(table: str, column: str, limit: int, dialect: str) -> str:
    """The first ``limit`` distinct non-null values of a column, in table order."""
    c, t = quote_identifier(column), quote_identifier(table)
    if dialect in ("duckdb", "postgres"):  # their DISTINCT has no order: keep each value's first row
        row = "rowid" if dialect == "duckdb" else "ctid"
        return (
            f"SELECT {c} FROM (SELECT {c}, MIN({row}) AS first_row FROM {t} WHERE {c} IS NOT NULL GROUP BY {c}) "
            f"AS firsts ORDER BY first_row LIMIT {limit}"
        )
    return f"SELECT DISTINCT {c} FROM {t} WHERE {c} IS NOT NULL LIMIT {limit}"


def declared_foreign_keys(db: _Queryable, table: str, dialect: str) -> list[tuple[str, str, str | None]]:
    """``(referenced table, column, referenced column or None)`` declared on ``table``."""
    if dialect == "postgres":
        rows = db.query_internal(
            "SELECT r.relname, a.attname, ra.attname FROM pg_constraint k "
            "CROSS JOIN LATERAL unnest(k.conkey, k.confkey) AS u(col, ref) "
            "JOIN pg_class r ON r.oid = k.confrelid "
            "JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = u.col "
            "JOIN pg_attribute ra ON ra.attrelid = k.confrelid AND ra.attnum = u.ref "
            "WHERE k.contype = 'f' AND k.conrelid = to_regclass(quote_ident(?)) ORDER BY k.oid",
            (table,),
        )
        return [(r[0], r[1], r[2]) for r in rows]
    if dialect != "duckdb":
        rows = db.query_internal('SELECT "table", "from", "to" FROM pragma_foreign_key_list(?)', (table,))
        return [(r[0], r[1], r[2]) for r in rows]
    rows = db.query_internal(
        "SELECT referenced_table, constraint_column_names, referenced_column_names FROM duckdb_constraints() "
        "WHERE constraint_type = 'FOREIGN KEY' AND database_name = current_database() AND table_name = ?",
        (table,),
    )
    out: list[tuple[str, str, str | None]] = []
    for ref_table, columns, ref_columns in rows:  # the lists come back as JSON text
        for column, ref_column in zip(json.loads(columns), json.loads(ref_columns), strict=False):
            out.append((ref_table, column, ref_column))
    return out


def is_text_sql(column_sql: str, dialect: str) -> str:
    """A condition true for the text cells of a (quoted) column."""
    if dialect == "postgres":
        return f"pg_typeof({column_sql}) IN ('text'::regtype, 'character varying'::regtype, 'character'::regtype)"
    return f"typeof({column_sql}) = {'VARCHAR' if dialect == 'duckdb' else 'text'!r}"


def is_not_blob_sql(column_sql: str, dialect: str) -> str:
    """A condition true for the cells of a (quoted) column that are not blobs."""
    if dialect == "postgres":
        return f"pg_typeof({column_sql}) <> 'bytea'::regtype"
    return f"typeof({column_sql}) <> {'BLOB' if dialect == 'duckdb' else 'blob'!r}"
