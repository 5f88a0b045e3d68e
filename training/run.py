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
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from tools.errors import ToolkitError

Say = Callable[[str], None]


def explicit_keys(task_overrides: Sequence[str]) -> set[str]:
    """Config paths set on the command line (``reward.exec_metric=rex`` -> that path).

    >>> sorted(explicit_keys(["recipe=trustsql", "+x.y=1", "algorithm.group_size=8"]))
    ['algorithm.group_size', 'recipe', 'x.y']
    """
    keys: set[str] = set()
    for item in task_overrides:
        key = item.split("=", 1)[0].lstrip("+~")
        if key:
            keys.add(key)
    return keys


def resolve_device(requested: str) -> str:
    """``auto`` -> ``cuda`` when a GPU is visible, else ``cpu``."""
    if requested != "auto":
        return requested
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def prepare_config(raw: dict[str, Any], explicit: set[str], say: Say = print) -> Any:
    """Validate the composed tree, pick the engine, apply the laptop profile; return TrainConfig."""
    from training.config import TrainConfig, apply_laptop_profile
    from training.engines import resolve_engine

    raw = {k: v for k, v in raw.items() if k != "hydra"}
    cfg = TrainConfig.from_mapping(raw)
    engine, why = resolve_engine(cfg.engine.name)
    say(f"[engine] {why}")
    device = resolve_device(cfg.engine.device) if engine == "local" else cfg.engine.device
    cfg = replace(cfg, engine=replace(cfg.engine, name=engine, device=device))
    mode = cfg.engine.laptop_profile
    if mode == "on" or (mode == "auto" and engine == "local" and device == "cpu"):
        cfg, changes = apply_laptop_profile(cfg, sorted(explicit))
        say(_describe_profile(changes, mode))
    return cfg


def _describe_profile(changes: dict[str, tuple[Any, Any]], mode: str) -> str:
    why = "engine.laptop_profile=on" if mode == "on" else "local engine on CPU"
    if not changes:
        return f"[laptop profile] {why}: nothing to change"
    lines = [f"[laptop profile] {why} (engine.laptop_profile=off keeps the recipe's sizes):"]
    lines += [f"    {path}: {old} -> {new}" for path, (old, new) in sorted(changes.items())]
    return "\n".join(lines)


RUN_LOG = "run.log"

CFG_NOTE = (
    "# note: --cfg prints the configuration as composed, before engine=auto is resolved and "
    "before the CPU laptop profile; add dry_run=true instead to print the configuration that runs"
)


def run(raw: dict[str, Any], explicit: set[str], say: Say = print) -> dict[str, Any] | None:
    """Prepare the config, then print it (dry run) or train with the chosen engine."""
    from training.engines import get_engine
    from training.logging_utils import ConsoleLog
    from training.sweep import apply_sweep, current_job

    earlier: list[str] = []

    def keep(line: str) -> None:
        earlier.append(line)
        say(line)

    raw = apply_sweep(raw, explicit, current_job())  # a multirun job: its run_dir, sweep and ablation
    cfg = prepare_config(raw, explicit, keep)
    if cfg.stage.name != "rl":  # the supervised stages (training/stages/)
        from training.stages import stage_entry

        if cfg.dry_run:
            return stage_entry(cfg, say)
        with ConsoleLog(Path(cfg.run_dir) / RUN_LOG, earlier):
            return stage_entry(cfg, say)
    engine = get_engine(cfg.engine.name)
    if cfg.dry_run:
        say(engine.describe(cfg))
        return None
    with ConsoleLog(Path(cfg.run_dir) / RUN_LOG, earlier):
        return engine.train(cfg)


def shows_config(argv: Sequence[str]) -> bool:
    """Whether Hydra was asked to print the composed config (``--cfg job``, ``-c all``).

    >>> shows_config(["recipe=x", "--cfg", "job"]), shows_config(["recipe=x"])
    (True, False)
    """
    return any(a in ("--cfg", "-c") or a.startswith("--cfg=") for a in argv)


def hydra_entry(config_name: str, run_fn: Callable[[dict[str, Any], set[str]], Any]) -> None:
    """Run ``run_fn(raw_config, explicit_keys)`` under Hydra with the packaged recipes as
    config root (works from any directory); project errors exit 2 with their message."""
    import hydra
    from omegaconf import DictConfig, OmegaConf

    @hydra.main(config_path="pkg://recipes", config_name=config_name, version_base=None)
    def main(dcfg: DictConfig) -> None:
        from hydra.core.hydra_config import HydraConfig

        explicit = explicit_keys(list(HydraConfig.get().overrides.task))
        try:
            raw = OmegaConf.to_container(dcfg, resolve=True)
            run_fn(raw, explicit)  # type: ignore[arg-type]
        except ToolkitError as err:
            print(f"error: {err}", file=sys.stderr)
            sys.exit(2)

    if shows_config(sys.argv[1:]):
        print(CFG_NOTE, flush=True)  # a YAML comment: the output stays valid YAML
    main()


def _hydra_main() -> None:
    hydra_entry("config", run)


if __name__ == "__main__":
    _hydra_main()
