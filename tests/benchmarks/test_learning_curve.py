"""benchmarks/learning_curve.py's held-out scoring on the test suite and its summary of
arms without a control, on the bundled minibird benchmark."""

from __future__ import annotations

import argparse
import doctest
import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def lc() -> ModuleType:
    spec = importlib.util.spec_from_file_location("learning_curve", REPO / "benchmarks" / "learning_curve.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def schools_dev(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """24 minibird dev questions of one database, their suite in a fresh cache."""
    from eval.data import load_examples
    from rex.test_suite.suites import forget_loaded

    examples = load_examples("minibird", split="dev")  # the bundled build, from the usual cache
    db_id = examples[0].db_id
    chosen = [ex for ex in examples if ex.db_id == db_id][:24]
    monkeypatch.setenv("SQLAGENT_RL_CACHE", str(tmp_path / "cache"))
    forget_loaded()
    yield chosen
    forget_loaded()


def test_its_doctests_pass(lc: ModuleType) -> None:
    failed, tried = doctest.testmod(lc)
    assert tried >= 3 and failed == 0


@pytest.mark.slow
def test_held_out_scores_ex_and_the_suite_and_counts_rejected_matches(lc: ModuleType, schools_dev: list[Any]) -> None:
    from rex import ExecScorer
    from rex.test_suite import ensure_suites, mutants
    from tools import get_database

    ensure_suites((ex.db_path, ex.gold_sql) for ex in schools_dev)
    db = get_database(schools_dev[0].db_path)
    scorer = ExecScorer()
    # a mutant of some gold query that EX accepts on the original and the suite rejects
    fooling = next(
        (ex, m.sql)
        for ex in schools_dev
        for m in mutants(ex.gold_sql)
        if scorer.score(db, ex.gold_sql, m.sql, "ex").ex_match
        and scorer.score(db, ex.gold_sql, m.sql, "test_suite").score == 0.0
    )
    final: dict[str, str | None] = {ex.id: ex.gold_sql for ex in schools_dev}
    final[fooling[0].id] = fooling[1]
    final[schools_dev[-1].id if schools_dev[-1] is not fooling[0] else schools_dev[0].id] = None  # no answer
    ev = lc.score_held_out(schools_dev, final)
    n = len(schools_dev)
    assert ev["ids"] == [ex.id for ex in schools_dev]
    assert sum(ev["match"]) == n - 1 and sum(ev["suite"]) == n - 2
    assert ev["suite_rejected"] == 1 and ev["ex"] == pytest.approx((n - 1) / n)
    assert ev["ex_test_suite"] == pytest.approx((n - 2) / n)
    assert ev["suite"][[ex.id for ex in schools_dev].index(fooling[0].id)] == 0


def _arm(rewards: list[float], positives: list[int], flagged: list[int], moved: bool) -> dict[str, Any]:
    steps = [
        {
            "reward": r,
            "suspect_positive_rate": f / p if p else 0.0,
            "exec_positive": p,
            "exec_positive_flagged": f,
            "zero_variance_groups": 0,
            "grad_norm": 1.0,
            "seconds": 2.0,
            "per_question": {},
        }
        for r, p, f in zip(rewards, positives, flagged, strict=True)
    ]
    return {"steps": steps, "moved": moved}


@pytest.mark.slow  # matplotlib's import and drawing
def test_a_run_without_control_compares_with_the_warm_start(lc: ModuleType, tmp_path: Path) -> None:
    args = argparse.Namespace(steps=2, last=2, seed=0, recipe="think2sql", overrides=["reward.exec_metric=test_suite"])
    warm = {"match": [1, 1, 0, 0], "suite": [1, 0, 0, 0], "ex": 0.5, "ex_test_suite": 0.25, "suite_rejected": 1}
    after = {"match": [1, 1, 1, 0], "suite": [1, 1, 0, 0], "executable": [1, 1, 1, 0]}
    after.update(ex=0.75, ex_test_suite=0.5, suite_rejected=1)
    summary = lc.summarise(args, warm, {"grpo": _arm([0.2, 0.4], [4, 0], [1, 0], True)}, {"grpo": after})
    assert summary["no_control"] and summary["ex_diff_against"] == "warm start"
    assert summary["ex_diff"]["mean"] == pytest.approx(0.25)  # paired over the held-out questions
    assert "GRPO - warm start" in summary["verdict_ex"] and "verdict_reward" not in summary
    assert summary["suite_rejected_warm_start"] == 1 and summary["suite_rejected_after"] == {"grpo": 1}
    assert summary["ex_test_suite_after"] == {"grpo": 0.5} and summary["ex_test_suite_warm_start"] == 0.25
    assert summary["suspect_positive_rate"] == {"grpo": 0.25} and summary["exec_positive"] == {"grpo": 4}
    assert summary["reward_last_mean"]["grpo"] == pytest.approx(0.3)
    json.dumps(summary)  # the summary file is JSON
    from benchmarks.learning_curve_plot import plot

    plot(summary, tmp_path / "curve.png")
    assert (tmp_path / "curve.png").stat().st_size > 1000
