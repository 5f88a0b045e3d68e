"""The result budget in rewards: every reward takes ``max_result_rows`` / ``max_result_bytes``
(``+reward.max_result_rows=...``), a prediction past the budget scores 0 and is recorded as
``pred_too_large``, a gold result past it is a counted reward error, and a bad value is a
``ConfigError`` naming it."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from rex import ExecScorer
from tests.helpers.reward_cases import example, trajectory, turn
from tests.training.algorithm.test_rewards import SINGLE_METRIC, design_rewards
from tests.training.config.test_config import build
from tools.errors import ConfigError
from training.algorithm.rewards import get_reward
from training.runs.samples import result_tables

CROSS = "SELECT * FROM students a, students b"  # 25 rows: past a 10-row budget
BUDGET = {"max_result_rows": 10, "max_result_bytes": None}


def _episode(name: str, sql: str) -> Any:
    role = "generator" if name == "dualsql" else "agent"
    return trajectory(sql, [turn(0, "answer", text=sql)], role=role)


@pytest.mark.parametrize("name", [*design_rewards(), *SINGLE_METRIC])
def test_a_prediction_past_the_budget_scores_0_in_every_reward(school_db: Any, name: str) -> None:
    reward = get_reward(name, **BUDGET)
    out = reward(_episode(name, CROSS), example(), school_db)
    assert out.error is None, out.error
    assert out.components["exec"] == 0.0
    assert out.components.get("r_exec", 0.0) == 0.0  # TRUST-SQL's 0.2 is for SQL that ran


def test_the_recorded_outcome_is_pred_too_large(school_db: Any) -> None:
    ex = dataclasses.replace(example(), db_path=str(school_db.path))
    tables = result_tables(ex, CROSS, ExecScorer(**BUDGET))
    assert tables["outcome"] == "pred_too_large"
    assert tables["pred"] is not None


def test_within_the_budget_the_reward_is_unchanged(school_db: Any) -> None:
    gold = example().gold_sql
    budgeted = get_reward("rex", **BUDGET)(_episode("rex", gold), example(), school_db)
    unbounded = get_reward("rex", max_result_rows=None, max_result_bytes=None)(
        _episode("rex", gold), example(), school_db
    )
    assert budgeted == unbounded and budgeted.total == 1.0


def test_a_gold_result_past_the_budget_is_a_counted_error(school_db: Any) -> None:
    out = get_reward("ex", **BUDGET)(_episode("ex", CROSS), example(gold_sql=CROSS), school_db)
    assert out.total == 0.0 and out.error is not None and "gold_too_large" in out.error


def test_the_budget_comes_from_the_training_config(school_db: Any) -> None:
    cfg = build("recipe=trustsql", "+reward.max_result_rows=10", "+reward.max_result_bytes=null")
    reward = get_reward(cfg.reward.name, exec_metric=cfg.reward.exec_metric, **cfg.reward.options)
    assert (reward.max_result_rows, reward.max_result_bytes) == (10, None)  # type: ignore[attr-defined]
    assert reward(_episode("trustsql", CROSS), example(), school_db).components["exec"] == 0.0


@pytest.mark.parametrize("name", ["trustsql", "composite", "ex"])
def test_a_bad_budget_is_a_config_error_naming_it(name: str) -> None:
    with pytest.raises(ConfigError, match=rf"{name} max_result_rows=0"):
        get_reward(name, max_result_rows=0)
