"""Each backend dialect's entry (tools.db.dialects): its catalogue queries run on its own
engine and answer in SQLite's shape, and tool descriptions name the dialect."""

from __future__ import annotations

from pathlib import Path

import pytest

from eval.data.duckdb_copy import copy_sqlite_to_duckdb
from tools import TOOLS, QueryResult, ToolBox, get_database
from tools.db.dialects import DIALECTS, dialect_info
from tools.errors import ConfigError

EXECUTORS = ["execute_sql_query", "execute_sql", "sqlite_query"]


@pytest.fixture
def databases(school_db: Path) -> dict[str, object]:
    """The tool tests' database as SQLite and as its DuckDB copy, by dialect."""
    duck = school_db.with_suffix(".duckdb")
    copy_sqlite_to_duckdb(school_db, duck)
    return {"sqlite": get_database(school_db), "duckdb": get_database(duck)}


def _rows(db: object, sql: str) -> QueryResult:
    import designs.trustsql.tools  # noqa: F401  (registers TRUST-SQL's executor and its preset)

    result = db.execute(sql, "trustsql")  # type: ignore[attr-defined]
    assert isinstance(result, QueryResult), result
    return result


def test_every_backend_dialect_has_an_entry(databases: dict[str, object]) -> None:
    assert {db.dialect for db in databases.values()} <= set(DIALECTS)  # type: ignore[attr-defined]


def test_catalogue_queries_answer_in_sqlites_shape(databases: dict[str, object]) -> None:
    tables: dict[str, set[str]] = {}
    for name, db in databases.items():
        info = dialect_info(name)
        listed = _rows(db, info.list_tables_sql)
        assert listed.columns == ("name",)
        ddl = _rows(db, info.table_ddl_sql + " ORDER BY name")
        assert ddl.columns == ("name", "sql")
        assert [r[0] for r in ddl.rows] == sorted(r[0] for r in listed.rows)
        for table, text in ddl.rows:
            assert text.upper().startswith("CREATE TABLE") and table in text
            for column in db.schema()[table]:  # type: ignore[attr-defined]
                assert column in text
        tables[name] = {r[0] for r in listed.rows}
    assert tables["duckdb"] == tables["sqlite"] == set(databases["sqlite"].schema())  # type: ignore[attr-defined]


def test_tool_descriptions_name_the_dialect(databases: dict[str, object]) -> None:
    import designs.dualsql.tools  # noqa: F401
    import designs.retoolsql.tools  # noqa: F401
    import designs.trustsql.tools  # noqa: F401

    lite = ToolBox(databases["sqlite"], EXECUTORS).schemas()  # type: ignore[arg-type]
    assert lite == [TOOLS.get(name).schema() for name in EXECUTORS]  # SQLite: the descriptions as registered
    duck = ToolBox(databases["duckdb"], EXECUTORS).schemas()  # type: ignore[arg-type]
    for schema in duck:
        function = schema["function"]
        assert function["parameters"]["properties"]["sql"]["description"] == "One DuckDB statement."
        assert "PRAGMA" not in function["description"] and "sqlite_master" not in function["description"]
    by_name = {s["function"]["name"]: s["function"]["description"] for s in duck}
    for name in ("execute_sql_query", "execute_sql"):  # the schema-exploring executors name the catalogue
        assert "DuckDB" in by_name[name] and "information_schema.columns" in by_name[name]
    assert by_name["sqlite_query"] == TOOLS.get("sqlite_query").description  # no dialect words to change


def test_unknown_dialect_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="no SQL dialect entry 'oracle'.*duckdb, postgres, sqlite.*register_dialect"):
        dialect_info("oracle")


def test_postgres_catalogue_queries_answer_in_sqlites_shape(pg_server: object, school_db: Path) -> None:
    import psycopg

    from eval.data.postgres_copy import copy_sqlite_to_postgres, create_reader_role, role_dsn
    from tools.db.dialects import database_dialect
    from tools.db.postgres_backend import postgres_locator

    admin = pg_server.new_database("dialects")  # type: ignore[attr-defined]
    with psycopg.connect(admin) as conn:
        copy_sqlite_to_postgres(school_db, conn, "schools")
        create_reader_role(conn, "dialects_reader", ["schools"])
    locator = postgres_locator(role_dsn(admin, "dialects_reader"), "schools")
    db = get_database(locator)
    assert db.dialect == database_dialect(locator) == "postgres"
    info = dialect_info("postgres")
    listed = _rows(db, info.list_tables_sql)
    ddl = _rows(db, info.table_ddl_sql + " ORDER BY name")
    assert listed.columns == ("name",) and ddl.columns == ("name", "sql")
    lite = get_database(school_db)
    assert [r[0] for r in ddl.rows] == sorted(lite.schema()) == sorted(r[0] for r in listed.rows)
    for table, text in ddl.rows:
        assert text.startswith(f"CREATE TABLE {table} (") and all(c in text for c in lite.schema()[table])
    schemas = {s["function"]["name"]: s["function"] for s in ToolBox(db, ["execute_sql_query"]).schemas()}
    assert "PostgreSQL" in schemas["execute_sql_query"]["description"]
