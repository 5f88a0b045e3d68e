"""BIRD mini-dev's question files, in small files of its layout: ``MINIDEV/`` holding
``mini_dev_sqlite.json`` and ``mini_dev_postgresql.json`` (the same questions, the ``SQL``
field written in each engine's dialect) and ``dev_databases/<db_id>/<db_id>.sqlite``.
A SQLite dataset reads the SQLite file; a PostgreSQL one (``dsn``) reads the PostgreSQL
file, and its gold SQL runs on the real server, whether the databases are one schema per
``db_id`` (``python -m eval.data … --format postgres``) or share one schema as in the
release's PostgreSQL dump."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import psycopg
import pytest

from eval.data.loaders import load_split
from eval.data.postgres_copy import copy_sqlite_to_postgres, create_reader_role, role_dsn, write_postgres
from rex.scorer import ExecScorer
from tests.helpers.pg_server import PgServer
from tools import PRESETS, ToolBox, execute, get_database
from tools.db.backend import Backend
from tools.db.postgres_backend import PostgresDatabase
from tools.db.results import QueryResult
from tools.errors import DataError

DATABASES = {
    "debit_card": (
        "CREATE TABLE customers (customerid INTEGER, segment TEXT, currency TEXT);"
        "CREATE TABLE yearmonth (customerid INTEGER, date TEXT, consumption REAL);"
        "INSERT INTO customers VALUES (1, 'SME', 'EUR'), (2, 'LAM', 'CZK'), (3, 'SME', 'CZK'), (4, 'KAM', 'CZK');"
        "INSERT INTO yearmonth VALUES (1, '201201', 10.5), (2, '201305', 99.0), (3, '201212', 4.25),"
        " (4, '201301', NULL);"
    ),
    "student_club": (
        "CREATE TABLE event (event_id TEXT, event_name TEXT, event_date TEXT);"
        "CREATE TABLE expense (link_to_event TEXT, cost REAL);"
        "INSERT INTO event VALUES ('e1', 'October Meeting', '2019-10-08T12:00:00'),"
        " ('e2', 'Kickoff', '2020-01-15T09:30:00');"
        "INSERT INTO expense VALUES ('e1', 20.0), ('e1', 12.5), ('e2', 100.0);"
    ),
}
# (db_id, SQLite's gold, PostgreSQL's gold): each side uses a function the other engine lacks.
QUESTIONS = [
    (
        "debit_card",
        "SELECT CAST(SUM(IIF(currency = 'EUR', 1, 0)) AS REAL) / SUM(IIF(currency = 'CZK', 1, 0)) FROM customers",
        "SELECT CAST(SUM(CASE WHEN currency = 'EUR' THEN 1 ELSE 0 END) AS REAL) / "
        "NULLIF(SUM(CASE WHEN currency = 'CZK' THEN 1 ELSE 0 END), 0) FROM customers",
    ),
    (
        "debit_card",
        "SELECT customerid FROM yearmonth WHERE SUBSTR(date, 1, 4) = '2012' ORDER BY consumption DESC LIMIT 1",
        "SELECT customerid FROM yearmonth WHERE date::text LIKE '2012%' ORDER BY consumption DESC NULLS LAST LIMIT 1",
    ),
    (
        "student_club",
        "SELECT strftime('%Y', event_date), SUM(cost) FROM event JOIN expense ON event_id = link_to_event "
        "GROUP BY event_id ORDER BY event_id",
        "SELECT TO_CHAR(CAST(event_date AS TIMESTAMP), 'YYYY'), SUM(cost) FROM event JOIN expense "
        "ON event_id = link_to_event GROUP BY event_id, event_date ORDER BY event_id",
    ),
]


def _records(dialect: int) -> list[dict[str, object]]:
    return [
        {
            "question_id": 1471 + i,
            "db_id": db_id,
            "question": f"question {i}?",
            "evidence": "",
            "SQL": sqls[dialect],
            "difficulty": "simple",
        }
        for i, (db_id, *sqls) in enumerate(QUESTIONS)
    ]


@pytest.fixture(scope="module")
def minidev(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("minidev") / "MINIDEV"
    for db_id, script in DATABASES.items():
        folder = root / "dev_databases" / db_id
        folder.mkdir(parents=True)
        conn = sqlite3.connect(folder / f"{db_id}.sqlite")
        conn.executescript(script)
        conn.commit()
        conn.close()
    (root / "mini_dev_sqlite.json").write_text(json.dumps(_records(0), indent=2))
    (root / "mini_dev_postgresql.json").write_text(json.dumps(_records(1), indent=2))
    return root


def _rows(db: Backend, sql: str) -> list[tuple[object, ...]]:
    result = execute(db, sql, PRESETS["metric"])
    assert isinstance(result, QueryResult), (sql, result)
    return [tuple(round(v, 6) if isinstance(v, float) else v for v in row) for row in result.rows]


def test_a_sqlite_dataset_reads_the_sqlite_file(minidev: Path) -> None:
    examples = load_split("bird", minidev, "dev", drop_failing_gold=True).examples
    assert [e.gold_sql for e in examples] == [sqlite for _, sqlite, _ in QUESTIONS]  # every one runs on SQLite
    assert [e.id for e in examples] == ["1471", "1472", "1473"]


def test_a_postgres_dataset_reads_the_postgresql_file(minidev: Path, pg_server: PgServer) -> None:
    reader = write_postgres(minidev / "dev_databases", pg_server.new_database("minidev"), role="minidev_reader")
    examples = load_split("bird", minidev, "dev", drop_failing_gold=True, dsn=reader).examples
    assert [e.gold_sql for e in examples] == [pg for _, _, pg in QUESTIONS]  # every one runs on the server
    lite = {e.id: e for e in load_split("bird", minidev, "dev").examples}
    scorer = ExecScorer()
    for example in examples:
        db = get_database(example.db_path)
        assert isinstance(db, PostgresDatabase) and db.schema_name == example.db_id
        assert scorer.score(db, example.gold_sql, example.gold_sql, "ex").ex_match
        # the two files' gold SQL answer alike, each on its own engine
        twin = lite[example.id]
        assert _rows(db, example.gold_sql) == _rows(get_database(twin.db_path), twin.gold_sql), example.id
        assert example.gold_tables == twin.gold_tables and example.gold_columns == twin.gold_columns


def test_databases_sharing_one_schema_as_in_the_release_dump(minidev: Path, pg_server: PgServer) -> None:
    """BIRD mini-dev's PostgreSQL dump loads every database's tables into one database's
    ``public`` schema; ``dsn`` ending ``#public`` reads every db_id from it."""
    admin = pg_server.new_database("bird_dump")
    with psycopg.connect(admin) as conn:
        for db_id in DATABASES:
            copy_sqlite_to_postgres(minidev / "dev_databases" / db_id / f"{db_id}.sqlite", conn, db_id)
            for (table,) in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s", (db_id,)).fetchall():
                conn.execute(f'ALTER TABLE "{db_id}"."{table}" SET SCHEMA public')
            conn.execute(f'DROP SCHEMA "{db_id}"')
        create_reader_role(conn, "dump_reader", ["public"])
        conn.execute("SELECT pg_stat_force_next_flush()")
    dsn = role_dsn(admin, "dump_reader") + "#public"
    examples = load_split("bird", minidev, "dev", drop_failing_gold=True, dsn=dsn).examples
    assert [e.gold_sql for e in examples] == [pg for _, _, pg in QUESTIONS]
    every_table = {"customers", "yearmonth", "event", "expense"}
    for example in examples:
        assert example.db_path.endswith(f"#public/{example.db_id}")
        db = get_database(example.db_path)  # reopened from the locator alone: the db_id is kept
        assert isinstance(db, PostgresDatabase) and (db.schema_name, db.db_id) == ("public", example.db_id)
        assert set(db.schema()) == every_table  # the agent sees the whole dump, as the release's evaluation
        assert ExecScorer().score(db, example.gold_sql, example.gold_sql, "ex").ex_match
        box = ToolBox(db, ("execute_sql",))
        answer = box.call("execute_sql", {"db_id": example.db_id, "sql": example.gold_sql})
        assert answer.ok, answer.payload


def test_only_the_postgresql_file_needs_a_dsn(minidev: Path, tmp_path: Path) -> None:
    root = tmp_path / "MINIDEV"
    root.mkdir()
    (root / "dev_databases").symlink_to(minidev / "dev_databases")
    (root / "mini_dev_postgresql.json").write_text((minidev / "mini_dev_postgresql.json").read_text())
    with pytest.raises(DataError, match=r"mini_dev_postgresql.json holds the questions.*set data.dsn"):
        load_split("bird", root, "dev")
