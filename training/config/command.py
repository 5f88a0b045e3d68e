"""Turning a composed config tree into the ``TrainConfig`` that runs: the command-line keys,
the device, the engine choice and the laptop profile (``training.run`` and the other entry
points - ``training.engines.verl.checks.multinode``, the benchmarks - share it; it imports no engine), and the
Hydra entry every command uses."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
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


CFG_NOTE = (
    "# note: --cfg prints the configuration as composed, before engine=auto is resolved and "
    "before the CPU laptop profile; add dry_run=true instead to print the configuration that runs"
)


def shows_config(argv: Sequence[str]) -> bool:
    """Whether Hydra was asked to print the composed config (``--cfg job``, ``-c all``).

    >>> shows_config(["recipe=x", "--cfg", "job"]), shows_config(["recipe=x"])
    (True, False)
    """
    return any(a in ("--cfg", "-c") or a.startswith("--cfg=") for a in argv)


def hydra_entry(config_name: str, run_fn: Callable[[dict[str, Any], set[str]], Any]) -> None:
    """Run ``run_fn(raw_config, explicit_keys)`` under Hydra with the packaged recipes as
    config root and every registered design's recipes on the search path (works from any
    directory); project errors exit 2 with their message."""
    import hydra
    from omegaconf import DictConfig, OmegaConf

    from agents.designs import list_designs
    from training.config.search_path import use_design_recipes

    try:
        list_designs()  # a design that fails to load is reported here, not inside Hydra
    except ToolkitError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    use_design_recipes()

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
