"""The agent registry: ``@register_agent(name)``, ``get_agent``, ``list_agents``, ``make_agent``,
``training_spec``.

Agents are registered as classes; ``make_agent(name, **options)`` builds one from the
options of the Hydra ``agent`` config group and rejects unknown options with the list
of valid ones, so a typo in a YAML file fails at start-up, not mid-training.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agents.types import Agent, Example, TrainingSpec
from tools.errors import ConfigError
from tools.plugins import DESIGN_GROUP, Registry
from tools.spelling import did_you_mean

AGENTS: Registry[type] = Registry("agent", plugins=DESIGN_GROUP)


def register_agent(name: str) -> Callable[[type], type]:
    """Class decorator: ``@register_agent("trustsql")``; the class gets ``name``."""

    def decorator(cls: type) -> type:
        cls.name = name  # type: ignore[attr-defined]
        return AGENTS.register(name)(cls)

    return decorator


def get_agent(name: str) -> type:
    """The agent class registered as ``name`` (``UnknownNameError`` lists the names)."""
    return AGENTS.get(name)


def list_agents() -> list[str]:
    return AGENTS.names()


def agent_options(name: str) -> dict[str, Any]:
    """Every option ``make_agent(name, ...)`` accepts, with its default."""
    params = inspect.signature(get_agent(name)).parameters  # the class's: __init__ without self
    return {
        p.name: (None if p.default is inspect.Parameter.empty else p.default)
        for p in params.values()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    }


def make_agent(name: str, **options: Any) -> Agent:
    """Build agent ``name`` with ``options`` (the Hydra ``agent`` group's values)."""
    cls = get_agent(name)
    valid = agent_options(name)
    for key in options:
        if key not in valid:
            raise ConfigError(
                f"agent {name!r} has no option {key!r}{did_you_mean(key, list(valid))} "
                f"valid options: {', '.join(sorted(valid))}"
            )
    return cls(**options)


def training_spec(name: str, options: Mapping[str, Any] | None = None) -> TrainingSpec:
    """What agent ``name`` built with ``options`` needs from a trainer (its own defaults fill
    the options not given): the engines read masks and tracks here, never option names."""
    agent = make_agent(name, **dict(options or {}))
    spec = getattr(agent, "training_spec", None)
    if spec is None:
        raise ConfigError(
            f"agent {name!r} ({type(agent).__qualname__}) has no training_spec(); add one returning "
            "agents.types.TrainingSpec (roles, group key, masks, tracks; docs/INTERFACES.md 'Extension points')"
        )
    result = spec()
    if not isinstance(result, TrainingSpec):
        raise ConfigError(
            f"agent {name!r}: training_spec() returned {type(result).__name__}, not agents.types.TrainingSpec"
        )
    return result


def runtime_options(
    name: str,
    options: Mapping[str, Any] | None = None,
    *,
    inference: bool = False,
    few_shot_pool: Callable[[], Sequence[Example]] | None = None,
) -> dict[str, Any]:
    """The options agent ``name`` runs with: the configured ``options``, plus ``inference=True``
    when evaluating and the agent has an inference mode, plus the few-shot pool when the
    agent retrieves demonstrations (``few_shot_pool`` is called only then). Every caller -
    both engines' training and validation, the SFT replay and ``eval.run`` - builds an
    agent's options here."""
    accepted = agent_options(name)
    out = dict(options or {})
    if inference and "inference" in accepted:
        out["inference"] = True
    if few_shot_pool is not None and "few_shot_pool" in accepted:
        out["few_shot_pool"] = tuple(few_shot_pool())
    return out
