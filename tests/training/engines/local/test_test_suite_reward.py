"""``reward.exec_metric=test_suite`` in the real local trainer: the training databases'
suites are built from the training questions before step 1, and a step's rewards (and
dynamic sampling, which filters on them) are computed on the suite without errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.types import Example
from tests.helpers.local_trainer import config, tiny_inputs
from tests.helpers.schools import ScriptedPolicy
from training.engines.local.trainer import LocalTrainer


def test_a_step_scores_its_rewards_on_the_suite(
    examples: list[Example], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rex.test_suite import find_suites
    from rex.test_suite.build import SuiteSettings
    from rex.test_suite.suites import forget_loaded
    from tools import get_database

    monkeypatch.setenv("SQLAGENT_RL_CACHE", str(tmp_path / "cache"))
    forget_loaded()
    said: list[str] = []
    cfg = config("trustsql", tmp_path / "run", "reward.exec_metric=test_suite")
    inputs = tiny_inputs(examples, examples[:2], ScriptedPolicy("trustsql", examples, False))
    trainer = LocalTrainer(cfg, inputs, say=said.append)
    assert any("test suites for reward.exec_metric=test_suite: 1 built, 0 cached" in line for line in said)
    (suite,) = find_suites(get_database(examples[0].db_path), SuiteSettings())
    assert suite.info["stats"]["golds"] == len({ex.gold_sql for ex in examples})
    metrics = trainer.train_step()
    assert metrics["reward/errors"] == 0.0
    assert 0.0 <= metrics["reward/exec"] <= 1.0
    forget_loaded()


def test_the_held_out_evaluations_report_ex_on_the_suite(
    examples: list[Example], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    from rex.test_suite.suites import forget_loaded

    monkeypatch.setenv("SQLAGENT_RL_CACHE", str(tmp_path / "cache"))
    forget_loaded()
    said: list[str] = []
    run = tmp_path / "run"
    cfg = config("trustsql", run, "trainer.eval_before_after=true", "logger=[jsonl]")
    inputs = tiny_inputs(examples, examples[:2], ScriptedPolicy("trustsql", examples, True))  # the gold SQL
    summary = LocalTrainer(cfg, inputs, say=said.append).fit()
    # the held-out database's suite is built once, before the first held-out score
    assert sum("test suites of the held-out databases: 1 built, 0 cached" in s for s in said) == 1
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    for kind in ("eval_before", "eval_after"):
        (record,) = [r for r in records if r["kind"] == kind]
        assert record["ex"] == record["ex_test_suite"] == 1.0  # the gold query passes on every neighbour
        heldout = [json.loads(line) for line in (run / f"heldout_{kind[5:]}.jsonl").read_text().splitlines()]
        assert [r["ex_test_suite"] for r in heldout] == [1, 1]
    assert any("[eval before] EX 100.0%, 100.0% on the test suite" in s for s in said)
    assert summary["ex_test_suite_before"] == summary["ex_test_suite_after"] == 1.0
    forget_loaded()


def test_eval_test_suite_false_leaves_it_out(examples: list[Example], tmp_path: Path) -> None:
    cfg = config("trustsql", tmp_path / "run", "trainer.eval_test_suite=false")
    (tmp_path / "run").mkdir()  # fit() makes it; evaluate() alone writes heldout_before.jsonl there
    inputs = tiny_inputs(examples, examples[:2], ScriptedPolicy("trustsql", examples, True))
    result = LocalTrainer(cfg, inputs, say=lambda _: None).evaluate("before")
    assert result["ex"] == 1.0 and "ex_test_suite" not in result
