"""One "job" of the kill-and-requeue tests:
``python -m tests.training.engines.verl.fit.resume_child ROOT [key=value ...]`` (the
``key=value`` overrides replace those below).

It does what ``training.run engine=verl resume=auto`` does before and at the launch - the
project config, the run-directory decision (``prepare_run_dir``: resume from the newest
complete checkpoint, discard half-written ones), veRL pointed at that step
(``apply_resume``), the logging environment with the run's wandb id (``_set_logging_env``) -
then veRL's real ``fit()`` through the harness (``harness.py``: only the FSDP worker group
and the vLLM server are doubles).

``SQLAGENT_TEST_KILL_SAVE_AT=N`` (set by the test for the first job only, so the command
is the same) kills this process with SIGKILL in the middle of step N's checkpoint: once
the optimizer shard is half written (``torch.save`` is writing it), as a preemption would.
``SQLAGENT_TEST_SIGTERM_AT=N`` sends this process SIGTERM in the middle of step N (after its
rollouts, while the advantages are computed); like ``training.run``, the job then exits with
the requeue status when the trainer stopped on it (``raise_if_stopped``).

With ``trainer.mode=colocate_async`` / ``separate_async`` among the overrides the job runs
the async trainer of ``async_harness.py`` (the server double generating with latency), and
``SQLAGENT_TEST_TRAIN=N`` gives it N training questions in file order: the job prints the
prompt groups it restored from the checkpoint's TransferQueue state and how many questions
the restored dataloader has drawn.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

RECIPE = "think2sql"
OVERRIDES = [
    "algorithm.group_size=2",
    "algorithm.batch_size=2",
    "trainer.total_steps=4",
    "trainer.save_every=2",
    "trainer.keep_checkpoints=2",
    "trainer.val_every=0",
    "trainer.eval_before_after=false",
    "trainer.samples_per_step=4",
    "rollout.max_prompt_tokens=640",
    "rollout.max_response_tokens=256",
    "rollout.max_new_tokens=48",
    "optim.lr=1e-3",
    "optim.warmup_ratio=0.0",
    "reward.exec_metric=ex",
    "logger=[wandb]",
    "resume=auto",
]


def kill_mid_save(step: int) -> None:
    """SIGKILL this process halfway through writing step ``step``'s optimizer shard."""
    import torch

    real_save = torch.save
    marker = os.path.join(f"global_step_{step}", "actor", "optim_world_size_1_rank_0.pt")

    def save(obj, f, *args, **kwargs):  # type: ignore[no-untyped-def]
        real_save(obj, f, *args, **kwargs)
        if str(f).endswith(marker):
            data = Path(f).read_bytes()
            Path(f).write_bytes(data[: len(data) // 2])
            os.kill(os.getpid(), signal.SIGKILL)

    torch.save = save


def sigterm_in_step(step: int, trainer_cls: Any) -> None:
    """SIGTERM to this process once, in the middle of step ``step``."""
    real = trainer_cls._compute_advantage

    def compute_advantage(trainer, batch, metrics):  # type: ignore[no-untyped-def]
        if int(trainer.global_steps) == step and not getattr(trainer, "_test_signalled", False):
            trainer._test_signalled = True
            os.kill(os.getpid(), signal.SIGTERM)
        return real(trainer, batch, metrics)

    trainer_cls._compute_advantage = compute_advantage


def started(trainer: Any) -> None:
    print(f"[child] fit starts at step {trainer.global_steps}", flush=True)
    if trainer.trainer_mode != "sync":
        print(f"[child] restored {restored_examples(trainer)}", flush=True)
        # async modes draw one prompt per fetch (veRL's gen_batch_size=1): the count is the position
        print(f"[child] dataloader at {trainer.train_dataloader.state_dict()['_num_yielded']}", flush=True)


def restored_examples(trainer: Any) -> str:
    """The training questions (example ids) of the prompt groups TransferQueue holds at the
    start (those the checkpoint saved), as JSON."""
    import json

    import transfer_queue as tq

    from training.engines.verl.shared import example_from_row

    items = (tq.kv_list("train") or {}).get("train", {})
    uids = [key for key, tag in items.items() if tag.get("is_prompt")]
    if not uids:
        return "[]"
    rows = tq.kv_batch_get(keys=uids, partition_id="train", select_fields=["extra_info"])
    return json.dumps(sorted(example_from_row(info).id for info in list(rows["extra_info"])))


def main(root: Path, changes: list[str]) -> int:
    from tests.training.engines.verl.fit import harness as H
    from training.engines.verl.launch import _set_logging_env, apply_resume, prepare_run_dir
    from training.runs.preemption import raise_if_stopped

    if os.environ.get("SQLAGENT_TEST_KILL_SAVE_AT"):
        kill_mid_save(int(os.environ["SQLAGENT_TEST_KILL_SAVE_AT"]))
    overrides = list({item.split("=")[0]: item for item in [*OVERRIDES, *changes]}.values())
    mode = dict(item.split("=", 1) for item in overrides).get("trainer.mode", "sync")
    trainer_cls, client_cls = H.CpuTrainer, None
    if mode != "sync":
        from tests.training.engines.verl.fit.async_harness import LATENCY, TRAINERS
        from training.engines.verl.workers.async_trainers import VersionedAsyncClient

        trainer_cls, client_cls = TRAINERS[mode], VersionedAsyncClient
    if os.environ.get("SQLAGENT_TEST_SIGTERM_AT"):
        sigterm_in_step(int(os.environ["SQLAGENT_TEST_SIGTERM_AT"]), trainer_cls)
    run_dir = root / "run"
    train, val = H.examples(root, RECIPE, n_train=int(os.environ.get("SQLAGENT_TEST_TRAIN", "2")), n_val=1)
    cfg = H.project_config(RECIPE, run_dir, [*H.TEST_VERL, *overrides])
    decision = prepare_run_dir(cfg.run_dir, cfg.resume, cfg.fresh, say=print)
    config = H.verl_config(RECIPE, run_dir, H.tiny_model_dir(root), train, val, overrides)
    if mode != "sync":
        config = H.with_changes(config, {"data.shuffle": False})
    apply_resume(config, decision)
    _set_logging_env(config, str(run_dir))
    session = H.start_session(RECIPE, root, config, writers={"0": "script", "1": "sample"}, client_cls=client_cls)
    if mode != "sync":
        import ray

        ray.get(session.servers.server.set_latency.remote(*LATENCY))  # type: ignore[possibly-undefined]
    try:
        trainer = H.run_fit(session, config, before_fit=started, trainer_cls=trainer_cls)
        print(f"[child] fit ended at step {trainer.global_steps}", flush=True)
    finally:
        H.release_runtime()
    raise_if_stopped(run_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), sys.argv[2:]))
