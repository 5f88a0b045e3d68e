"""ExecScorer under a result budget on a real SQLite file: a prediction past it is
``pred_too_large`` (0 under every metric, never an exception), a gold result past it is
``gold_too_large`` (the example cannot be scored), results within it score exactly as
without one, and BIRD's official EX counts a result past it as wrong."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from rex import ExecScorer, execution_match
from rex.bird_ex import official_ex, official_result
from tests.helpers.wide_table import CROSS_JOIN, ROWS, build_wide_table
from tools import ToolError, get_database
from tools.errors import ConfigError

GOLD = "SELECT id, name FROM t WHERE id < 10"
SMALL = {"max_result_rows": 1_000, "max_result_bytes": None}


@pytest.fixture(scope="module")
def wide(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return get_database(build_wide_table(tmp_path_factory.mktemp("rex_budget") / "wide.sqlite"))


@pytest.mark.parametrize("metric", ["ex", "rex", "qatch", "spider"])
def test_a_prediction_past_the_budget_is_pred_too_large_and_scores_0(wide: Any, metric: str) -> None:
    score = ExecScorer(**SMALL).score(wide, GOLD, CROSS_JOIN, metric)
    assert (score.outcome, score.score, score.ex_match) == ("pred_too_large", 0.0, False)
    assert not score.pred_executed and not score.gold_failed
    assert score.details["pred_error_kind"] == "too_large"


def test_a_gold_result_past_the_budget_is_gold_too_large(wide: Any) -> None:
    score = ExecScorer(**SMALL).score(wide, "SELECT * FROM t a, t b", GOLD)
    assert (score.outcome, score.score, score.gold_failed) == ("gold_too_large", 0.0, True)
    assert score.details["gold_error"].startswith("too_large:")


@pytest.mark.parametrize("metric", ["ex", "rex", "qatch"])
def test_a_prediction_at_the_budget_scores_as_without_one(wide: Any, metric: str) -> None:
    pred = "SELECT id, name FROM t"  # exactly ROWS rows
    budgeted = ExecScorer(max_result_rows=ROWS, max_result_bytes=None).score(wide, GOLD, pred, metric)
    unbounded = ExecScorer(max_result_rows=None, max_result_bytes=None).score(wide, GOLD, pred, metric)
    assert budgeted == unbounded and budgeted.outcome == "mismatch"


def test_the_default_scorer_uses_the_metric_presets_budget(wide: Any) -> None:
    result = ExecScorer().execute(wide, CROSS_JOIN)
    assert isinstance(result, ToolError) and result.kind == "too_large"


def test_official_ex_counts_a_result_past_the_budget_as_wrong(wide: Any) -> None:
    scorer = ExecScorer(**SMALL)
    pred = scorer.execute(wide, CROSS_JOIN)
    assert execution_match(scorer.gold(wide, GOLD).result, pred, official=True) == "mismatch"
    assert official_ex(scorer, wide, GOLD, CROSS_JOIN) == 0
    # the project's too-large result of the same text is what running it as written gives
    assert official_result(scorer, wide, CROSS_JOIN, pred) is pred


def test_the_budget_survives_pickling() -> None:
    scorer = pickle.loads(pickle.dumps(ExecScorer(timeout_s=5.0, max_result_rows=7, max_result_bytes=None)))
    assert (scorer.timeout_s, scorer.max_result_rows, scorer.max_result_bytes) == (5.0, 7, None)
    assert scorer.limits.max_result_rows == 7


def test_a_bad_budget_is_a_config_error_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"ExecScorer max_result_bytes=0"):
        ExecScorer(max_result_bytes=0)
