"""The verl engine's driver on a signal (training/engines/verl/launch.py): ``ray.init``
replaces its SIGTERM handler with Ray's (which shuts Ray down at once, with no checkpoint),
so ``launch`` installs the stop handlers again after it; the request reaches the trainer
through the run directory; a trainer that stopped makes the driver - and a sweep job's
parent - exit with the requeue status. Ray and veRL's ``run_ppo`` are stand-ins here (veRL's
real loop with a signal: fit/test_resume.py)."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
import ray
import verl.trainer.main_ppo as main_ppo
from omegaconf import OmegaConf

from training.engines.verl import launch as L
from training.runs import preemption as P


def test_the_driver_keeps_its_stop_handlers_over_ray_init(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rays_handler_ran: list[int] = []
    trainer_saw: list[bool] = []

    def ray_init(*_args: Any, **_kwargs: Any) -> None:  # what ray.init does to the driver's handlers
        signal.signal(signal.SIGTERM, lambda signum, _frame: rays_handler_ran.append(signum))

    def run_ppo(_config: Any, task_runner_class: Any) -> None:
        ray.init()
        os.kill(os.getpid(), signal.SIGTERM)  # the cluster's signal, while the trainer runs
        trainer = P.StopSignals(print, run_dir=tmp_path)  # the trainer in its Ray actor
        trainer_saw.append(trainer.requested)
        P.mark_stopped(tmp_path, 1, tmp_path / "checkpoints" / "global_step_1", "SIGTERM")

    monkeypatch.setattr(ray, "init", ray_init)
    monkeypatch.setattr(main_ppo, "run_ppo", run_ppo)
    said: list[str] = []
    with P.StopSignals(said.append, run_dir=tmp_path) as stop:
        L.launch(OmegaConf.create({}), stop)
    assert rays_handler_ran == [] and stop.received == signal.SIGTERM and trainer_saw == [True]
    assert ray.init is ray_init  # the stand-in put back
    with pytest.raises(P.Preempted) as stopped:
        P.raise_if_stopped(tmp_path)
    assert stopped.value.code == P.REQUEUE_EXIT_STATUS
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def test_a_new_run_clears_the_stop_files_of_the_last_one(tmp_path: Path) -> None:
    (tmp_path / P.STOP_REQUEST_FILE).write_text("{}")
    P.mark_stopped(tmp_path, 1, "c", "SIGTERM")
    L.prepare_run_dir(tmp_path, "auto", fresh=False, say=lambda _: None)
    assert not (tmp_path / P.STOP_REQUEST_FILE).exists() and not (tmp_path / P.STOPPED_FILE).exists()


def test_a_sweep_jobs_parent_passes_the_requeue_status_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def child(command: list[str], **_kwargs: Any) -> subprocess.CompletedProcess:
        P.mark_stopped(tmp_path, 3, tmp_path / "checkpoints" / "global_step_3", "SIGUSR1")
        return subprocess.CompletedProcess(command, P.REQUEUE_EXIT_STATUS, "", "")

    monkeypatch.setattr(subprocess, "run", child)
    with pytest.raises(P.Preempted) as stopped:
        L.launch_in_child(OmegaConf.create({"trainer": {}}), str(tmp_path), say=lambda _: None)
    assert stopped.value.code == P.REQUEUE_EXIT_STATUS and stopped.value.step == 3
