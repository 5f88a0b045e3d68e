"""Preemption and requeue through veRL's real ``fit()``: a job killed with SIGKILL in the
middle of a checkpoint save, or sent SIGTERM in the middle of a step, then the same command
again (``resume=auto``).

The job (``resume_child.py``, a subprocess in its own session) trains Think2SQL for 4 steps
with a checkpoint every 2 steps and is killed halfway through writing step 4's optimizer
shard: steps 1-3 are logged, ``global_step_2`` is complete, ``global_step_4`` is
half-written and veRL's tracker still says 2. The rerun must continue from step 2 (never
from the half-written step 4), redo steps 3 and 4, and leave every step recorded once in
``metrics.jsonl``, ``samples.jsonl`` and veRL's ``verl_metrics.jsonl``, two complete
checkpoints, ``final/``, and one wandb run id across both processes (veRL's ``Tracking``
reads it from the environment the driver sets).

The two scenarios' job pairs are independent (each has its own directory, Ray cluster and
wandb service), and a job spends much of its time waiting on Ray's start-up and workers:
the module starts both pairs together (:func:`scenarios`) and each test checks its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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


@dataclass
class Scenario:
    """One interrupted job and its requeue: ``first`` and ``again`` are the two jobs'
    results, ``after_first`` what :func:`state` saw on disk between them."""

    root: Path
    first: subprocess.CompletedProcess
    after_first: dict[str, Any] = field(default_factory=dict)
    again: subprocess.CompletedProcess | None = None


def state(run_dir: Path) -> dict[str, Any]:
    """What an interrupted job left behind (read before the requeued job changes it)."""
    ckpt = run_dir / "checkpoints"
    tracker = ckpt / R.VERL_TRACKER
    id_file = run_dir / "wandb_run_id"
    return {
        "checkpoints": [(c.step, c.complete) for c in R.verl_step_checkpoints(ckpt)],
        "tracker": tracker.read_text() if tracker.exists() else None,
        "train_steps": [r["step"] for r in records(run_dir / "metrics.jsonl") if r["kind"] == "train"],
        "sample_steps": sorted({r["step"] for r in records(run_dir / "samples.jsonl")}),
        "final": (run_dir / "final").exists(),
        "wandb_id": id_file.read_text().strip() if id_file.exists() else None,
    }


def interrupted_then_requeued(root: Path, interrupt: dict[str, Any], changes: tuple[str, ...]) -> Scenario:
    """The interrupted job, the state it left, then (if it stopped as expected) the same command again."""
    root.mkdir(parents=True, exist_ok=True)
    scenario = Scenario(root, job(root, changes=changes, **interrupt))
    if scenario.first.returncode in (-signal.SIGKILL, REQUEUE_EXIT_STATUS):
        scenario.after_first = state(root / "run")
        scenario.again = job(root, changes=changes)
    return scenario


SCENARIOS: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    "test_a_job_killed_mid_save_continues_from_the_last_complete_checkpoint": ({"kill_at": 4}, ()),
    "test_sigterm_saves_the_step_in_progress_and_the_requeued_job_continues_after_it": (
        {"sigterm_at": 2},
        ("trainer.total_steps=3", "trainer.save_every=10"),
    ),
}


@pytest.fixture(scope="module")
def scenarios(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Future]]:
    """The job pairs of this module's selected tests, started together in threads."""
    selected = [item.name for item in request.session.items if item.module is request.module]
    names = [name for name in SCENARIOS if name in selected]
    with ThreadPoolExecutor(max_workers=max(1, len(names))) as pool:
        yield {
            name: pool.submit(interrupted_then_requeued, tmp_path_factory.mktemp("resume"), *SCENARIOS[name])
            for name in names
        }


def scenario_of(scenarios: dict[str, Future], request: pytest.FixtureRequest) -> Scenario:
    return scenarios[request.node.name].result(timeout=2400)


