"""Reward-trust flags reach every design's reward; unscored rewards are counted per reason
and logged; dynamic sampling's ``flagged_positive_as_unknown`` rule (real SQLite rewards,
tests/helpers/reward_cases.py)."""

from __future__ import annotations

import doctest
import logging
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.designs import project_designs
from tests.helpers.reward_cases import example, trajectory, turn
from training.algorithm import reward_trust
from training.algorithm.advantages import dynamic_sampling_filter
from training.algorithm.reward_trust import decision_values, trust_metrics, unscored_reason
from training.algorithm.rewards import get_reward

SLOW_GOLD = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100000000) SELECT MAX(i) FROM n"


def test_doctests() -> None:
    result = doctest.testmod(reward_trust)
    assert result.attempted > 0 and result.failed == 0


def design_reward(name: str) -> tuple[str, str]:
    """(reward, role of the episode that writes the SQL) of a project design."""
    from agents.designs import get_design

    design = get_design(name)
    return design.reward, ("generator" if name == "dualsql" else "agent")


@pytest.mark.parametrize("design", project_designs())
def test_every_designs_reward_carries_the_flags_of_its_execution_score(school_db: Any, design: str) -> None:
    reward, role = design_reward(design)
    traj = trajectory("SELECT 5", [turn(0, "answer")], role=role)
    out = get_reward(reward)(traj, example("SELECT COUNT(*) FROM students"), school_db)  # 5 students
    assert out.error is None and out.components["exec"] == 1.0
    assert out.flags == ("gold_one_row",)
    clean = get_reward(reward)(traj, example("SELECT id FROM students WHERE id IN (1, 5)"), school_db)
    assert clean.error is None and clean.flags == ()


def test_unscored_rewards_are_counted_per_reason_and_logged(
    school_db: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    traj = trajectory("SELECT 1", [turn(0, "answer")])
    errors = [
        get_reward("ex")(traj, example("SELECT nope FROM students"), school_db).error,
        get_reward("ex", timeout_s=0.05)(traj, example(SLOW_GOLD), school_db).error,
        get_reward("ex")(traj, example("SELECT 1"), None).error,
        get_reward("ex")(traj, example("  "), school_db).error,
        get_reward("ex")(traj, example("SELECT 1"), str(tmp_path / "missing.sqlite")).error,
        None,
    ]
    assert [unscored_reason(e) for e in errors if e] == [
        "gold_error",
        "gold_timeout",
        "no_database",
        "no_gold_sql",
        "reward_raised",
    ]
    with caplog.at_level(logging.WARNING, logger=reward_trust.__name__):
        metrics = trust_metrics([0.0], [()], errors)
    assert metrics["reward/unscored_rate"] == pytest.approx(5 / 6)
    assert {k: v for k, v in metrics.items() if k.startswith("reward/unscored/")} == {
        f"reward/unscored/{r}": 1.0
        for r in ("gold_error", "gold_timeout", "no_database", "no_gold_sql", "reward_raised")
    }
    logged = caplog.text
    assert "rewards not computed for 5 of 6 rollouts" in logged and "no such column" in logged


def test_a_step_without_unscored_rewards_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger=reward_trust.__name__):
        metrics = trust_metrics([1.0, 1.0, 0.0], [("gold_empty",), (), ("gold_empty",)], [None, None, None])
    assert metrics == {"reward/suspect_positive_rate": 0.5, "reward/unscored_rate": 0.0}
    assert caplog.text == ""


def test_flagged_positives_as_unknown_change_which_groups_vary() -> None:
    # group a varies only through a flagged positive; group b through an unflagged one
    exec_scores = [1.0, 0.0, 0.0, 1.0, 0.0, 0.0]
    flags = [("gold_one_row",), ("gold_one_row",), ("gold_one_row",), (), (), ()]
    groups = ["a", "a", "a", "b", "b", "b"]
    kept_as_is = dynamic_sampling_filter(decision_values(exec_scores, exec_scores, flags, False), groups, 2)
    kept_unknown = dynamic_sampling_filter(decision_values(exec_scores, exec_scores, flags, True), groups, 2)
    assert kept_as_is.kept_groups == ["a", "b"]
    assert kept_unknown.kept_groups == ["b"] and kept_unknown.zero_variance_groups == ["a"]
