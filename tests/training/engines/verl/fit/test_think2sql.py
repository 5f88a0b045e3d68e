"""veRL's real ``fit()`` for Think2SQL: run length, checkpoints and resume, dropped prompts,
the zero-advantage control.

Two training questions (one of them over the prompt limit) at B = 2, so one step is one
epoch: three steps cross two epoch boundaries, with ``trainer.total_epochs`` forced to 1
to show the trainer itself honours ``total_steps``. A checkpoint every step (two kept), a
resumed run to step 4, validation before and after (one validation question is over the
limit too). Session 0 of each question writes the correct script, session 1 samples from
the current weights. The control: every session writes the same answer, so every group
has zero variance and zero advantages; with no KL and no weight decay, the weights must
not move.

The trainer runs veRL's own loop with only the GPU pieces replaced; the seam (a
``_setup`` override) and the doubles are described in ``harness.py``,
``fsdp_double.py`` and ``vllm_double.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.training.engines.verl.fit import harness as H
from tests.training.engines.verl.fit.fsdp_double import weights_changed

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

RECIPE = "think2sql"
OVERRIDES = [
    "algorithm.group_size=2",
    "algorithm.batch_size=2",
    "trainer.total_steps=3",
    "trainer.save_every=1",
    "trainer.keep_checkpoints=2",
    "trainer.val_every=0",
    "trainer.eval_before_after=true",
    "rollout.max_prompt_tokens=640",
    "rollout.max_response_tokens=256",
    "rollout.max_new_tokens=48",
    "optim.lr=1e-3",
    "optim.warmup_ratio=0.0",
    "reward.exec_metric=ex",
    "logger=[]",
]


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("fit_think2sql")
    train, val = H.examples(root, RECIPE, n_train=2, n_val=2, long_train=1, long_val=1, long_words=400)
    base = H.verl_config(RECIPE, root / "run", H.tiny_model_dir(root), train, val, OVERRIDES)
    sess = H.start_session(RECIPE, root, base, writers={"0": "script", "1": "sample"})
    try:
        yield sess
    finally:
        H.stop_session()


@pytest.fixture(scope="module")
def first(session: H.FitSession) -> dict[str, Any]:
    config = H.with_changes(session.base, {"trainer.total_epochs": 1})
    seen: dict[str, Any] = {}
    trainer = H.run_fit(session, config, before_fit=lambda t: seen.update(initial=t.actor_rollout_wg.state_dict()))
    return {"trainer": trainer, "config": config, **seen}


def test_three_steps_past_one_epoch_with_a_dropped_prompt(first: dict[str, Any]) -> None:
    trainer, run_dir = first["trainer"], Path(first["config"].sqlagent.run_dir)
    assert trainer.steps_per_epoch == 1 and trainer.total_training_steps == 3
    steps = H.step_metrics(run_dir)
    assert sorted(steps) == [1, 2, 3]  # total_epochs=1 would have stopped after step 1
    for data in steps.values():
        assert data["sqlagent/dropped_rows"] == 2.0  # the long question's two sessions, every step
        assert data["training/off_policy/trajectory_staleness/max"] == 0  # versions reached veRL's tags
        assert abs(data["training/rollout_probs_diff_max"]) < 1e-5  # rollout log-probs = old log-probs
    assert weights_changed(first["initial"], trainer.actor_rollout_wg.state_dict()) > 0
    group = trainer.actor_rollout_wg
    assert [u["optimizer_steps"] for u in group.updates] == [1, 1, 1]
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    for step in (1, 2, 3):
        rows = [s for s in samples if s["step"] == step]
        dropped = [s for s in rows if s["advantage"] is None]  # recorded as taking no part in the update
        assert len(rows) == 4 and len(dropped) == 2
        assert all(s["tokens"] == [] and s["why"] == {"full": ""} and s["end_reason"] for s in dropped)
        assert all(s["why"]["full"] and set(s["why"]["full"]) <= set("Lo") for s in rows if s not in dropped)


def test_checkpoints_rotate_and_validation_runs_before_and_after(first: dict[str, Any]) -> None:
    from eval.compare import load_run

    run_dir = Path(first["config"].sqlagent.run_dir)
    ckpt = Path(first["config"].trainer.default_local_dir)
    # veRL's rotation removes the weights of older steps (their small data.pt stays)
    assert sorted(p.parent.name for p in ckpt.glob("global_step_*/actor")) == ["global_step_2", "global_step_3"]
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text() == "3"
    assert (run_dir / "final" / "config.json").exists()  # the last step's HF weights
    view = load_run(run_dir)
    assert view.steps == [1, 2, 3]
    assert view.ex_before is not None and view.ex is not None
    val_steps = [r["step"] for r in H.verl_records(run_dir) if any(k.startswith("val-") for k in r["data"])]
    assert val_steps == [0, 3]  # before training, and the post-training eval reached veRL's logger


def test_resume_continues_from_the_checkpoint_weights(session: H.FitSession, first: dict[str, Any]) -> None:
    end_of_first = first["trainer"].actor_rollout_wg.state_dict()
    config = H.with_changes(
        first["config"],
        {"trainer.resume_mode": "auto", "trainer.total_training_steps": 4, "trainer.val_before_train": False},
    )
    seen: dict[str, Any] = {}
    resumed = H.run_fit(
        session, config, before_fit=lambda t: seen.update(step=t.global_steps, weights=t.actor_rollout_wg.state_dict())
    )
    assert seen["step"] == 3
    assert weights_changed(end_of_first, seen["weights"]) == 0.0
    run_dir = Path(config.sqlagent.run_dir)
    assert sorted(H.step_metrics(run_dir)) == [1, 2, 3, 4]  # veRL's file log kept the first run's steps
    assert resumed.global_steps == 4


def test_zero_variance_batches_leave_the_weights_unchanged(session: H.FitSession) -> None:
    import ray

    run_dir = H.fresh(session.root / "control")
    config = H.with_changes(
        session.base,
        {
            "sqlagent.run_dir": str(run_dir),
            "sqlagent.final_dir": None,
            "trainer.default_local_dir": str(run_dir / "checkpoints"),
            "trainer.total_training_steps": 2,
            "trainer.save_freq": -1,
            "trainer.val_before_train": False,
            "sqlagent.eval_after": False,
            "actor_rollout_ref.actor.optim.weight_decay": 0.0,
        },
    )
    ray.get(session.servers.server.set_writers.remote({"*": "script"}))
    try:
        seen: dict[str, Any] = {}
        trainer = H.run_fit(session, config, before_fit=lambda t: seen.update(w=t.actor_rollout_wg.state_dict()))
    finally:
        ray.get(session.servers.server.set_writers.remote({"0": "script", "1": "sample"}))
    steps = H.step_metrics(run_dir)
    assert sorted(steps) == [1, 2]
    for data in steps.values():
        assert data["critic/advantages/max"] == 0.0 and data["critic/advantages/min"] == 0.0
    assert len(trainer.actor_rollout_wg.updates) == 2  # the updates ran ...
    assert weights_changed(seen["w"], trainer.actor_rollout_wg.state_dict()) == 0.0  # ... and moved nothing
    assert torch.is_tensor(next(iter(seen["w"].values())))


def test_refill_mode_evicts_groups_without_spread(session: H.FitSession) -> None:
    """``dynamic_sampling.refill=true``: veRL's filter_groups loop with the project's
    classification. The over-long question's group (its rows are dropped, so it has no
    spread) is evicted and replaced until B = 2 groups with spread are finished."""
    run_dir = H.fresh(session.root / "refill")
    config = H.with_changes(
        session.base,
        {
            "sqlagent.run_dir": str(run_dir),
            "sqlagent.final_dir": None,
            "trainer.default_local_dir": str(run_dir / "checkpoints"),
            "trainer.total_training_steps": 1,
            "trainer.save_freq": -1,
            "trainer.val_before_train": False,
            "sqlagent.eval_after": False,
            "sqlagent.dynamic_sampling": {
                "enable": True,
                "refill": True,
                "metric": "exec",
                "min_std": 0.1,
                "oversample": 2,
            },
            "algorithm.filter_groups.enable": True,
            "algorithm.filter_groups.metric": "exec",
            "algorithm.filter_groups.max_inflight_gen_batches": 2,
        },
    )
    H.run_fit(session, config)
    (data,) = H.step_metrics(run_dir).values()
    assert data["training/filter_groups/evicted_samples"] >= 1
    assert data["sqlagent/dropped_rows"] == 0.0  # the kept groups are the informative ones
    assert data["critic/advantages/max"] > 0.0


def test_eight_ranks_with_a_batch_smaller_than_the_ranks(session: H.FitSession) -> None:
    """B = 2, G = 2 on 8 data-parallel ranks (the GPU smoke test's sizes): veRL's own sizing
    (``ppo_mini_batch_size x n`` = 4 rows) trips the worker's ``mini_batch_size % dp``
    assertion; rows padded to ``mini_batches x dp`` make one update of 8 rows."""
    run_dir = H.fresh(session.root / "eight")
    config = H.with_changes(
        session.base,
        {
            "sqlagent.run_dir": str(run_dir),
            "sqlagent.final_dir": None,
            "trainer.n_gpus_per_node": 8,
            "trainer.default_local_dir": str(run_dir / "checkpoints"),
            "trainer.total_training_steps": 1,
            "trainer.save_freq": -1,
            "trainer.val_before_train": False,
            "sqlagent.eval_after": False,
        },
    )
    trainer = H.run_fit(session, config)
    assert trainer.actor_rollout_wg.updates == [{"rows": 8, "mini_batch_size": 8, "optimizer_steps": 1}]


def test_a_validation_batch_of_dropped_prompts(session: H.FitSession) -> None:
    """Every validation question over the prompt limit: validation still finishes (each
    counts as a wrong answer) instead of raising on a batch without rows."""
    from training.engines.verl.config.data_files import write_prompt_file

    run_dir = H.fresh(session.root / "all_dropped")
    _, val = H.examples(session.root, RECIPE, n_train=0, n_val=2, long_val=2, long_words=400)
    val_file = write_prompt_file(val, run_dir / "val.parquet")
    config = H.with_changes(
        session.base,
        {
            "sqlagent.run_dir": str(run_dir),
            "sqlagent.final_dir": None,
            "data.val_files": str(val_file),
            "trainer.default_local_dir": str(run_dir / "checkpoints"),
            "trainer.val_before_train": True,
            "trainer.val_only": True,
        },
    )
    H.run_fit(session, config)
    (record,) = [r["data"] for r in H.verl_records(run_dir)]
    assert [v for k, v in record.items() if k.endswith("/exec/mean@1")] == [0.0]
