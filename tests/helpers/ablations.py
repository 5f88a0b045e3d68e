"""The agent an ablation's command line runs: the recipe composed with the ablation's
overrides (as ``python -m training.run`` composes it), built the way the engines build it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agents import make_agent
from agents.registry import runtime_options
from training.config import TrainConfig, compose_tree


def ablation_config(recipe: str, overrides: Sequence[str] = ()) -> TrainConfig:
    """``recipe=<recipe>`` plus ``overrides``, composed and validated."""
    return TrainConfig.from_mapping(compose_tree("config", [f"recipe={recipe}", *overrides]))


def ablation_agent(recipe: str, overrides: Sequence[str] = (), inference: bool = False) -> Any:
    """The agent of ``recipe=<recipe>`` with ``overrides`` (no few-shot pool)."""
    cfg = ablation_config(recipe, overrides)
    return make_agent(cfg.agent.name, **runtime_options(cfg.agent.name, cfg.agent.options, inference=inference))
