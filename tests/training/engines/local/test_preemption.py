"""Stopped runs of the local engine and the rerun with ``resume=auto``: every step recorded
once, whatever the rerun finds; SIGTERM / SIGUSR1 in a real child process (preempt_child.py)
finish the step in progress, save it and exit with the requeue status; a second signal
exits at once and leaves the last complete checkpoint."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch

from agents.types import Example
from tests.helpers.local_trainer import trainer
from tests.helpers.schools import make_db, school_examples
from training.engines.local import state as st
from training.runs.preemption import REQUEUE_EXIT_STATUS

REPO = Path(__file__).resolve().parents[4]
NO_EARLY_CHECKPOINT = ("trainer.save_every=100", "algorithm.dynamic_sampling.enable=false")


def rows(run_dir: Path, name: str = "metrics.jsonl") -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / name).read_text().splitlines()]


def train_steps(run_dir: Path) -> list[int]:
    return [r["step"] for r in rows(run_dir) if r["kind"] == "train"]


def sample_steps(run_dir: Path) -> list[int]:
    return sorted({r["step"] for r in rows(run_dir, "samples.jsonl")})


@pytest.mark.slow
def test_a_rerun_with_no_checkpoint_records_every_step_once(tmp_path: Path, examples: list[Example]) -> None:
    """The report: a run stopped after two steps before its first checkpoint, rerun with
    resume=auto, started at step 1 again and appended to the old records (1, 2, 1, 2, 3)."""
    extra = (*NO_EARLY_CHECKPOINT, "trainer.total_steps=3")
    first = trainer("think2sql", tmp_path, examples, *extra)
    original = first.train_step

    def killed_in_step_three() -> dict[str, Any]:
        if first.step == 2:
            raise KeyboardInterrupt("killed in step 3")
        return original()

    first.train_step = killed_in_step_three  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        first.fit()
    assert train_steps(tmp_path) == [1, 2] and st.latest_checkpoint(tmp_path) is None

    again = trainer("think2sql", tmp_path, examples, *extra, "resume=auto")
    assert again.fit()["steps"] == 3
    assert train_steps(tmp_path) == [1, 2, 3]
    per_step = Counter(r["step"] for r in rows(tmp_path, "samples.jsonl"))
    assert sorted(per_step) == [1, 2, 3] and len(set(per_step.values())) == 1


# ----------------------------------------------------------------------------- signals, in a child process

CHILD_EXTRA = ("trainer.total_steps=3", *NO_EARLY_CHECKPOINT)


def start_child(run_dir: Path, db: Path, signals_in_step: str, *extra: str) -> subprocess.Popen[str]:
    """``preempt_child.py``: the tiny local run (seed 5) as a process of its own, sending
    itself ``signals_in_step`` (``N:SIGNAL,...``) in the middle of step N."""
    env = dict(os.environ, PYTHONPATH=str(REPO), TOKENIZERS_PARALLELISM="false", SIGNALS_IN_STEP=signals_in_step)
    command = [sys.executable, "-m", "tests.training.engines.local.preempt_child", str(run_dir), str(db), *extra]
    return subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finished(child: subprocess.Popen[str]) -> subprocess.CompletedProcess[str]:
    try:
        out, err = child.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        child.kill()
        raise
    return subprocess.CompletedProcess(child.args, child.returncode, out, err)


def run_child(run_dir: Path, db: Path, signals_in_step: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return finished(start_child(run_dir, db, signals_in_step, *extra))


@pytest.mark.slow
def test_sigterm_finishes_the_step_saves_it_and_resume_continues_exactly(tmp_path: Path) -> None:
    db = make_db(tmp_path / "schools.sqlite")
    examples = school_examples(db)
    run_dir = tmp_path / "run"
    started = start_child(run_dir, db, "2:SIGTERM", *CHILD_EXTRA)
    # the uninterrupted run to compare with, here while the child runs (two cores, half the wait)
    try:
        straight = trainer("think2sql", tmp_path / "straight", examples, *CHILD_EXTRA, seed=5)
        straight.fit()
    finally:
        child = finished(started)
    out = child.stdout + child.stderr
    assert child.returncode == REQUEUE_EXIT_STATUS, out[-3000:]
    assert "SIGTERM received: finishing the current step" in out and "stopped after step 2" in out, out[-3000:]
    latest = st.latest_checkpoint(run_dir)
    assert latest is not None and st.read_meta(latest).step == 2 and (latest / st.TRAINER_STATE).is_file()
    assert train_steps(run_dir) == [1, 2] and not (run_dir / "final").exists()

    resumed = trainer("think2sql", run_dir, examples, *CHILD_EXTRA, "resume=auto", seed=5)
    assert resumed.fit()["steps"] == 3
    assert train_steps(run_dir) == [1, 2, 3] and sample_steps(run_dir) == [1, 2, 3]
    a, b = straight.model.state_dict(), resumed.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_a_second_signal_exits_at_once_and_keeps_the_last_checkpoint(tmp_path: Path) -> None:
    """SLURM's order: SIGUSR1 before the time limit, SIGTERM at it - both before the step in
    progress is done."""
    db = make_db(tmp_path / "schools.sqlite")
    run_dir = tmp_path / "run"
    child = run_child(run_dir, db, "2:SIGUSR1,SIGTERM", "trainer.total_steps=3", "trainer.save_every=1")
    out = child.stdout + child.stderr
    assert child.returncode == -signal.SIGTERM, out[-3000:]
    assert "SIGUSR1 received" in out and "stopped after step" not in out, out[-3000:]
    before = json.loads(next(line for line in out.splitlines() if line.startswith("checkpoint-hashes "))[18:])
    latest = st.latest_checkpoint(run_dir)
    assert latest is not None and latest.name == "step_000001" and not (latest.parent / "step_000002").exists()
    after = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in latest.iterdir() if p.is_file()}
    assert before and after == before  # the last complete checkpoint, byte for byte
    assert train_steps(run_dir) == [1]


@pytest.mark.slow
def test_sigterm_in_the_evaluation_before_training_stops_before_the_warm_start(tmp_path: Path) -> None:
    """The evaluation finishes and is recorded, the job exits with the requeue status at once
    (no warm start begun, which a cluster's grace period could cut half-way); the rerun takes
    the recorded evaluation and goes on with the warm start and the steps."""
    db = make_db(tmp_path / "schools.sqlite")
    examples = school_examples(db)
    run_dir = tmp_path / "run"
    extra = ("trainer.eval_before_after=true", "stage.warm_start.enable=true", "stage.warm_start.eval_after=false")
    child = run_child(run_dir, db, "before:SIGTERM", *extra)
    out = child.stdout + child.stderr
    assert child.returncode == REQUEUE_EXIT_STATUS, out[-3000:]
    assert "SIGTERM received" in out and "[warm start]" not in out, out[-3000:]
    assert [r["kind"] for r in rows(run_dir) if r["kind"] != "config"] == ["eval_before"]
    assert st.latest_checkpoint(run_dir) is None

    resumed = trainer("think2sql", run_dir, examples, *extra, "resume=auto", seed=5)
    tags: list[str] = []
    evaluate = resumed.evaluate

    def counted(tag: str) -> Any:
        tags.append(tag)
        return evaluate(tag)

    resumed.evaluate = counted  # type: ignore[method-assign]
    summary = resumed.fit()
    assert summary["steps"] == 1 and tags == ["after"]  # the evaluation before is the recorded one
    kinds = [r["kind"] for r in rows(run_dir)]
    assert kinds.count("eval_before") == 1 and "warm_start" in kinds and train_steps(run_dir) == [1]
