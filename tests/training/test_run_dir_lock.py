"""``python -m training.run`` holds its run_dir's lock: a second run on a run_dir another
process holds exits at once with status 2 naming it (and writes nothing there); a lock
left by a killed run is taken over with a message that also reaches run.log; a dry run
takes no lock; each job of a sweep releases its own.

The runs stop early and cheaply: the model path does not exist, which the local engine
reports after the lock is taken."""

from __future__ import annotations

import signal
import socket
import subprocess
from pathlib import Path

import pytest

from tests.helpers.commands import run_module
from tests.tools.lock_holder import lock_owner, start_holder, stop_holder
from tools.errors import ConfigError

MISSING_MODEL = [
    "recipe=think2sql",
    "model.path=no/such/model",
    "engine=local",
    "engine.device=cpu",
    "logger=[console]",
]


def train(cwd: Path, *overrides: str) -> subprocess.CompletedProcess:
    return run_module("training.run", *overrides, cwd=cwd)


@pytest.mark.slow
def test_a_second_run_on_a_held_run_dir_exits_naming_the_holder(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "shared"
    holder = start_holder(run_dir, "recipe=trustsql", "seed=3")
    try:
        proc = train(tmp_path, *MISSING_MODEL, f"run_dir={run_dir}")
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        assert f"process {holder.pid} on {socket.gethostname()}" in proc.stderr
        assert f"`kill {holder.pid}`" in proc.stderr and "recipe=trustsql seed=3" in proc.stderr
        assert "does not exist" not in proc.stderr  # refused before the engine started
        assert sorted(p.name for p in run_dir.iterdir()) == ["run.lock"]  # no run.log appended
        assert holder.poll() is None and lock_owner(run_dir) == holder.pid  # the first run is untouched
    finally:
        assert stop_holder(holder) == 0


@pytest.mark.slow
def test_a_killed_runs_lock_is_taken_over_and_released_when_the_run_fails(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "shared"
    holder = start_holder(run_dir)
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=30)
    proc = train(tmp_path, *MISSING_MODEL, f"run_dir={run_dir}")
    assert proc.returncode == 2 and "does not exist" in proc.stderr  # it went on to the engine
    taking_over = f"[run lock] taking over {run_dir / 'run.lock'} from process {holder.pid}"
    assert taking_over in proc.stdout and f"process {holder.pid} is gone" in proc.stdout
    assert taking_over in (run_dir / "run.log").read_text()
    assert not (run_dir / "run.lock").exists()  # released on the error


@pytest.mark.slow
def test_a_dry_run_takes_no_lock(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "shared"
    holder = start_holder(run_dir)
    try:
        proc = train(
            tmp_path, "recipe=think2sql", "engine=local", "engine.device=cpu", f"run_dir={run_dir}", "dry_run=true"
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert lock_owner(run_dir) == holder.pid and sorted(p.name for p in run_dir.iterdir()) == ["run.lock"]
    finally:
        assert stop_holder(holder) == 0
    fresh = tmp_path / "runs" / "fresh"
    proc = train(tmp_path, "recipe=think2sql", "engine=local", "engine.device=cpu", f"run_dir={fresh}", "dry_run=true")
    assert proc.returncode == 0 and not fresh.exists()  # no lock file, no run directory


@pytest.mark.slow
def test_runs_one_after_another_in_a_process_each_release_the_lock(tmp_path: Path) -> None:
    """A multirun's jobs run in one process: each must leave its run_dir unlocked."""
    from training.config import compose_tree
    from training.run import run

    run_dir = tmp_path / "runs" / "job"
    raw = compose_tree("config", [*MISSING_MODEL, f"run_dir={run_dir}"])
    for _ in range(2):
        with pytest.raises(ConfigError, match="does not exist"):  # not "is being written by"
            run(raw, set(), say=lambda _: None)
        assert not (run_dir / "run.lock").exists() and (run_dir / "run.log").is_file()


@pytest.mark.slow
def test_every_sweep_job_released_its_lock(tiny_sweep: Path) -> None:
    jobs = sorted(p for p in tiny_sweep.iterdir() if p.is_dir())
    assert len(jobs) == 4 and all((job / "run.log").is_file() for job in jobs)
    assert not any((job / "run.lock").exists() for job in jobs)
