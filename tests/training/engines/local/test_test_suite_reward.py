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
