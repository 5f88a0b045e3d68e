"""EX, REX, QATCH and BIRD's official EX score the same gold/prediction pairs identically on a minibird
database, on its DuckDB copy (``eval.data.duckdb_copy``) and on its PostgreSQL copy
(``eval.data.postgres_copy``, on the session's private server): each backend returns the
values SQLite would, whatever the engine's own types (``Decimal``, ``bool``, ``HUGEINT`` and
``numeric`` sums, PostgreSQL's integer division)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from eval.data import minibird
from eval.data.duckdb_copy import copy_sqlite_to_duckdb
from eval.data.minibird.domains import all_domains
from rex.bird_ex import official_ex
from rex.scorer import ExecScore, ExecScorer
from tests.helpers.pg_server import PgServer
from tools import QueryResult, get_database

METRICS = ("ex", "rex", "qatch")

TYPE_PAIRS = [
    # DuckDB returns Decimal for CAST(... AS DECIMAL) and for decimal literals; SQLite an int or float.
    ("SELECT COUNT(*) FROM patients", "SELECT CAST(COUNT(*) AS DECIMAL(18, 0)) FROM patients"),
    ("SELECT 2.5", "SELECT CAST(2.5 AS DECIMAL(4, 1))"),
    # A comparison is a bool in DuckDB, 0/1 in SQLite.
    (
        "SELECT CASE WHEN COUNT(*) > 10 THEN 1 ELSE 0 END FROM patients",
        "SELECT COUNT(*) > 10 FROM patients",
    ),
    # SUM of integers is a HUGEINT in DuckDB.
    ("SELECT COUNT(*) FROM visits", "SELECT SUM(1) FROM visits"),
    ("SELECT COUNT(*) FROM visits", "SELECT SUM(2) FROM visits"),
    ("SELECT AVG(yrs_exp) FROM doctors", "SELECT SUM(yrs_exp) * 1.0 / COUNT(yrs_exp) FROM doctors"),
    ("SELECT doc_id FROM doctors ORDER BY doc_id", "SELECT doc_id FROM doctors ORDER BY doc_id DESC"),
    ("SELECT doc_id FROM doctors", "SELECT no_such_column FROM doctors"),
]


@pytest.fixture(scope="module")
def clinic(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[dict[str, Any]]]:
    """minibird's ``clinic`` dev database (SQLite and a DuckDB copy) and its questions."""
    root = tmp_path_factory.mktemp("minibird") / "b"
    minibird.build(root, [d for d in all_domains() if d.db_id == "clinic"])
    sqlite_path = root / "dev" / "dev_databases" / "clinic" / "clinic.sqlite"
    duckdb_path = sqlite_path.with_suffix(".duckdb")
    copy_sqlite_to_duckdb(sqlite_path, duckdb_path)
    questions = json.loads((root / "dev" / "dev.json").read_text(encoding="utf-8"))
    return sqlite_path, duckdb_path, questions


def _comparable(score: ExecScore) -> tuple[Any, ...]:
    """Everything but the engines' error messages, which are worded differently."""
    details = {k: v for k, v in score.details.items() if not k.endswith("_error")}
    return (score.score, score.outcome, score.pred_executed, score.pred_nonempty, score.ex_match, details)


@pytest.mark.slow
def test_minibird_pairs_score_the_same_on_sqlite_and_duckdb(clinic: tuple[Path, Path, list[dict[str, Any]]]) -> None:
    sqlite_path, duckdb_path, questions = clinic
    lite, duck = get_database(sqlite_path), get_database(duckdb_path)
    scorer = ExecScorer()
    # The gold SQL is written for SQLite; the pairs are those whose text DuckDB also runs
    # (strftime's argument order, GROUP BY rules and REAL's width differ between the dialects).
    portable = [q["SQL"] for q in questions if isinstance(scorer.execute(duck, q["SQL"]), QueryResult)]
    assert len(portable) >= len(questions) // 2, (len(portable), len(questions))
    pairs = [(g, p) for i, g in enumerate(portable) for p in (g, portable[(i + 1) % len(portable)])] + TYPE_PAIRS
    outcomes: set[str] = set()
    for gold, pred in pairs:
        for metric in METRICS:
            a, b = scorer.score(lite, gold, pred, metric), scorer.score(duck, gold, pred, metric)
            assert _comparable(a) == _comparable(b), (metric, gold, pred)
            outcomes.add(a.outcome)
    assert {"match", "mismatch", "pred_error"} <= outcomes


