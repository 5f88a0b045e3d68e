"""The designs' tools on a DuckDB copy of the tool tests' database answer as on the SQLite file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from eval.data.duckdb_copy import copy_sqlite_to_duckdb
from tools import ToolBox, get_database
from tools.schema import compact_schema, ddl_schema, m_schema

TOOLS = ["sqlite_query", "sqlite_peek", "bm25_search_sqlite", "execute_sql_query", "execute_sql", "fts_search"]

SAME_ANSWER = [
    ("sqlite_query", {"sql": "SELECT event_id, kind FROM events", "max_return_rows": 3}),
    ("sqlite_query", {"sql": "SELECT name, city, enrollment, opened, rate FROM schools ORDER BY id"}),
    ("execute_sql", {"sql": "SELECT * FROM scores"}),
    ("execute_sql_query", {"sql": "SELECT name FROM pragma_table_info('events')"}),
    ("execute_sql_query", {"sql": "SELECT kind, COUNT(*) AS n FROM events GROUP BY kind ORDER BY n DESC, kind"}),
    ("execute_sql_query", {"sql": "SELECT * FROM shcools"}),
    ("execute_sql_query", {"sql": "DELETE FROM schools"}),
    ("bm25_search_sqlite", {"table": "events", "column": "kind", "query": "fair"}),
    ("fts_search", {"query": "berkeley"}),
]


@pytest.fixture
def boxes(school_db: Path) -> tuple[ToolBox, ToolBox]:
    duck = school_db.with_suffix(".duckdb")
    copy_sqlite_to_duckdb(school_db, duck)
    return ToolBox(get_database(school_db), TOOLS), ToolBox(get_database(duck), TOOLS)


@pytest.mark.parametrize(("tool", "arguments"), SAME_ANSWER, ids=[f"{t}-{i}" for i, (t, _) in enumerate(SAME_ANSWER)])
def test_tool_calls_answer_alike(boxes: tuple[ToolBox, ToolBox], tool: str, arguments: dict[str, Any]) -> None:
    lite, duck = (box.call(tool, {"db_id": "schools", **arguments}) for box in boxes)
    assert lite.ok == duck.ok, (lite.payload, duck.payload)
    if lite.ok:
        assert lite.payload == duck.payload
    else:  # the engines word their errors differently; the kind is the same
        assert lite.error_kind == duck.error_kind


def test_peek_and_profile_give_the_same_statistics(boxes: tuple[ToolBox, ToolBox]) -> None:
    lite, duck = boxes
    peeks = [
        box.call("sqlite_peek", {"db_id": "schools", "table": "schools", "columns": "city, rate"}) for box in boxes
    ]
    assert all(p.ok for p in peeks)
    for column in ("city", "rate"):
        peek_a, peek_b = (dict(p.payload["columns"][column]) for p in peeks)
        assert peek_a.pop("declared_type") in ("TEXT", "REAL") and peek_b.pop("declared_type") in ("VARCHAR", "DOUBLE")
        assert peek_a == peek_b
    profiles = [box.db.profile() for box in boxes]
    for table in ("scores", "events"):
        a, b = (next(t for t in p.tables if t.name == table) for p in profiles)
        assert a.row_count == b.row_count
        for ca, cb in zip(a.columns, b.columns, strict=True):
            keys = ("name", "nulls", "distinct", "min", "max", "avg", "numeric_text", "storage", "top_values")
            assert [getattr(ca, k) for k in keys] == [getattr(cb, k) for k in keys], (table, ca.name)
            # Examples: as many, distinct (which ones follows each engine's plan for DISTINCT).
            assert len(ca.examples) == len(set(cb.examples)) == len(cb.examples)
    # The copy declares no foreign keys; the profile infers the same links.
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
    assert "VARCHAR" in m_schema(profile) and "BIGINT" in ddl_schema(profile)
