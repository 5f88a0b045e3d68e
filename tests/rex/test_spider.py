"""Spider's execution match on real SQLite databases: ``spider`` (evaluation.py's pipeline:
its SQL rewrite, then its comparison) against ``spider_strict`` (the comparison on the SQL
as written) and BIRD's ``ex``."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from rex import ExecScorer, get_metric
from rex.spider import (
    official_execution_match,
    official_sql_pair,
    order_matters,
    remove_distinct,
    spider_execution_match,
)

AIRLINES = [  # flight_2's airlines table, four of six in the USA
    (1, "United Airlines", "UAL", "USA"),
    (2, "US Airways", "USAir", "USA"),
    (3, "Delta Airlines", "Delta", "USA"),
    (4, "Lufthansa", "DLH", "Germany"),
    (5, "JetBlue Airways", "JetBlue", "USA"),
    (6, "Air France", "AFR", "France"),
]


@pytest.fixture(scope="module")
def flights(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from tools import get_database

    path: Path = tmp_path_factory.mktemp("flight_2") / "flight_2.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE airlines (uid INTEGER PRIMARY KEY, Airline TEXT, Abbreviation TEXT, Country TEXT)")
    con.executemany("INSERT INTO airlines VALUES (?, ?, ?, ?)", AIRLINES)
    con.commit()
    con.close()
    return get_database(path)


# (gold, prediction, evaluation.py's 0/1, spider_strict's 0/1)
OFFICIAL_CASES = [
    # evaluation.py drops DISTINCT from both before running them (--keep_distinct is off)
    ("SELECT Country FROM airlines", "SELECT DISTINCT Country FROM airlines", 1, 0),
    # ... everywhere, count(DISTINCT x) included: both run as count(Country)
    ("SELECT count(DISTINCT Country) FROM airlines", "SELECT count(*) FROM airlines", 1, 0),
    # '> =' is joined (SQLite rejects the spaced form)
    ("SELECT Airline FROM airlines WHERE uid >= 5", "SELECT Airline FROM airlines WHERE uid > = 5", 1, 0),
    ("SELECT Airline FROM airlines WHERE uid != 1", "SELECT Airline FROM airlines WHERE uid ! = 1", 1, 0),
    # the 'value' placeholder runs as 1
    ("SELECT Airline FROM airlines WHERE uid = 1", "SELECT Airline FROM airlines WHERE uid = value", 1, 0),
    # YEAR(CURDATE()) runs as 2020
    (
        "SELECT Airline FROM airlines WHERE uid < 3",
        "SELECT Airline FROM airlines WHERE uid < YEAR(CURDATE()) - 2017",
        1,
        0,
    ),
    # the quick rejection sorts row values as text: (1, 1.5) and (1.0, 1.5) sort apart
    (
        "SELECT min(uid), avg(uid) FROM airlines WHERE uid <= 2",
        "SELECT min(uid) * 1.0, avg(uid) FROM airlines WHERE uid <= 2",
        0,
        1,
    ),
    # where the two agree: order matters when the gold says ORDER BY ...
    ("SELECT Airline FROM airlines ORDER BY uid", "SELECT Airline FROM airlines ORDER BY uid DESC", 0, 0),
    # ... and not otherwise
    ("SELECT Airline FROM airlines", "SELECT Airline FROM airlines ORDER BY Airline DESC", 1, 1),
    # a column permutation matches
    ("SELECT Airline, Country FROM airlines", "SELECT Country, Airline FROM airlines", 1, 1),
    # DISTINCT on both sides, and a DISTINCT that changes nothing
    ("SELECT DISTINCT Country FROM airlines", "SELECT DISTINCT Country FROM airlines", 1, 1),
    ("SELECT DISTINCT Airline FROM airlines", "SELECT Airline FROM airlines", 1, 1),
    # a wrong answer is wrong under both
    ("SELECT Airline FROM airlines WHERE Country = 'USA'", "SELECT Airline FROM airlines", 0, 0),
    ("SELECT count(*) FROM airlines WHERE Country = 'USA'", "SELECT count(DISTINCT Country) FROM airlines", 0, 0),
]


@pytest.mark.parametrize("gold,pred,official,strict", OFFICIAL_CASES)
def test_official_pipeline_and_strict_rule_on_real_results(
    flights: Any, gold: str, pred: str, official: int, strict: int
) -> None:
    scorer = ExecScorer()
    assert scorer.score(flights, gold, pred, "spider").score == official
    assert scorer.score(flights, gold, pred, "spider_strict").score == strict


def test_official_rewrite_is_evaluation_py_text_for_text() -> None:
    gold, pred = official_sql_pair(
        "SELECT DISTINCT Country FROM airlines WHERE uid > = 2",
        "SELECT count(DISTINCT value_code) FROM t WHERE a = value AND b ! = 'x < = y' AND c = 'distinct'",
    )
    assert gold == "SELECT  Country FROM airlines WHERE uid >= 2"
    # 'value' is replaced anywhere (a column value_code too); the repair reaches into strings;
    # DISTINCT inside a string stays
    assert pred == "SELECT count( 1_code) FROM t WHERE a = 1 AND b != 'x <= y' AND c = 'distinct'"
    kept = official_sql_pair("SELECT DISTINCT a FROM t", "SELECT DISTINCT a FROM t", keep_distinct=True)
    assert kept == ("SELECT DISTINCT a FROM t", "SELECT DISTINCT a FROM t")
    assert (
        official_sql_pair("SELECT a FROM t", "SELECT 1 WHERE YEAR ( CURDATE ( ) ) > 1")[1] == "SELECT 1 WHERE 2020> 1"
    )
    assert remove_distinct("SELECT 'unterminated") == "SELECT 'unterminated"  # does not tokenize: as is


def test_only_the_official_metric_rewrites() -> None:
    assert get_metric("spider").rewrite is official_sql_pair
    assert get_metric("spider_strict").rewrite is None and get_metric("ex").rewrite is None


# (gold, prediction, spider, spider_strict, BIRD): on the shared people database
CASES = [
    # a column permutation: Spider matches it, BIRD (column order fixed) does not
    (
        "SELECT name, age FROM people WHERE city = 'Oslo'",
        "SELECT age, name FROM people WHERE city = 'Oslo'",
        True,
        True,
        False,
    ),
    # duplicates count in Spider's comparison (two people aged 25), but evaluation.py drops DISTINCT
    (
        "SELECT age FROM people WHERE city = 'Rome'",
        "SELECT DISTINCT age FROM people WHERE city = 'Rome'",
        True,
        False,
        True,
    ),
    ("SELECT age FROM people WHERE city = 'Rome'", "SELECT age FROM people WHERE id = 2", False, False, True),
    # order matters when the gold says ORDER BY
    ("SELECT name FROM people ORDER BY id", "SELECT name FROM people ORDER BY id DESC", False, False, True),
    # and does not otherwise
    ("SELECT name FROM people", "SELECT name FROM people ORDER BY name DESC", True, True, True),
    # numbers compare by value (1 == 1.0), as Python equality in the evaluator
    ("SELECT COUNT(*) FROM people", "SELECT COUNT(*) * 1.0 FROM people", True, True, True),
    # a different row count is never a match
    ("SELECT name FROM people WHERE age > 30", "SELECT name FROM people WHERE age >= 30", False, False, False),
    # both empty: a match
    ("SELECT name FROM people WHERE age > 99", "SELECT city FROM people WHERE age > 100", True, True, True),
]


@pytest.mark.parametrize("gold,pred,spider,strict,bird", CASES)
def test_spider_and_bird_rules_on_real_results(
    test_db: Any, gold: str, pred: str, spider: bool, strict: bool, bird: bool
) -> None:
    scorer = ExecScorer()
    official = scorer.score(test_db, gold, pred, "spider")
    assert official.score == (1.0 if spider else 0.0)
    assert official.details["spider_match"] is spider
    assert scorer.score(test_db, gold, pred, "spider_strict").details["spider_match"] is strict
    assert scorer.score(test_db, gold, pred, "ex").ex_match is bird


@pytest.mark.parametrize("metric", ["spider", "spider_strict"])
def test_pred_error_is_never_a_spider_match(test_db: Any, metric: str) -> None:
    score = ExecScorer().score(test_db, "SELECT name FROM people", "SELECT nope FROM people", metric)
    assert score.score == 0.0 and score.outcome == "pred_error"
    assert ExecScorer().score(test_db, "SELECT name FROM people", None, metric).outcome == "pred_error"


def test_order_rule_is_spiders_substring_test() -> None:
    assert order_matters("select a from t order  by a") and not order_matters("SELECT a FROM t")
    assert spider_execution_match((["a"], [(1,), (2,)]), (["a"], [(2,), (1,)]), ordered=False)
    assert not official_execution_match((["a"], [(1,), (2,)]), (["a"], [(2,), (1,)]), ordered=True)
    assert official_execution_match((["a"], []), (["b", "c"], []), ordered=True)  # two empty results


@pytest.mark.parametrize(
    "gold,pred,official,strict",
    [
        (  # runs only once rewritten
            "SELECT Airline FROM airlines WHERE uid >= 5",
            "SELECT Airline FROM airlines WHERE uid > = 5",
            "match",
            "pred_error",
        ),
        ("SELECT Country FROM airlines", "SELECT DISTINCT Country FROM airlines", "match", "mismatch"),
        ("SELECT Airline FROM airlines WHERE uid >= 5", "SELECT Airline FROM airlines", "mismatch", "mismatch"),
    ],
)
def test_eval_records_decide_spider_ex_on_the_rewritten_pair(
    flights: Any, gold: str, pred: str, official: str, strict: str
) -> None:
    """eval.run's per-question record under data=spider: the outcome and EX come from the
    official pipeline's rewritten pair (a ``> =`` answer fails as written but matches there)."""
    from agents.types import Example
    from eval.scoring import Sample, score_question

    example = Example(id="0", db_id="flight_2", db_path=str(flights.path), question="q", gold_sql=gold)
    for metric, expected in (("spider", official), ("spider_strict", strict)):
        record = score_question(example, [Sample(sql=pred)], ExecScorer(), "greedy", ex_metric=metric)
        matched = int(expected == "match")
        assert (record["outcome"], record["ex"], record["ex_official"]) == (expected, matched, matched), metric
