"""Sweeps: a real Hydra multirun of the local engine, and what each run records."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.sweep import ARMS
from tools.errors import ConfigError
from training.runs.sweep import SweepJob, apply_sweep, job_values, swept_keys, verl_runtime_env


def _records(run: Path, kind: str) -> list[dict]:
    return [r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if r["kind"] == kind]


@pytest.mark.slow
def test_two_by_two_sweep_writes_four_runs_naming_their_ablation(tiny_sweep: Path) -> None:
    runs = sorted(p for p in tiny_sweep.iterdir() if p.is_dir())
    assert [p.name for p in runs] == ["0", "1", "2", "3"]
    seen = set()
    for run in runs:
        summary = json.loads((run / "summary.json").read_text())
        config = _records(run, "config")[-1]
        assert config["ablation"] == summary["ablation"] and set(summary["ablation"]) == set(ARMS)
        assert config["sweep"] == summary["sweep"] == "/".join(tiny_sweep.resolve().parts[-2:])
        values = summary["ablation"]
        # the effective config is the one the ablation names, and it is logged in full
        assert config["config"]["reward"]["exec_metric"] == values["reward.exec_metric"]
        assert config["config"]["seed"] == values["seed"] and config["config"]["run_dir"] == str(run)
        assert summary["steps"] == 1 and _records(run, "train")[0]["step"] == 1
        samples = [json.loads(x) for x in (run / "samples.jsonl").read_text().splitlines()]
        assert samples and {s["step"] for s in samples} == {1}
        assert (run / "heldout_after.jsonl").is_file() and (run / "final" / "config.json").is_file()
        seen.add((values["reward.exec_metric"], values["seed"]))
    assert seen == {(m, s) for m in ARMS["reward.exec_metric"] for s in ARMS["seed"]}


def test_swept_keys_come_from_the_sweep_overrides() -> None:
    assert swept_keys(["recipe=trustsql", "advantage=grpo,two_track", "seed=range(0,3)", "+x.y=1"]) == [
        "advantage",
        "seed",
    ]
    assert job_values(["recipe=trustsql", "advantage=two_track", "seed=2"], ["advantage", "seed"]) == {
        "advantage": "two_track",
        "seed": 2,
    }


def test_apply_sweep_sets_run_dir_and_exports_wandb_group_and_tags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WANDB_RUN_GROUP", raising=False)
    monkeypatch.delenv("WANDB_TAGS", raising=False)
    job = SweepJob(
        sweep="trustsql/2026", run_dir="runs/sweeps/trustsql/2026/3", ablation={"advantage": "grpo", "seed": 1}
    )
    raw = apply_sweep({"run_dir": "runs/trustsql", "seed": 1}, {"advantage", "seed"}, job)
    assert raw["run_dir"] == job.run_dir and raw["sweep"] == "trustsql/2026"
    assert raw["ablation"] == {"advantage": "grpo", "seed": 1}
    assert os.environ["WANDB_RUN_GROUP"] == "trustsql/2026" and os.environ["WANDB_TAGS"] == "advantage=grpo,seed=1"
    assert apply_sweep({"run_dir": "x"}, set(), None) == {"run_dir": "x"}  # not a sweep: unchanged
    with pytest.raises(ConfigError, match="hydra.sweep.dir"):
        apply_sweep({"run_dir": "x"}, {"run_dir", "seed"}, job)


def test_wandb_reads_group_and_tags_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The local engine's logger (training.runs.logger.RunLogger) gets the sweep's group and tags."""
    from training.runs.logger import RunLogger

    monkeypatch.setenv("WANDB_MODE", "offline")
    job = SweepJob(sweep="think2sql/s1", run_dir=str(tmp_path), ablation={"reward.exec_metric": "qatch", "seed": 0})
    for key, value in job.wandb_env().items():
        monkeypatch.setenv(key, value)
    logger = RunLogger(tmp_path, ["wandb"], 1, say=lambda _: None)
    try:
        assert logger.wandb_run.group == "think2sql/s1"
        assert set(logger.wandb_run.tags) == {"reward.exec_metric=qatch", "seed=0"}
    finally:
        logger.close()


