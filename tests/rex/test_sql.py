"""rex.sql: referenced schema, ORDER BY detection, SELECT-only guard, normalisation, extraction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rex.sql import (
    extract_sql,
    has_top_level_order_by,
    is_select_only,
    normalize_sql,
    referenced_schema,
)

FIXTURES = Path(__file__).parent / "fixtures"
SCHEMA = json.loads((FIXTURES / "sql_references.json").read_text())["schema"]
REF_CASES = json.loads((FIXTURES / "sql_references.json").read_text())["cases"]


@pytest.mark.parametrize("case", REF_CASES, ids=[c["id"] for c in REF_CASES])
def test_referenced_schema_fixture(case: dict) -> None:
    ref = referenced_schema(case["sql"], None if case.get("no_schema") else SCHEMA)
    assert ref.parsed is case.get("parsed", True), ref.error
    if ref.parsed:
        assert list(ref.tables) == case["tables"]
        assert list(ref.columns) == case["columns"]
        if "unresolved" in case:
            assert list(ref.unresolved) == case["unresolved"]
    else:
        assert ref.error and ref.tables == () and ref.columns == ()


def test_referenced_schema_matches_a_real_database(tmp_path: Path) -> None:
    """The schema mapping read from a real SQLite file (original case) works as given."""
    import sqlite3

    path = tmp_path / "db.sqlite"
    con = sqlite3.connect(path)
    con.execute('CREATE TABLE "Student Info" (Id INTEGER, "Full Name" TEXT, Grade REAL)')
    con.execute("CREATE TABLE Club (id INTEGER, StudentId INTEGER, Title TEXT)")
    con.commit()
    schema = {
        t: [r[1] for r in con.execute(f'PRAGMA table_info("{t}")')]
        for (t,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'")
    }
    con.close()
    ref = referenced_schema(
        'SELECT s."Full Name", Title FROM "Student Info" s JOIN Club c ON c.StudentId = s.Id', schema
    )
    assert ref.tables == ("club", "student info")
    assert ref.columns == ("club.studentid", "club.title", "student info.full name", "student info.id")


@pytest.mark.parametrize(
    "sql, expected",
    [
        ("SELECT a FROM t ORDER BY a DESC LIMIT 3", True),
        ("select a from t order by a", True),
        ("WITH c AS (SELECT a FROM t ORDER BY a) SELECT a FROM c", False),
        ("WITH c AS (SELECT a FROM t) SELECT a FROM c ORDER BY a", True),
        ("SELECT a FROM (SELECT a FROM t ORDER BY a LIMIT 5)", False),
        ("SELECT ROW_NUMBER() OVER (ORDER BY a) FROM t", False),
        ("SELECT a FROM t UNION SELECT b FROM u ORDER BY 1", True),
        ("SELECT a FROM t WHERE b IN (SELECT b FROM u ORDER BY b)", False),
        ("SELECT 'order by' FROM t", False),
        ("SELECT a FROM t -- ORDER BY a", False),
        ("SELEC a FROM t ORDER BY a", True),  # unparseable: depth-0 scan
        ("SELEC a FROM (x ORDER BY a)", False),
        ("", False),
    ],
)
def test_has_top_level_order_by(sql: str, expected: bool) -> None:
    assert has_top_level_order_by(sql) is expected


@pytest.mark.parametrize(
    "sql, expected",
    [
        ("SELECT 1", True),
        ("WITH a AS (SELECT 1) SELECT * FROM a", True),
        ("SELECT a FROM t UNION ALL SELECT b FROM u", True),
        ("SELECT 1;", True),
        ("SELECT 1; SELECT 2", False),
        ("DELETE FROM t", False),
        ("INSERT INTO t VALUES (1)", False),
        ("UPDATE t SET a = 1", False),
        ("DROP TABLE t", False),
        ("PRAGMA table_info(t)", False),
        ("ATTACH DATABASE 'x' AS y", False),
        ("CREATE TABLE x AS SELECT 1", False),
        ("SELECT FROM WHERE", False),
        ("", False),
    ],
)
def test_is_select_only(sql: str, expected: bool) -> None:
    assert is_select_only(sql) is expected


@pytest.mark.parametrize(
    "sql, expected",
    [
        ("SELECT a\n  FROM t;", "SELECT a FROM t"),
        ("SELECT a -- comment ; here\nFROM t ;; ", "SELECT a FROM t"),
        ("/* lead */ SELECT  a /* mid */FROM t", "SELECT a FROM t"),
        ("SELECT 'a  -- not a comment' FROM t", "SELECT 'a  -- not a comment' FROM t"),
        ('SELECT "x  y", `a  b`, [c  d] FROM t', 'SELECT "x  y", `a  b`, [c  d] FROM t'),
        ("SELECT 'it''s  ok'", "SELECT 'it''s  ok'"),
        ("SELECT 'unterminated  ", "SELECT 'unterminated  "),
        ("   ", ""),
    ],
)
def test_normalize_sql(sql: str, expected: str) -> None:
    assert normalize_sql(sql) == expected


def test_normalized_sql_executes_to_the_same_result() -> None:
    import sqlite3

    con = sqlite3.connect(":memory:")
    con.execute("CREATE TABLE t (a TEXT, b INT)")
    con.executemany("INSERT INTO t VALUES (?, ?)", [("x  y", 1), ("it's", None), ("--", 3)])
    sql = "SELECT a, b -- pick\nFROM   t /* all */ WHERE a != 'it''s'  OR b IS NULL\nORDER BY b;"
    assert con.execute(normalize_sql(sql)).fetchall() == con.execute(sql).fetchall()


@pytest.mark.parametrize(
    "text, expected",
    [
        ("```sql\nSELECT 1;\n```", "SELECT 1"),
        ("First ```sql\nSELECT 1\n``` then ```sql\nSELECT 2\n```", "SELECT 2"),
        ("```SQL\nSELECT 3\n```", "SELECT 3"),
        ("```\nSELECT 4\n```", "SELECT 4"),
        ("<think>use t</think>\n<answer>SELECT a FROM t</answer>", "SELECT a FROM t"),
        ("<answer>```sql\nSELECT a FROM t\n```</answer>", "SELECT a FROM t"),
        ("<think>```sql\nSELECT wrong\n```</think><answer>SELECT right</answer>", "SELECT right"),
        ("<final_answer>\nSELECT b FROM u;\n</final_answer>", "SELECT b FROM u"),
        ("<scratch_pad>x</scratch_pad><final_answer>SELECT c", "SELECT c"),  # stop string cut
        ("<answer> </answer>", None),
        ("SELECT a FROM t", "SELECT a FROM t"),
        ("WITH x AS (SELECT 1) SELECT * FROM x;", "WITH x AS (SELECT 1) SELECT * FROM x"),
        ("The query is:\nSELECT a FROM t WHERE b = ';'; done", "SELECT a FROM t WHERE b = ';'"),
        ("I would select the rows", None),
        ("Select the rows we need\nwith care", None),  # English, not SQL
        ("With this in mind:\nSELECT 1", "SELECT 1"),
        ("with recursive r(n) as (select 1) select n from r", "with recursive r(n) as (select 1) select n from r"),
        ("<think>\nSELECT a FROM t WHERE b < 3\n</think>", "SELECT a FROM t WHERE b < 3"),
        ("SELECT '<think>;' FROM t</x>", "SELECT '<think>;' FROM t"),
        ("", None),
        ("   \n ", None),
    ],
)
def test_extract_sql(text: str, expected: str | None) -> None:
    assert extract_sql(text) == expected


@pytest.mark.parametrize("bad", [None, 3, b"SELECT 1"])
def test_non_string_input_never_raises(bad: object) -> None:
    assert extract_sql(bad) is None  # type: ignore[arg-type]
    assert referenced_schema(bad).parsed is False  # type: ignore[arg-type]
    assert is_select_only(bad) is False  # type: ignore[arg-type]
    assert has_top_level_order_by(bad) is False  # type: ignore[arg-type]
    assert normalize_sql(bad) == ""  # type: ignore[arg-type]
