"""Reward-trust flags (rex/trust.py) on crafted gold / prediction pairs over the rex test
database (tests/rex/conftest.py: ``people``, 6 rows with NULLs; ``big``, 1,200 rows)."""

from __future__ import annotations

from typing import Any

import pytest

from rex import ExecScorer
from rex.tables import Table
from rex.trust import FLAGS, GoldFacts, trust_flags


def flags(db: Any, gold: str, pred: str, metric: str = "ex") -> tuple[str, ...]:
    return ExecScorer().score(db, gold, pred, metric).flags


def test_a_clean_match_carries_no_flag(test_db: Any) -> None:
    score = ExecScorer().score(
        test_db, "SELECT name FROM people WHERE city = 'Oslo'", "SELECT name FROM people WHERE id IN (1, 3, 6)"
    )
    assert score.ex_match and score.flags == ()


@pytest.mark.parametrize(
    ("gold", "pred", "metric", "flag"),
    [
        # any query that returns nothing matches an empty gold result
        ("SELECT name FROM people WHERE age > 100", "SELECT name FROM people WHERE age < 0", "ex", "gold_empty"),
        # 3 people in Oslo, and 3 people older than 26: an unrelated filter counts the same
        (
            "SELECT COUNT(*) FROM people WHERE city = 'Oslo'",
            "SELECT COUNT(*) FROM people WHERE age > 26",
            "ex",
            "gold_one_row",
        ),
        # gold keeps every row: a query with no filter at all matches
        ("SELECT * FROM people WHERE id > 0", "SELECT * FROM people", "ex", "gold_whole_table"),
        # the same, with the table's columns named in another order
        (
            "SELECT name, id, age, score, city, code FROM people WHERE id < 99",
            "SELECT name, id, age, score, city, code FROM people",
            "ex",
            "gold_whole_table",
        ),
        # gold orders its rows; EX and QATCH compare sets, so the reversed order matches
        (
            "SELECT name FROM people ORDER BY name",
            "SELECT name FROM people ORDER BY name DESC",
            "ex",
            "gold_ordered_as_set",
        ),
        (
            "SELECT name FROM people ORDER BY name",
            "SELECT name FROM people ORDER BY name DESC",
            "qatch",
            "gold_ordered_as_set",
        ),
        # DISTINCT dropped: equal as sets of rows, not as bags
        ("SELECT DISTINCT city FROM people", "SELECT city FROM people", "ex", "set_not_bag"),
    ],
)
def test_each_flag_on_a_crafted_match(test_db: Any, gold: str, pred: str, metric: str, flag: str) -> None:
    score = ExecScorer().score(test_db, gold, pred, metric)
    assert score.score == 1.0 and flag in score.flags and set(score.flags) <= set(FLAGS)


def test_flags_that_do_not_apply_stay_off(test_db: Any) -> None:
    # REX compares rows in order when gold has a top-level ORDER BY: no set comparison
    assert "gold_ordered_as_set" not in flags(
        test_db, "SELECT name FROM people ORDER BY name", "SELECT name FROM people", "rex"
    )
    # one row short of the table is no whole table
    assert flags(test_db, "SELECT * FROM people WHERE id > 1", "SELECT * FROM people WHERE id > 1") == ()
    # same rows and duplicates on both sides: no bag difference
    assert flags(test_db, "SELECT city FROM people", "SELECT city FROM people WHERE id > 0") == ()
    # an ORDER BY on a one-row result orders nothing
    assert flags(test_db, "SELECT name FROM people ORDER BY age DESC LIMIT 1", "SELECT 'Dee'") == ("gold_one_row",)


def test_gold_flags_are_on_every_sample_and_comparison_flags_only_on_a_match(test_db: Any) -> None:
    wrong = ExecScorer().score(
        test_db, "SELECT DISTINCT city FROM people ORDER BY city", "SELECT name FROM people", "ex"
    )
    assert not wrong.ex_match and wrong.flags == ("gold_ordered_as_set",)
    failed = ExecScorer().score(test_db, "SELECT nope FROM people", "SELECT 1")
    assert failed.gold_failed and failed.flags == ()


def test_a_test_suite_rejection_is_read_from_the_details(test_db: Any) -> None:
    gold = Table(("a",), ((1,), (2,)))
    assert trust_flags(gold, gold, "match", GoldFacts(), None, {"suite_rejected": True}) == ["suite_rejected"]
    assert trust_flags(gold, gold, "match", GoldFacts(), None, {"suite_rejected": False}) == []
    # a verdict added to the details after scoring (the neighbours run once the original matched)
    score = ExecScorer().score(test_db, "SELECT COUNT(*) FROM people", "SELECT 6")
    score.details["suite_rejected"] = True
    assert score.flags == ("gold_one_row", "suite_rejected")


def test_gold_facts_are_worked_out_once_and_read_a_table_only_when_its_count_matches(
    test_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    scorer = ExecScorer()
    queries: list[str] = []
    real = type(test_db).query_internal

    def spy(self: Any, sql: str, params: Any = ()) -> Any:
        queries.append(sql)
        return real(self, sql, params)

    monkeypatch.setattr(type(test_db), "query_internal", spy)
    gold = "SELECT id, name, age, score, city, code FROM people WHERE id <= 3"  # people's width, half its rows
    for pred in ("SELECT 1", "SELECT id, name, age, score, city, code FROM people WHERE id <= 3"):
        scorer.score(test_db, gold, pred)
    assert not any(q.startswith("SELECT * FROM") for q in queries)  # 3 rows != people's 6: never read
    counts = [q for q in queries if q.startswith("SELECT COUNT(*)")]
    assert len(counts) <= 2  # people and big (both 6 columns), once, for both samples
    facts = scorer.gold(test_db, gold).facts(test_db)
    assert facts is scorer.gold(test_db, gold).facts(test_db) and facts.whole_table is None