PG_TYPE_PAIRS = [
    # PostgreSQL: numeric for CAST(... AS DECIMAL), SUM of bigint and AVG; bool for comparisons.
    ("SELECT COUNT(*) FROM patients", "SELECT CAST(COUNT(*) AS DECIMAL(18, 0)) FROM patients"),
    ("SELECT 2.5", "SELECT CAST(2.5 AS DECIMAL(4, 1))"),
    ("SELECT CASE WHEN COUNT(*) > 10 THEN 1 ELSE 0 END FROM patients", "SELECT COUNT(*) > 10 FROM patients"),
    ("SELECT COUNT(*) FROM visits", "SELECT SUM(1) FROM visits"),
    ("SELECT SUM(yrs_exp) FROM doctors", "SELECT SUM(yrs_exp) FROM doctors WHERE yrs_exp >= 0"),
    ("SELECT MAX(fee) FROM visits", "SELECT MAX(fee) FROM visits WHERE fee IS NOT NULL"),
    ("SELECT doc_id FROM doctors ORDER BY doc_id", "SELECT doc_id FROM doctors ORDER BY doc_id DESC"),
    ("SELECT doc_id FROM doctors", "SELECT no_such_column FROM doctors"),
    ("SELECT doc_id FROM doctors", "SELECT doc_id FROM doctors WHERE 1 = 0"),
]


def _outcome(score: ExecScore) -> tuple[Any, ...]:
    """``_comparable`` without REX's column mapping: unnamed result columns are named by each
    engine (SQLite: the expression's text, PostgreSQL: ``count``, ``sum``, ``?column?``), and
    REX pairs equally named columns before reading content; scores and outcomes must agree."""
    comparable = _comparable(score)
    details = dict(comparable[-1])
    if isinstance(details.get("rex"), dict):
        details["rex"] = {k: v for k, v in details["rex"].items() if k not in ("mapping", "mapped_columns")}
    return (*comparable[:-1], details)


@pytest.fixture(scope="module")
def clinic_postgres(pg_server: PgServer, clinic: tuple[Path, Path, list[dict[str, Any]]]) -> str:
    """The clinic database copied into PostgreSQL (schema ``clinic``): its locator for the reader role."""
    import psycopg

    from eval.data.postgres_copy import copy_sqlite_to_postgres, create_reader_role, role_dsn
    from tools.db.postgres_backend import postgres_locator

    admin = pg_server.new_database("parity")
    with psycopg.connect(admin) as conn:
        copy_sqlite_to_postgres(clinic[0], conn, "clinic")
        create_reader_role(conn, "parity_reader", ["clinic"])
    return postgres_locator(role_dsn(admin, "parity_reader"), "clinic")


@pytest.mark.slow
def test_minibird_pairs_score_the_same_on_sqlite_duckdb_and_postgres(
    clinic: tuple[Path, Path, list[dict[str, Any]]], clinic_postgres: str
) -> None:
    sqlite_path, duckdb_path, questions = clinic
    dbs = (get_database(sqlite_path), get_database(duckdb_path), get_database(clinic_postgres))
    assert [db.dialect for db in dbs] == ["sqlite", "duckdb", "postgres"]
    scorer = ExecScorer()
    # The pairs are the gold SQL that every engine runs (SQLite's strftime, its loose GROUP BY
    # and integer division differ in the other dialects), each against itself and a neighbour.
    portable = [q["SQL"] for q in questions if all(isinstance(scorer.execute(db, q["SQL"]), QueryResult) for db in dbs)]
    assert len(portable) >= len(questions) // 3, (len(portable), len(questions))
    pairs = [(g, p) for i, g in enumerate(portable) for p in (g, portable[(i + 1) % len(portable)])] + PG_TYPE_PAIRS
    outcomes: set[str] = set()
    officials: list[int] = []
    for gold, pred in pairs:
        for metric in METRICS:
            scores = [_outcome(scorer.score(db, gold, pred, metric)) for db in dbs]
            assert scores[0] == scores[1] == scores[2], (metric, gold, pred, scores)
            outcomes.add(scores[0][1])
        official = [official_ex(scorer, db, gold, pred) for db in dbs]  # BIRD's script's comparison
        assert official[0] == official[1] == official[2], (gold, pred, official)
        officials.append(official[0])
    assert {"match", "mismatch", "pred_error"} <= outcomes
    assert 0 < sum(officials) < len(officials)
