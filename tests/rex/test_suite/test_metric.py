"""The test_suite metric: a wrong query that matches on the original is rejected on a
neighbour; the gold query and an equivalent rewriting are accepted."""

from __future__ import annotations

from typing import Any

import pytest

from rex import METRICS, ExecScorer
from rex.test_suite import SuiteSettings, ensure_suite
from tests.rex.test_suite.conftest import GOLDS, IN_OSLO, OVER_100

SETTINGS = SuiteSettings(neighbours=4, rows_per_table=12)


@pytest.fixture
def suited(shop: Any) -> Any:
    ensure_suite(shop, GOLDS, SETTINGS)
    return shop


def score(db: Any, gold: str, pred: str | None, metric: str = "test_suite") -> Any:
    return ExecScorer().score(db, gold, pred, metric)


def test_it_is_a_registered_execution_metric() -> None:
    assert "test_suite" in METRICS.names()


def test_a_count_without_its_where_is_rejected(suited: Any) -> None:
    ex = score(suited, OVER_100, "SELECT COUNT(*) FROM orders", "ex")
    suite = score(suited, OVER_100, "SELECT COUNT(*) FROM orders")
    assert ex.score == 1.0 and ex.outcome == "match"  # EX is fooled on the original
    assert suite.score == 0.0 and suite.details["suite_rejected"] is True
    assert suite.details["suite_neighbour"] in range(4) and suite.details["suite_outcome"] == "mismatch"
    assert suite.outcome == "match" and suite.ex_match  # EX's own outcome is unchanged


def test_an_empty_result_matching_an_empty_gold_is_rejected(suited: Any) -> None:
    typo = "SELECT name FROM customers WHERE city = 'Olso'"
    assert score(suited, IN_OSLO, typo, "ex").score == 1.0  # both empty on the original
    assert score(suited, IN_OSLO, typo).details["suite_rejected"] is True


@pytest.mark.parametrize(
    ("gold", "pred"),
    [
        (OVER_100, OVER_100),
        (OVER_100, "SELECT COUNT(o.id) FROM orders AS o WHERE NOT o.amount <= 100"),
        (IN_OSLO, "SELECT c.name FROM customers AS c WHERE c.city IN ('Oslo')"),
    ],
)
def test_the_gold_and_an_equivalent_rewriting_are_accepted(suited: Any, gold: str, pred: str) -> None:
    scored = score(suited, gold, pred)
    assert scored.score == 1.0 and scored.details["suite_rejected"] is False


def test_an_equivalent_rewriting_runs_on_the_neighbours(suited: Any) -> None:
    scored = score(suited, OVER_100, "SELECT COUNT(o.id) FROM orders AS o WHERE NOT o.amount <= 100")
    assert scored.details["suite_judged"] == 4 and "suite_same_sql" not in scored.details


def test_neighbours_run_only_after_a_match_on_the_original(suited: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from rex.test_suite import metric

    def refuse(*args: Any) -> Any:
        raise AssertionError("the suite was consulted for a prediction EX already rejects")

    monkeypatch.setattr(metric, "suite_for_scoring", refuse)
    for pred in ("SELECT COUNT(*) FROM customers", "SELECT nope FROM orders", None):
        scored = score(suited, OVER_100, pred)
        assert scored.score == 0.0 and "suite_rejected" not in scored.details


def test_gold_results_on_the_neighbours_are_computed_once(suited: Any) -> None:
    scorer = ExecScorer()
    rewrite = "SELECT COUNT(o.id) FROM orders AS o WHERE NOT o.amount <= 100"
    scorer.score(suited, OVER_100, rewrite, "test_suite")
    misses = scorer.misses  # the original and each neighbour
    for _ in range(3):
        assert scorer.score(suited, OVER_100, rewrite, "test_suite").score == 1.0
    assert misses == 5 and scorer.misses == misses


def test_without_a_built_suite_one_is_built_on_first_use(shop: Any, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING"):
        scored = score(shop, OVER_100, "SELECT COUNT(*) FROM orders")
    assert scored.details["suite_rejected"] is True
    assert "python -m rex suite build" in caplog.text
