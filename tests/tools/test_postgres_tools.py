"""The designs' tools on a PostgreSQL copy of the tool tests' database answer as on the SQLite file."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from eval.data.postgres_copy import copy_sqlite_to_postgres, create_reader_role, role_dsn
from tests.helpers.pg_server import PgServer
from tests.tools.conftest import make_school_db
from tests.tools.test_duckdb_tools import SAME_ANSWER, TOOLS
from tools import ToolBox, get_database
from tools.db.postgres_backend import postgres_locator
from tools.schema import compact_schema, ddl_schema, m_schema

# Reading the schema through SQLite's pragma functions is SQLite's (and DuckDB's) own.
PG_SAME_ANSWER = [(tool, arguments) for tool, arguments in SAME_ANSWER if "pragma_" not in str(arguments)]


@pytest.fixture(scope="module")
def boxes(pg_server: PgServer, tmp_path_factory: pytest.TempPathFactory) -> tuple[ToolBox, ToolBox]:
    source = make_school_db(tmp_path_factory.mktemp("pgtools") / "schools.sqlite")
    admin = pg_server.new_database("toolbox")
    with psycopg.connect(admin) as conn:
        copy_sqlite_to_postgres(source, conn, "schools")
        create_reader_role(conn, "toolbox_reader", ["schools"])
    served = get_database(postgres_locator(role_dsn(admin, "toolbox_reader"), "schools"))
    return ToolBox(get_database(source), TOOLS), ToolBox(served, TOOLS)


@pytest.mark.parametrize(
    ("tool", "arguments"), PG_SAME_ANSWER, ids=[f"{t}-{i}" for i, (t, _) in enumerate(PG_SAME_ANSWER)]
)
def test_tool_calls_answer_alike(boxes: tuple[ToolBox, ToolBox], tool: str, arguments: dict[str, Any]) -> None:
    lite, served = (box.call(tool, {"db_id": "schools", **arguments}) for box in boxes)
    assert lite.ok == served.ok, (lite.payload, served.payload)
    if lite.ok:
        assert lite.payload == served.payload
    else:  # the engines word their errors differently; the kind is the same
        assert lite.error_kind == served.error_kind


def test_peek_and_profile_give_the_same_statistics(boxes: tuple[ToolBox, ToolBox]) -> None:
    peeks = [
        box.call("sqlite_peek", {"db_id": "schools", "table": "schools", "columns": "city, rate"}) for box in boxes
    ]
    assert all(p.ok for p in peeks)
    for column in ("city", "rate"):
        peek_a, peek_b = (dict(p.payload["columns"][column]) for p in peeks)
        assert peek_a.pop("declared_type") in ("TEXT", "REAL")
        assert peek_b.pop("declared_type") in ("text", "double precision")
        assert peek_a == peek_b
    profiles = [box.db.profile() for box in boxes]
    for table in ("scores", "events"):
        a, b = (next(t for t in p.tables if t.name == table) for p in profiles)
        assert a.row_count == b.row_count
        for ca, cb in zip(a.columns, b.columns, strict=True):
            keys = ("name", "nulls", "distinct", "min", "max", "avg", "numeric_text", "storage", "top_values")
            assert [getattr(ca, k) for k in keys] == [getattr(cb, k) for k in keys], (table, ca.name)
            assert len(ca.examples) == len(set(cb.examples)) == len(cb.examples)
    links = [{(fk.table, fk.column, fk.ref_table, fk.ref_column) for fk in p.foreign_keys} for p in profiles]
    assert links[0] == links[1]
    enrollment = next(c for c in profiles[1].tables if c.name == "schools").columns[3]
    assert enrollment.name == "enrollment" and enrollment.numeric_text and enrollment.avg == pytest.approx(961.0)


def test_schema_texts_name_every_table_and_column(boxes: tuple[ToolBox, ToolBox]) -> None:
    profile = boxes[1].db.profile()
    for render in (m_schema, ddl_schema, compact_schema):
        text = render(profile)
        for table, columns in boxes[0].db.schema().items():
            assert table in text and all(c in text for c in columns), (render.__name__, table)
    assert "bigint" in ddl_schema(profile)


def test_the_profile_reads_declared_foreign_keys(boxes: tuple[ToolBox, ToolBox], pg_server: PgServer) -> None:
    with psycopg.connect(pg_server.dsn(dbname="toolbox")) as conn:
        conn.execute("CREATE SCHEMA keyed")
        conn.execute("CREATE TABLE keyed.parent (id bigint PRIMARY KEY, name text)")
        conn.execute("CREATE TABLE keyed.child (cid bigint PRIMARY KEY, parent_id bigint REFERENCES keyed.parent (id))")
        create_reader_role(conn, "toolbox_reader", ["keyed"])
    locator = postgres_locator(role_dsn(pg_server.dsn(dbname="toolbox"), "toolbox_reader"), "keyed")
    profile = get_database(locator).profile()
    declared = {(fk.table, fk.column, fk.ref_table, fk.ref_column) for fk in profile.foreign_keys if not fk.inferred}
    assert declared == {("child", "parent_id", "parent", "id")}
    parent = next(t for t in profile.tables if t.name == "parent")
    assert parent.primary_key == ("id",) and parent.columns[0].not_null
