"""Preemption and requeue through veRL's real ``fit()`` under the sync trainer: a job sent
SIGTERM in the middle of a step, then the same command again (``resume=auto``).

The job (``resume_child.py``, a subprocess in its own session) trains Think2SQL for 4 steps
with a checkpoint due only at step 4. The SIGTERM's job finishes its step, saves it through
veRL's ``_save_checkpoint`` and exits with the requeue status; the rerun must continue from
that step and leave every step recorded once in ``metrics.jsonl``, ``samples.jsonl`` and
veRL's ``verl_metrics.jsonl``, two complete checkpoints, ``final/``, and one wandb run id
across the two processes (veRL's ``Tracking`` reads it from the environment the driver
sets). A SIGKILL in the middle of a checkpoint save, and the rerun that discards the
half-written step, go through the same ``_save_checkpoint`` and run-directory decision in
``test_async_resume.py`` (under ``separate_async``, which also saves TransferQueue's state).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from training.runs import resume_policy as R
from training.runs.preemption import REQUEUE_EXIT_STATUS

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

REPO = Path(__file__).resolve().parents[5]


def job(
    root: Path, kill_at: int | None = None, sigterm_at: int | None = None, changes: tuple[str, ...] = ()
) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), WANDB_MODE="offline", TOKENIZERS_PARALLELISM="false")
    env.pop("SQLAGENT_TEST_KILL_SAVE_AT", None)
    env.pop("SQLAGENT_TEST_SIGTERM_AT", None)
    # a fresh job on a fresh node: no wandb service or run of this test process (wandb puts
    # WANDB_SERVICE in os.environ, and a child would join that service, where the killed job's
    # run id stays in use)
    for key in ("WANDB_SERVICE", "WANDB_RUN_ID", "WANDB_RESUME", "WANDB_DIR", "WANDB_RUN_GROUP", "WANDB_TAGS"):
        env.pop(key, None)
    if kill_at is not None:
        env["SQLAGENT_TEST_KILL_SAVE_AT"] = str(kill_at)
    if sigterm_at is not None:
        env["SQLAGENT_TEST_SIGTERM_AT"] = str(sigterm_at)
    command = [sys.executable, "-m", "tests.training.engines.verl.fit.resume_child", str(root), *changes]
    proc = subprocess.Popen(
        command, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=1200)
    finally:
        with contextlib.suppress(ProcessLookupError):  # what the job started (Ray, wandb) dies with it
            os.killpg(proc.pid, signal.SIGKILL)
        stop_wandb_service_of(proc.pid)
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


def stop_wandb_service_of(pid: int) -> None:
    """wandb's service runs in a session of its own (``wandb-core ... --pid <job>``) and only
    notices its job died after a while; until then it holds the run id, and the requeued job
    would meet "run ID ... is in use". On a preempted node it dies with the node: end it here."""
    import psutil

    services = []
    for candidate in psutil.process_iter(["cmdline"]):
        cmdline = candidate.info.get("cmdline") or []
        if any(i + 1 < len(cmdline) and arg == "--pid" and cmdline[i + 1] == str(pid) for i, arg in enumerate(cmdline)):
            services.append(candidate)
    for service in services:
        with contextlib.suppress(psutil.NoSuchProcess):  # already gone
            service.kill()
    psutil.wait_procs(services, timeout=30)


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_sigterm_in_a_step_then_the_same_command_continues(tmp_path: Path) -> None:
    """SIGTERM in the middle of step 2 (the job finishes step 2, saves it and exits with the
    requeue status); the requeued job goes on at step 3 and ends with every step recorded once."""
    run_dir = tmp_path / "run"
    ckpt = run_dir / "checkpoints"
    changes = ("trainer.save_every=4",)
    stopped = job(tmp_path, sigterm_at=2, changes=changes)
    assert stopped.returncode == REQUEUE_EXIT_STATUS, stopped.stdout[-2000:] + stopped.stderr[-3000:]
    assert "[preempt] SIGTERM received" in stopped.stdout and "stopped after step 2" in stopped.stdout
    assert [(c.step, c.complete) for c in R.verl_step_checkpoints(ckpt)] == [(2, True)]
    assert [r["step"] for r in records(run_dir / "metrics.jsonl") if r["kind"] == "train"] == [1, 2]
    assert sorted({r["step"] for r in records(run_dir / "samples.jsonl")}) == [1, 2]
    assert not (run_dir / "final").exists()
    wandb_id = (run_dir / "wandb_run_id").read_text().strip()

    again = job(tmp_path, changes=changes)  # the same command once more
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-3000:]
    assert f"continuing from {ckpt / 'global_step_2'} (step 2)" in again.stdout
    assert "[child] fit starts at step 2" in again.stdout and "[child] fit ended at step 4" in again.stdout
    assert_each_step_recorded_once(run_dir, steps=4)
    assert [(c.step, c.complete) for c in R.verl_step_checkpoints(ckpt)] == [(2, True), (4, True)]
    assert (run_dir / "final" / "config.json").is_file() and any((run_dir / "final").glob("*.safetensors"))
    assert not (run_dir / "stopped.json").exists() and not (run_dir / "stop_requested").exists()
    assert_one_wandb_run(run_dir, wandb_id, jobs=2)


def assert_each_step_recorded_once(run_dir: Path, steps: int) -> None:
    """Each step once in the project's records and veRL's, the checkpoints complete up to the last."""
    every = list(range(1, steps + 1))
    train = Counter(r["step"] for r in records(run_dir / "metrics.jsonl") if r["kind"] == "train")
    assert train == dict.fromkeys(every, 1)
    samples = Counter(r["step"] for r in records(run_dir / "samples.jsonl"))
    assert sorted(samples) == every and len(set(samples.values())) == 1
    verl_steps = Counter(
        r["step"] for r in records(run_dir / "verl_metrics.jsonl") if "training/global_step" in r["data"]
    )
    assert verl_steps == dict.fromkeys(every, 1)
    ckpt = run_dir / "checkpoints"
    assert all(c.complete for c in R.verl_step_checkpoints(ckpt)) and R.verl_step_checkpoints(ckpt)[-1].step == steps
    assert (ckpt / R.VERL_TRACKER).read_text() == str(steps)


def assert_one_wandb_run(run_dir: Path, wandb_id: str, jobs: int) -> None:
    """One offline wandb run per job, all under the run's one id."""
    runs = sorted(p.name for p in (run_dir / "wandb").glob("offline-run-*"))
    assert len(runs) == jobs and all(name.endswith(f"-{wandb_id}") for name in runs), runs