def test_verl_runtime_env_carries_group_tags_and_a_unique_name() -> None:
    env, name = verl_runtime_env("trustsql/s", {"advantage": "grpo", "seed": 1}, "trustsql", "runs/sweeps/trustsql/s/2")
    assert env == {"WANDB_RUN_GROUP": "trustsql/s", "WANDB_TAGS": "advantage=grpo,seed=1"}
    assert name == "trustsql-2-advantage=grpo-seed=1"
    other = verl_runtime_env("trustsql/s", {"advantage": "grpo", "seed": 2}, "trustsql", "runs/sweeps/trustsql/s/3")[1]
    assert other != name
    assert verl_runtime_env(None, {}, "trustsql", "runs/trustsql") == ({}, "trustsql")


@pytest.mark.slow
def test_a_sweep_refuses_one_run_dir_for_every_job(tmp_path: Path) -> None:
    repo = Path(__file__).resolve().parents[3]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "training.run",
            "-m",
            "recipe=think2sql",
            "seed=0,1",
            "run_dir=one",
            "dry_run=true",
            "engine=local",
            "engine.device=cpu",
            f"hydra.sweep.dir={tmp_path / 's'}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=str(repo)),
    )
    assert proc.returncode == 2 and "hydra.sweep.dir" in proc.stderr and "Traceback" not in proc.stderr


def _printed_configs(stdout: str) -> list[dict]:
    """The veRL configs a multirun dry run printed, one per job (Hydra's log lines between them)."""
    import yaml

    chunks = stdout.split("# engine=verl")[1:]
    return [
        yaml.safe_load("\n".join(line for line in chunk.splitlines()[1:] if not line.startswith("[")))
        for chunk in chunks
    ]


@pytest.mark.slow
def test_verl_sweep_dry_run_names_each_job_and_carries_group_and_tags(tmp_path: Path) -> None:
    repo = Path(__file__).resolve().parents[3]
    sweep_dir = tmp_path / "trustsql" / "s1"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "training.run",
            "-m",
            "recipe=trustsql",
            "engine=verl",
            "dry_run=true",
            "seed=0,1",
            f"hydra.sweep.dir={sweep_dir}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=str(repo)),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    configs = _printed_configs(proc.stdout)
    assert len(configs) == 2
    names = [c["trainer"]["experiment_name"] for c in configs]
    assert names == ["trustsql-0-seed=0", "trustsql-1-seed=1"]
    for seed, config in enumerate(configs):
        env_vars = config["ray_kwargs"]["ray_init"]["runtime_env"]["env_vars"]
        assert env_vars == {"WANDB_RUN_GROUP": "trustsql/s1", "WANDB_TAGS": f"seed={seed}"}
        assert config["ray_kwargs"]["ray_init"]["runtime_env"]["py_executable"] is None  # veRL's keys kept
        assert config["sqlagent"]["run_dir"] == str((sweep_dir / str(seed)).resolve())


def test_a_verl_sweep_job_launches_in_a_process_of_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a sweep job's train() runs: the resolved config written to the run directory and
    read back by ``python -m training.engines.verl.launch`` in a child process, which
    launches on it (here ``--dry-run``: it prints what it would launch)."""
    from dataclasses import replace

    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf

    from training.config import TrainConfig
    from training.engines.verl import launch as L
    from training.engines.verl.config import translate as C

    run = tmp_path / "trustsql" / "s" / "3"
    with initialize_config_module(config_module="recipes", version_base=None):
        raw = OmegaConf.to_container(
            compose(config_name="config", overrides=["recipe=trustsql", "engine=verl", f"run_dir={run}"]), resolve=True
        )
    cfg = replace(TrainConfig.from_mapping(raw), sweep="trustsql/s", ablation={"advantage": "grpo", "seed": 1})
    job = SweepJob(sweep=cfg.sweep, run_dir=str(run), ablation=dict(cfg.ablation))
    for key, value in job.wandb_env().items():  # apply_sweep exports them in the job's process
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[3]))
    verl_cfg = C.verl_config_for(cfg, model_path="m", num_train_examples=64)
    said: list[str] = []
    printed = json.loads(L.launch_in_child(verl_cfg, str(run), said.append, dry_run=True).strip().splitlines()[-1])
    assert printed["experiment_name"] == "trustsql-3-advantage=grpo-seed=1"
    wandb = {"WANDB_RUN_GROUP": "trustsql/s", "WANDB_TAGS": "advantage=grpo,seed=1"}
    assert printed["runtime_env"]["env_vars"] == wandb and printed["environment"] == wandb
    assert (run / L.CHILD_CONFIG).is_file() and "own process" in said[0]
