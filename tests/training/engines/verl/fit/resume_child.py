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
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

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


def sigterm_in_step(step: int) -> None:
    """SIGTERM to this process once, in the middle of step ``step``."""
    from tests.training.engines.verl.fit import harness as H

    real = H.CpuTrainer._compute_advantage

    def compute_advantage(trainer, batch, metrics):  # type: ignore[no-untyped-def]
        if int(trainer.global_steps) == step and not getattr(trainer, "_test_signalled", False):
            trainer._test_signalled = True
            os.kill(os.getpid(), signal.SIGTERM)
        return real(trainer, batch, metrics)

    H.CpuTrainer._compute_advantage = compute_advantage  # type: ignore[method-assign]


def main(root: Path, changes: list[str]) -> int:
    from tests.training.engines.verl.fit import harness as H
    from training.engines.verl.launch import _set_logging_env, apply_resume, prepare_run_dir
    from training.runs.preemption import raise_if_stopped

    if os.environ.get("SQLAGENT_TEST_KILL_SAVE_AT"):
        kill_mid_save(int(os.environ["SQLAGENT_TEST_KILL_SAVE_AT"]))
    if os.environ.get("SQLAGENT_TEST_SIGTERM_AT"):
        sigterm_in_step(int(os.environ["SQLAGENT_TEST_SIGTERM_AT"]))
    overrides = list({item.split("=")[0]: item for item in [*OVERRIDES, *changes]}.values())
    run_dir = root / "run"
    train, val = H.examples(root, RECIPE, n_train=2, n_val=1)
    cfg = H.project_config(RECIPE, run_dir, [*H.TEST_VERL, *overrides])
    decision = prepare_run_dir(cfg.run_dir, cfg.resume, cfg.fresh, say=print)
    config = H.verl_config(RECIPE, run_dir, H.tiny_model_dir(root), train, val, overrides)
    apply_resume(config, decision)
    _set_logging_env(config, str(run_dir))
    session = H.start_session(RECIPE, root, config, writers={"0": "script", "1": "sample"})
    try:
        trainer = H.run_fit(session, config, before_fit=lambda t: print(f"[child] fit starts at step {t.global_steps}"))
        print(f"[child] fit ended at step {trainer.global_steps}", flush=True)
    finally:
        H.stop_session()
    raise_if_stopped(run_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), sys.argv[2:]))
