"""veRL's real ``fit()`` for DualSQL: two rows per session, one on-policy update per step.

DualSQL's agent loop emits a linker row and a generator row per session. veRL sizes a
mini-batch as ``ppo_mini_batch_size x rollout.n`` rows, so with ``mini_batches: 1`` it
made two optimizer steps per training step, the second off-policy; the trainer now sizes
it in rows of the batch. Session 0 writes the correct join, session 1 the same linker and
a generator whose final SQL is wrong (MIN for MAX), so the generator groups have spread
and the linker groups none. The recipe's rollout correction (sequence-level IS and
rejection sampling) runs on every step.

The trainer runs veRL's own loop with only the GPU pieces replaced; the seam (a
``_setup`` override) and the doubles are described in ``harness.py``,
``fsdp_double.py`` and ``vllm_double.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers.agent_scripts import DUALSQL
from tests.training.engines.verl.fit import harness as H
from tests.training.engines.verl.fit.fsdp_double import weights_changed

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

RECIPE = "dualsql"
WRONG = {**DUALSQL, "generator": [*DUALSQL["generator"][:-1], DUALSQL["generator"][-1].replace("MAX", "MIN")]}
OVERRIDES = [
    "algorithm.group_size=2",
    "algorithm.batch_size=2",
    "algorithm.mini_batches=1",
    "trainer.total_steps=3",
    "trainer.save_every=100",
    "trainer.val_every=0",
    "trainer.eval_before_after=true",
    "rollout.max_prompt_tokens=3328",
    "rollout.max_response_tokens=768",
    "rollout.max_new_tokens=160",
    "rollout.top_k=0",
    "optim.lr=1e-3",
    "optim.warmup_ratio=0.0",
    "logger=[]",
]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("fit_dualsql")
    train, val = H.examples(root, RECIPE, n_train=2, n_val=1)
    base = H.verl_config(RECIPE, root / "run", H.tiny_model_dir(root), train, val, OVERRIDES)
    session = H.start_session(RECIPE, root, base, writers={"0": "script", "1": "wrong"}, wrong=WRONG)
    try:
        seen: dict[str, Any] = {}
        trainer = H.run_fit(session, base, before_fit=lambda t: seen.update(w=t.actor_rollout_wg.state_dict()))
        yield {"trainer": trainer, "config": base, **seen}
    finally:
        H.stop_session()


def test_one_on_policy_update_per_step(run: dict[str, Any]) -> None:
    trainer = run["trainer"]
    updates = trainer.actor_rollout_wg.updates
    assert len(updates) == 3
    for update in updates:
        # B=2 questions x G=2 sessions x (linker, generator) = 8 rows in one mini-batch;
        # veRL's own sizing (ppo_mini_batch_size x n = 4 rows) made two optimizer steps
        assert update["rows"] == 8 and update["mini_batch_size"] == 8
        assert update["optimizer_steps"] == 1
    assert weights_changed(run["w"], trainer.actor_rollout_wg.state_dict()) > 0


def test_the_last_step_is_checkpointed_and_exported(run: dict[str, Any]) -> None:
    """``save_every`` (100) is never hit in 3 steps: the last step is saved all the same, and
    its HF weights become ``run_dir/final``, equal to the trained weights."""
    from transformers import AutoModelForCausalLM

    ckpt = Path(run["config"].trainer.default_local_dir)
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text() == "3"
    assert [p.parent.name for p in ckpt.glob("global_step_*/actor")] == ["global_step_3"]
    final = AutoModelForCausalLM.from_pretrained(Path(run["config"].sqlagent.run_dir) / "final")
    trained, exported = run["trainer"].actor_rollout_wg.state_dict(), final.state_dict()
    common = sorted(trained.keys() & exported.keys())
    assert len(common) >= len(trained) - 1  # (a tied lm_head may be saved once)
    assert weights_changed({k: trained[k] for k in common}, {k: exported[k] for k in common}) == 0.0


def test_rows_train_on_their_own_role_groups(run: dict[str, Any]) -> None:
    steps = H.step_metrics(Path(run["config"].sqlagent.run_dir))
    assert sorted(steps) == [1, 2, 3]
    for data in steps.values():
        assert data["sqlagent/linker/advantage/full/abs_mean"] == 0.0  # identical linkers: no spread
        assert data["sqlagent/generator/advantage/full/abs_mean"] > 0.5  # right vs wrong SQL
        assert data["actor/rows_per_update"] == 8
        assert abs(data["training/rollout_probs_diff_max"]) < 1e-5  # rollout log-probs = old log-probs
        assert any(key.startswith("rollout_corr/") for key in data)  # the recipe's IS / rejection ran
        assert data["training/off_policy/trajectory_staleness/max"] == 0


def test_validation_before_and_after(run: dict[str, Any]) -> None:
    import json

    records = [json.loads(line) for line in (Path(run["config"].sqlagent.run_dir) / "metrics.jsonl").open()]
    evals = [(r["step"], r["kind"]) for r in records if r["kind"] != "train"]
    assert evals == [(0, "eval_before"), (3, "eval_after")]
    # DualSQL's execution metric is REx: written under its own name, never as "ex"
    assert all("exec/rex" in r and "ex" not in r for r in records if r["kind"] != "train")
