"""veRL's real ``fit()`` for TRUST-SQL: the two-track advantage, the inference turn budget
in validation.

Training runs with a 5-turn budget (``agent.max_turns``) and validation with the
agent's inference budget of 15 turns; veRL's own rollout and validation dumps
(``trainer.rollout_data_dir``, ``trainer.validation_data_dir``) hold the prompts each
used. Session 0 writes the scripted five-turn episode, session 1 samples from the
current weights: the schema track and the full track both have spread.

The trainer runs veRL's own loop with only the GPU pieces replaced; the seam (a
``_setup`` override) and the doubles are described in ``harness.py`` and ``doubles.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.training.verl.fit import harness as H
from tests.training.verl.fit.doubles import weights_changed

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

RECIPE = "trustsql"
OVERRIDES = [
    "algorithm.group_size=2", "algorithm.batch_size=2", "trainer.total_steps=3", "trainer.save_every=100",
    "trainer.val_every=0", "trainer.eval_before_after=true", "agent.max_turns=5",
    "rollout.max_prompt_tokens=1536", "rollout.max_response_tokens=1536", "rollout.max_new_tokens=96",
    "rollout.observation_max_tokens=128", "optim.lr=1e-3", "optim.warmup_ratio=0.0", "logger=[]",
]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("fit_trustsql")
    train, val = H.examples(root, RECIPE, n_train=2, n_val=1)
    base = H.verl_config(RECIPE, root / "run", H.tiny_model_dir(root), train, val, OVERRIDES)
    base = H.with_changes(base, {"trainer.rollout_data_dir": str(root / "rollouts"),
                                 "trainer.validation_data_dir": str(root / "validation")})
    session = H.start_session(RECIPE, root, base, writers={"0": "script", "1": "sample"})
    try:
        seen: dict[str, Any] = {}
        trainer = H.run_fit(session, base, before_fit=lambda t: seen.update(w=t.actor_rollout_wg.state_dict()))
        yield {"trainer": trainer, "config": base, "root": root, **seen}
    finally:
        H.stop_session()


def test_two_tracks_reach_the_update(run: dict[str, Any]) -> None:
    steps = H.step_metrics(Path(run["config"].sqlagent.run_dir))
    assert sorted(steps) == [1, 2, 3]
    for data in steps.values():
        assert 0.0 < data["sqlagent/schema_track/token_fraction"] < 1.0  # the prefix is part of the response
        assert data["sqlagent/agent/advantage/schema/abs_mean"] > 0.0
        assert data["sqlagent/agent/advantage/full/abs_mean"] > 0.0
        assert abs(data["training/rollout_probs_diff_max"]) < 1e-5
    trainer = run["trainer"]
    assert weights_changed(run["w"], trainer.actor_rollout_wg.state_dict()) > 0


def dumped_inputs(folder: Path) -> list[str]:
    return [json.loads(line)["input"] for path in sorted(folder.glob("*.jsonl")) for line in path.open()]


def test_validation_uses_the_inference_turn_budget(run: dict[str, Any]) -> None:
    root = run["root"]
    train_inputs, val_inputs = dumped_inputs(root / "rollouts"), dumped_inputs(root / "validation")
    assert train_inputs and val_inputs
    assert all("You have at most 5 turns." in text for text in train_inputs)
    assert all("You have at most 15 turns." in text for text in val_inputs)
    records = [json.loads(line) for line in (Path(run["config"].sqlagent.run_dir) / "metrics.jsonl").open()]
    finals = [r for r in records if r["kind"] == "eval_after"]
    assert finals and finals[0]["ex"] == 1.0  # the scripted episode finishes within 15 turns
