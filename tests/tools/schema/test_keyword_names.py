"""Schemas whose names are SQL keywords or odd spellings (BIRD's ``financial`` has a table
``order``): the DDL the serialisers print executes, and every name the compact list prints
can be pasted into a query; M-Schema keeps names verbatim."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from tools import get_database
from tools.schema import compact_schema, ddl_schema, m_schema
from tools.schema.profile import DatabaseProfile

# Keywords SQLite refuses bare (order, select, from, group, values), ones it takes bare but
# reads as something else (current_date is today's date), a keyword in mixed case (Order,
# Group), and names its grammar needs quoted (space, digit first, quote, dash, dot, non-ASCII).
KEYWORD_SCHEMA = """
CREATE TABLE "order" (
    "select" INTEGER PRIMARY KEY,
    "from" TEXT NOT NULL,
    "Order" INTEGER,
    "odd name" TEXT,
    "2nd" REAL,
    "a""b" TEXT,
    "current_date" TEXT,
    plain_name TEXT
);
CREATE TABLE "Group" (
    "key" INTEGER,
    "x-y" INTEGER REFERENCES "order"("select"),
    "a.b" TEXT,
    "désignation" TEXT,
    PRIMARY KEY ("key", "x-y")
);
CREATE TABLE "values" (
    "order" INTEGER REFERENCES "order"("select"),
    "group" TEXT
);
"""
ORDER_ROWS = [
    (1, "north", 10, "a b", 2.5, 'q"t', "2001-01-01", "p1"),
    (2, "south", 20, None, 3.5, "r", "2002-02-02", "p2"),
]
DESCRIPTIONS = (
    "original_column_name,column_name,column_description,data_format,value_description\n"
    'from,from,"where the order came from, as a region",text,\n'
    "current_date,current date,day the order was booked,date,\n"
)
# A name as the compact list prints it: double-quoted (inner quotes doubled) or bare.
PRINTED_NAME = r'"(?:[^"]|"")*"|[A-Za-z_][A-Za-z0-9_]*'


@pytest.fixture
def keyword_db(tmp_path: Path) -> Path:
    """BIRD layout: ``financial_like/financial_like.sqlite`` with a description CSV."""
    folder = tmp_path / "financial_like"
    (folder / "database_description").mkdir(parents=True)
    path = folder / "financial_like.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(KEYWORD_SCHEMA)
    conn.executemany('INSERT INTO "order" VALUES (?,?,?,?,?,?,?,?)', ORDER_ROWS)
    conn.executemany('INSERT INTO "Group" VALUES (?,?,?,?)', [(1, 1, "x", "é"), (2, 2, "y", "è")])
    conn.executemany('INSERT INTO "values" VALUES (?,?)', [(1, "g1"), (2, "g2")])
    conn.commit()
    conn.close()
    (folder / "database_description" / "order.csv").write_text(DESCRIPTIONS, encoding="utf-8")
    return path


def structure(conn: sqlite3.Connection) -> dict[str, tuple[list[tuple], list[tuple]]]:
    """Per table: columns (name, declared type, not null, primary-key position) and
    declared foreign keys (referenced table, column, referenced column)."""
    out = {}
    for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"):
        columns = [(r[1], r[2], r[3], r[5]) for r in conn.execute("SELECT * FROM pragma_table_info(?)", (table,))]
        keys = sorted((r[2], r[3], r[4]) for r in conn.execute("SELECT * FROM pragma_foreign_key_list(?)", (table,)))
        out[table] = (columns, keys)
    return out


def unquote(printed: str) -> str:
    return printed[1:-1].replace('""', '"') if printed.startswith('"') else printed


@pytest.mark.parametrize("comments", [False, True], ids=["ddl", "ddl+comments"])
def test_ddl_of_keyword_names_rebuilds_the_same_tables(keyword_db: Path, comments: bool) -> None:
    profile = get_database(keyword_db).profile()
    ddl = ddl_schema(profile, comments=comments)
    rebuilt = sqlite3.connect(":memory:")
    rebuilt.executescript(ddl)
    assert structure(rebuilt) == structure(sqlite3.connect(keyword_db))
    assert 'CREATE TABLE "order" (\n  "select" INTEGER PRIMARY KEY,' in ddl
    assert "  plain_name TEXT" in ddl  # a name that needs no quotes stays bare
    assert ("-- where the order came from, as a region" in ddl) == comments


def test_restricted_ddl_of_keyword_names_executes(keyword_db: Path) -> None:
    profile = get_database(keyword_db).profile()
    ddl = ddl_schema(profile, tables=["values"], columns=["order.from", "order.select", 'order.a"b'])
    rebuilt = sqlite3.connect(":memory:")
    rebuilt.executescript(ddl)
    assert structure(rebuilt) == {
        "order": ([("select", "INTEGER", 0, 1), ("from", "TEXT", 1, 0), ('a"b', "TEXT", 0, 0)], []),
        "values": ([("order", "INTEGER", 0, 0), ("group", "TEXT", 0, 0)], [("order", "order", "select")]),
    }


def compact_tables(compact: str) -> dict[str, list[str]]:
    """``{printed table: [printed columns]}`` from the compact list's table lines."""
    line_form = re.compile(rf"({PRINTED_NAME})\(((?:{PRINTED_NAME})(?:, (?:{PRINTED_NAME}))*)\)")
    out = {}
    for line in compact.splitlines():
        if line.startswith("Foreign keys: "):
            continue
        match = line_form.fullmatch(line)
        assert match, f"not a compact table line: {line!r}"
        out[match[1]] = re.findall(PRINTED_NAME, match[2])
    return out


def test_compact_names_paste_into_queries_that_run(keyword_db: Path) -> None:
    profile = get_database(keyword_db).profile()
    compact = compact_schema(profile)
    printed = compact_tables(compact)
    conn = sqlite3.connect(keyword_db)
    real = {t: [c[0] for c in cols] for t, (cols, _) in structure(conn).items()}
    assert {unquote(t): [unquote(c) for c in cols] for t, cols in printed.items()} == real
    for table, columns in printed.items():
        for column in columns:
            # The printed spelling reads the column itself (bare current_date would be today's date).
            pasted = conn.execute(f"SELECT {column} FROM {table}").fetchall()
            quoted = unquote(column).replace('"', '""')
            assert pasted == conn.execute(f'SELECT "{quoted}" FROM {table}').fetchall(), (table, column)
    assert "plain_name" in printed['"order"']
    keys_line = compact.splitlines()[-1]
    key_form = rf"({PRINTED_NAME})\.({PRINTED_NAME})=({PRINTED_NAME})\.({PRINTED_NAME})"
    keys = re.findall(key_form, keys_line)
    assert sorted(keys) == [('"Group"', '"x-y"', '"order"', '"select"'), ('"values"', '"order"', '"order"', '"select"')]
    for table, column, ref_table, ref_column in keys:
        joined = f"SELECT COUNT(*) FROM {table} JOIN {ref_table} ON {table}.{column} = {ref_table}.{ref_column}"
        assert conn.execute(joined).fetchone() == (2,)


def test_m_schema_keeps_names_verbatim(keyword_db: Path) -> None:
    profile: DatabaseProfile = get_database(keyword_db).profile()
    text = m_schema(profile)
    assert "# Table: order (2 rows, 8 columns)" in text
    assert "(select:INTEGER, Primary Key," in text and '(a"b:TEXT,' in text
    assert "Group.x-y=order.select" in text
