"""Spider's official execution match and hardness levels, on a real SQLite database
(people: NULLs, duplicate ages, mixed-type cells)."""

from __future__ import annotations

from typing import Any

import pytest

from rex import ExecScorer
from rex.spider import order_matters, spider_execution_match, spider_hardness

# (gold, prediction, Spider's match, BIRD's match): where the two rules part ways
CASES = [
    # a column permutation: Spider matches it, BIRD (column order fixed) does not
    (
        "SELECT name, age FROM people WHERE city = 'Oslo'",
        "SELECT age, name FROM people WHERE city = 'Oslo'",
        True,
        False,
    ),
    # duplicates count in Spider (two people aged 25), not in BIRD's set rule
    ("SELECT age FROM people WHERE city = 'Rome'", "SELECT DISTINCT age FROM people WHERE city = 'Rome'", False, True),
    # order matters when the gold says ORDER BY
    ("SELECT name FROM people ORDER BY id", "SELECT name FROM people ORDER BY id DESC", False, True),
    # and does not otherwise
    ("SELECT name FROM people", "SELECT name FROM people ORDER BY name DESC", True, True),
    # numbers compare by value (1 == 1.0), as Python equality in the evaluator
    ("SELECT COUNT(*) FROM people", "SELECT COUNT(*) * 1.0 FROM people", True, True),
    # a different row count is never a match
    ("SELECT name FROM people WHERE age > 30", "SELECT name FROM people WHERE age >= 30", False, False),
    # both empty: a match
    ("SELECT name FROM people WHERE age > 99", "SELECT city FROM people WHERE age > 100", True, True),
]


@pytest.mark.parametrize("gold,pred,spider,bird", CASES)
def test_spider_and_bird_rules_on_real_results(test_db: Any, gold: str, pred: str, spider: bool, bird: bool) -> None:
    scorer = ExecScorer()
    official = scorer.score(test_db, gold, pred, "spider")
    assert official.score == (1.0 if spider else 0.0)
    assert official.details["spider_match"] is spider
    assert scorer.score(test_db, gold, pred, "ex").ex_match is bird


def test_pred_error_is_never_a_spider_match(test_db: Any) -> None:
    score = ExecScorer().score(test_db, "SELECT name FROM people", "SELECT nope FROM people", "spider")
    assert score.score == 0.0 and score.outcome == "pred_error"


def test_order_rule_is_spiders_substring_test() -> None:
    assert order_matters("select a from t order  by a") and not order_matters("SELECT a FROM t")
    assert spider_execution_match((["a"], [(1,), (2,)]), (["a"], [(2,), (1,)]), ordered=False)


@pytest.mark.parametrize(
    "sql,level",
    [
        ("SELECT count(*) FROM singer", "easy"),
        ("SELECT name FROM singer WHERE age > 20", "easy"),
        ("SELECT name, country FROM singer WHERE age > 20", "medium"),
        (
            "SELECT T2.name FROM concert AS T1 JOIN stadium AS T2 ON T1.stadium_id = T2.stadium_id GROUP BY T2.name",
            "medium",
        ),
        ("SELECT name FROM singer WHERE age > (SELECT avg(age) FROM singer)", "hard"),
        ("SELECT name FROM a WHERE x = 1 EXCEPT SELECT name FROM a WHERE y = 2", "hard"),
        (
            "SELECT T1.a FROM t1 AS T1 JOIN t2 AS T2 ON T1.id = T2.id WHERE T2.b = 'x' OR T2.c LIKE '%y%' "
            "GROUP BY T1.a ORDER BY count(*) DESC LIMIT 1",
            "extra",
        ),
        ("SELECT FROM WHERE (", "unknown"),
    ],
)
def test_spider_hardness_levels(sql: str, level: str) -> None:
    assert spider_hardness(sql) == level
