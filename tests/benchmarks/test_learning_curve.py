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


@pytest.mark.slow  # matplotlib's import and drawing
def test_reward_arms_side_by_side(lc: ModuleType, tmp_path: Path) -> None:
    """learning_curve_compare.py on two arms' summaries made by the script's own summarise():
    the table's figures and the share of sampled SQL with a WHERE clause per 5 steps."""
    from benchmarks import learning_curve_compare as compare

    assert doctest.testmod(compare).failed == 0
    warm = {"match": [1, 1, 0, 0], "suite": [1, 0, 0, 0], "ex": 0.5, "ex_test_suite": 0.25, "suite_rejected": 1}
    sqls = {  # per step: what the arm's policy sampled
        "shortcut": ["SELECT COUNT(*) FROM t WHERE a = 1"] * 5 + ["SELECT COUNT(*) FROM t"] * 5,
        "suite": ["SELECT COUNT(*) FROM t WHERE a = 1"] * 9 + ["SELECT a FROM t WHERE b = 'x"],  # last one unparseable
    }
    for name, moved_ex in (("shortcut", 0.25), ("suite", 0.5)):
        args = argparse.Namespace(steps=10, last=5, seed=0, recipe="think2sql", overrides=[])
        after = {"match": [1, 0, 0, 0] if moved_ex == 0.25 else [1, 1, 0, 0], "suite": [0, 0, 0, 0]}
        after.update(executable=[1, 1, 1, 1], ex=moved_ex, ex_test_suite=0.0, suite_rejected=1)
        arm = _arm([0.1 * i for i in range(10)], [2] * 10, [2] * 10 if name == "shortcut" else [0] * 10, True)
        summary = lc.summarise(args, warm, {"grpo": arm}, {"grpo": after})
        folder = tmp_path / name
        (folder / "grpo-seed0").mkdir(parents=True)
        (folder / "learning_curve.json").write_text(json.dumps(summary))
        rows = [{"step": step + 1, "final_sql": sql} for step, sql in enumerate(sqls[name])]
        (folder / "grpo-seed0" / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    arms = {name: compare.load_arm(tmp_path / name) for name in ("shortcut", "suite")}
    assert arms["shortcut"]["where_share"] == [(1, 5, 5), (6, 0, 5)]
    assert arms["suite"]["where_share"] == [(1, 5, 5), (6, 4, 4)]  # the unparseable one is not counted
    text = compare.table(arms)
    assert "held-out EX 50.0 %, on the test suite 25.0 %, 1 EX matches" in text
    assert "| shortcut | 0.700 | 25.0 % (-25.0 pt" in text and "| 20 of 20 | 100 % (5/5) → 0 % (0/5) |" in text
    assert "| suite | 0.700 | 50.0 % (+0.0 pt" in text and "| 0 of 20 | 100 % (5/5) → 100 % (4/4) |" in text
    compare.plot(arms, tmp_path / "arms.png")
    assert (tmp_path / "arms.png").stat().st_size > 1000
