"""``python -m training.run recipe=<name> [overrides]``: the user's training entry point.

Hydra composes ``recipes/config.yaml`` with the chosen recipe and any command-line
overrides (which beat the recipe); the tree is converted once into ``TrainConfig`` and
validated. ``engine=auto`` picks the engine and says why; on the local engine on CPU the
laptop profile shrinks sizes (printed, command-line values kept). ``dry_run=true`` prints
the effective configuration - the one that runs - and exits, writing nothing. Hydra's
``--cfg job`` shows the tree before engine selection and the laptop profile, so it
prints a note saying so first.

A real run copies its console into ``<run_dir>/run.log`` (the lines printed before the
run directory was known included). Hydra itself writes nothing (``hydra.run.dir: .``,
no ``.hydra`` folder, console logging only): the run directory is the engine's.

One process writes a run directory at a time: a real run holds ``<run_dir>/run.lock``
(tools/run_lock.py) from before ``run.log`` is opened until it ends, so a second
``training.run`` on the same run_dir - a requeued job while the old one still runs, a
command started twice - exits at once with status 2, naming the holder. A lock left by a
dead run is taken over with a message. A dry run takes no lock. In a Hydra multirun each
job locks its own run directory and releases it before the next job starts.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import training.runs.usage  # first: its clock starts with the command
from training.config.command import explicit_keys, hydra_entry, prepare_config, resolve_device, shows_config

training.runs.usage.bound_heap_growth()  # before torch allocates: see the function

Say = Callable[[str], None]


RUN_LOG = "run.log"


def run(raw: dict[str, Any], explicit: set[str], say: Say = print) -> dict[str, Any] | None:
    """Prepare the config, then print it (dry run) or train with the chosen engine."""
    from training.engines import get_engine
    from training.runs.sweep import apply_sweep, current_job

    earlier: list[str] = []

    def keep(line: str) -> None:
        earlier.append(line)
        say(line)

    raw = apply_sweep(raw, explicit, current_job())  # a multirun job: its run_dir, sweep and ablation
    cfg = prepare_config(raw, explicit, keep)
    if cfg.stage.name != "rl":  # the supervised stages (training/supervised/)
        from training.supervised import stage_entry

        if cfg.dry_run:
            return stage_entry(cfg, say)
        with writing_run_dir(cfg.run_dir, earlier, keep):
            return stage_entry(cfg, say)
    engine = get_engine(cfg.engine.name)
    if cfg.dry_run:
        say(engine.describe(cfg))
        return None
    with writing_run_dir(cfg.run_dir, earlier, keep):
        return engine.train(cfg)


@contextlib.contextmanager
def writing_run_dir(run_dir: str, earlier: list[str], say: Say) -> Iterator[None]:
    """The run directory's lock, then its console log (which gets the lines printed before,
    a lock takeover's message included); a refused lock leaves the directory untouched."""
    from tools.run_lock import hold_run_dir
    from training.runs.logger import ConsoleLog

    with hold_run_dir(run_dir, "run_dir", say), ConsoleLog(Path(run_dir) / RUN_LOG, earlier):
        yield


def _hydra_main() -> None:
    hydra_entry("config", run)


__all__ = ["explicit_keys", "hydra_entry", "prepare_config", "resolve_device", "run", "shows_config"]

if __name__ == "__main__":
    _hydra_main()