def test_a_job_killed_mid_save_continues_from_the_last_complete_checkpoint(
    scenarios: dict[str, Future], request: pytest.FixtureRequest
) -> None:
    scenario = scenario_of(scenarios, request)
    run_dir = scenario.root / "run"
    ckpt = run_dir / "checkpoints"
    killed, left = scenario.first, scenario.after_first
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert left["checkpoints"] == [(2, True), (4, False)]
    assert left["tracker"] == "2"
    assert sorted(left["train_steps"]) == [1, 2, 3]
    assert not left["final"]
    wandb_id = left["wandb_id"]

    again = scenario.again  # the requeued job: the same command
    assert again is not None and again.returncode == 0, again.stdout[-2000:] + again.stderr[-3000:]
    assert "discarding half-written checkpoint" in again.stdout and "global_step_4" in again.stdout
    assert f"continuing from {ckpt / 'global_step_2'} (step 2)" in again.stdout
    assert "[child] fit starts at step 2" in again.stdout and "[child] fit ended at step 4" in again.stdout

    train = Counter(r["step"] for r in records(run_dir / "metrics.jsonl") if r["kind"] == "train")
    assert train == {1: 1, 2: 1, 3: 1, 4: 1}  # the same step count, each step once
    samples = Counter(r["step"] for r in records(run_dir / "samples.jsonl"))
    assert sorted(samples) == [1, 2, 3, 4] and len(set(samples.values())) == 1
    verl_steps = Counter(
        r["step"] for r in records(run_dir / "verl_metrics.jsonl") if "training/global_step" in r["data"]
    )
    assert verl_steps == {1: 1, 2: 1, 3: 1, 4: 1}
    assert [(c.step, c.complete) for c in R.verl_step_checkpoints(ckpt)] == [(2, True), (4, True)]
    assert (ckpt / R.VERL_TRACKER).read_text() == "4"
    assert (run_dir / "final" / "config.json").is_file() and any((run_dir / "final").glob("*.safetensors"))
    runs = sorted(p.name for p in (run_dir / "wandb").glob("offline-run-*"))
    assert len(runs) == 2 and all(name.endswith(f"-{wandb_id}") for name in runs), runs


def test_sigterm_saves_the_step_in_progress_and_the_requeued_job_continues_after_it(
    scenarios: dict[str, Future], request: pytest.FixtureRequest
) -> None:
    """SIGTERM in the middle of step 2 of 3, with no checkpoint due before step 3: the job
    finishes step 2, saves it through veRL's ``_save_checkpoint`` and exits with the requeue
    status; the same command then continues at step 3, every step recorded once."""
    scenario = scenario_of(scenarios, request)
    run_dir = scenario.root / "run"
    ckpt = run_dir / "checkpoints"
    stopped, left = scenario.first, scenario.after_first
    assert stopped.returncode == REQUEUE_EXIT_STATUS, stopped.stdout[-2000:] + stopped.stderr[-3000:]
    assert "[preempt] SIGTERM received" in stopped.stdout and "stopped after step 2" in stopped.stdout
    assert left["checkpoints"] == [(2, True)]
    assert left["train_steps"] == [1, 2]
    assert left["sample_steps"] == [1, 2]
    assert not left["final"]

    again = scenario.again
    assert again is not None and again.returncode == 0, again.stdout[-2000:] + again.stderr[-3000:]
    assert "[child] fit starts at step 2" in again.stdout and "[child] fit ended at step 3" in again.stdout
    train = Counter(r["step"] for r in records(run_dir / "metrics.jsonl") if r["kind"] == "train")
    assert train == {1: 1, 2: 1, 3: 1}
    samples = Counter(r["step"] for r in records(run_dir / "samples.jsonl"))
    assert sorted(samples) == [1, 2, 3] and len(set(samples.values())) == 1
    verl_steps = Counter(
        r["step"] for r in records(run_dir / "verl_metrics.jsonl") if "training/global_step" in r["data"]
    )
    assert verl_steps == {1: 1, 2: 1, 3: 1}
    assert [(c.step, c.complete) for c in R.verl_step_checkpoints(ckpt)] == [(2, True), (3, True)]
    assert (run_dir / "final" / "config.json").is_file()
    assert not (run_dir / "stopped.json").exists() and not (run_dir / "stop_requested").exists()
