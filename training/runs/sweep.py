"""Sweeps: a Hydra multirun of ``training.run`` is one ablation study.

``python -m training.run -m recipe=trustsql advantage=grpo,two_track seed=0,1`` runs every
combination. Each job gets its own run directory (``hydra.sweep.dir``/``hydra.sweep.subdir``,
see recipes/config.yaml) and records what distinguishes it:

- ``sweep``: the sweep's name (the last two parts of its directory) - the wandb group;
- ``ablation``: a flat mapping of the swept keys to this job's values
  (``{"advantage": "two_track", "seed": 1}``); the wandb tags are ``key=value`` of it.

Both land in the effective config (logged in full to wandb and as the ``config`` record of
metrics.jsonl) and in summary.json, so ``eval.compare`` groups runs offline as well. The
swept keys are those of the sweep's own overrides that hold several values (Hydra writes
them to ``<sweep dir>/multirun.yaml`` before the first job starts).

wandb gets group and tags through ``WANDB_RUN_GROUP`` / ``WANDB_TAGS``, which
``wandb.init`` reads: the local engine's logger in this process, and veRL's ``Tracking``
(which calls ``wandb.init`` without group or tags) inside Ray workers through
``verl_runtime_env``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.errors import ConfigError

GROUP_ENV, TAGS_ENV = "WANDB_RUN_GROUP", "WANDB_TAGS"


@dataclass(frozen=True)
class SweepJob:
    """One job of a multirun: its sweep name, run directory and ablation values."""

    sweep: str
    run_dir: str
    ablation: dict[str, Any] = field(default_factory=dict)

    @property
    def tags(self) -> list[str]:
        """wandb tags (at most 64 characters each): ``key=value`` per swept key."""
        return [f"{k}={v}"[:64] for k, v in self.ablation.items()]

    def wandb_env(self) -> dict[str, str]:
        return {GROUP_ENV: self.sweep, TAGS_ENV: ",".join(t.replace(",", ";") for t in self.tags)}


def swept_keys(sweep_overrides: Sequence[str]) -> list[str]:
    """Keys of the overrides that sweep over several values, in command-line order.

    >>> swept_keys(["recipe=trustsql", "advantage=grpo,two_track", "seed=range(0,2)", "x=[1,2]"])
    ['advantage', 'seed']
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(list(sweep_overrides))
    return [o.get_key_element().lstrip("+~") for o in parsed if o.is_sweep_override()]


def job_values(job_overrides: Sequence[str], keys: Sequence[str]) -> dict[str, Any]:
    """This job's value of each swept key (typed as Hydra parsed it).

    >>> job_values(["recipe=trustsql", "advantage=grpo", "seed=1"], ["advantage", "seed"])
    {'advantage': 'grpo', 'seed': 1}
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(list(job_overrides))
    values = {o.get_key_element().lstrip("+~"): o.value() for o in parsed}
    return {k: values[k] for k in keys if k in values}


def sweep_name(sweep_dir: str | Path) -> str:
    """The wandb group of a sweep: its directory's last two parts (``trustsql/2026-12-01_06-40-00``)."""
    parts = Path(sweep_dir).resolve().parts
    return "/".join(parts[-2:])


def current_job() -> SweepJob | None:
    """The running Hydra multirun job, or None outside a multirun."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    if not HydraConfig.initialized():
        return None
    hc = HydraConfig.get()
    if hc.mode != RunMode.MULTIRUN:
        return None
    sweep_dir = Path(hc.sweep.dir)
    multirun = sweep_dir / "multirun.yaml"
    if multirun.is_file():
        saved = OmegaConf.load(multirun)
        params = saved.hydra.sweeper.get("params") or {}
        overrides = [f"{k}={v}" for k, v in params.items()] + list(saved.hydra.overrides.task)
    else:  # a launcher that does not write it: every override of the job names the ablation
        overrides = list(hc.overrides.task)
    keys = swept_keys(overrides) if multirun.is_file() else [o.split("=", 1)[0].lstrip("+~") for o in overrides]
    return SweepJob(
        sweep=sweep_name(sweep_dir),
        run_dir=str(hc.runtime.output_dir),
        ablation=job_values(list(hc.overrides.task), keys),
    )


def apply_sweep(raw: dict[str, Any], explicit: set[str], job: SweepJob | None) -> dict[str, Any]:
    """Put the job's sweep, ablation and run directory into the composed config and export
    group and tags for wandb; outside a multirun ``raw`` is returned as it is."""
    if job is None:
        return raw
    if "run_dir" in explicit and "run_dir" not in job.ablation:
        raise ConfigError(
            "run_dir is set once for a whole sweep, so every job would share it; in a sweep each "
            "job runs in <hydra.sweep.dir>/<job number>: set hydra.sweep.dir=<folder> instead"
        )
    out = dict(raw)
    out["sweep"], out["ablation"] = job.sweep, dict(job.ablation)
    if "run_dir" not in job.ablation:
        out["run_dir"] = job.run_dir
    os.environ.update(job.wandb_env())  # read by wandb.init in this process (the local engine)
    return out


def verl_runtime_env(
    sweep: str | None, ablation: Mapping[str, Any], experiment: str, run_dir: str
) -> tuple[dict[str, str], str]:
    """What veRL's launch needs for one sweep job: the ``env_vars`` to add to the Ray
    runtime environment (wandb group and tags for ``Tracking``'s ``wandb.init`` in the
    workers) and a unique ``trainer.experiment_name`` (veRL names every run after it, so
    jobs of one sweep would otherwise share a name). Outside a sweep: no variables and the
    name unchanged.

    >>> verl_runtime_env("trustsql/d1", {"seed": 1}, "trustsql", "runs/sweeps/trustsql/d1/3")
    ({'WANDB_RUN_GROUP': 'trustsql/d1', 'WANDB_TAGS': 'seed=1'}, 'trustsql-3-seed=1')
    """
    if not sweep:
        return {}, experiment
    job = SweepJob(sweep=sweep, run_dir=run_dir, ablation=dict(ablation))
    suffix = "-".join(job.tags).replace("/", "_")
    return job.wandb_env(), f"{experiment}-{Path(run_dir).name}" + (f"-{suffix}" if suffix else "")
