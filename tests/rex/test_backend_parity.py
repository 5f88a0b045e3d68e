"""EX, REX and QATCH score the same gold/prediction pairs identically on a minibird
database and on its DuckDB copy (``eval.data.duckdb_copy``): the DuckDB backend returns the
values SQLite would, whatever DuckDB's own types (``Decimal``, ``bool``, ``HUGEINT`` sums)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from eval.data import minibird
from eval.data.duckdb_copy import copy_sqlite_to_duckdb
from eval.data.minibird.domains import all_domains
from rex.scorer import ExecScore, ExecScorer
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
