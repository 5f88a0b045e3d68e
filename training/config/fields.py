"""Field helpers of the typed configuration (``training.config``): a field with a help
string and allowed values, the type check every value passes before its dataclass is
built, and the check of a name against a registry (so a metric, estimator, agent or reward
registered by a user is accepted like a built-in one).
"""

from __future__ import annotations

import functools
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import field
from typing import Any

from tools.errors import ConfigError
from tools.spelling import did_you_mean

Choices = Sequence[Any] | Callable[[], Sequence[Any]]
"""Allowed values of a field: fixed, or a function giving them at validation time (a registry's names)."""


def _f(default: Any, help: str, choices: Choices | None = None) -> Any:
    """A dataclass field with a help string (TRL's ``GRPOConfig`` style) and, for a field
    with a set of values, ``choices`` (checked with the types in ``_build``): a tuple, or a
    function returning a registry's names when the value is checked."""
    metadata: dict[str, Any] = {"help": help}
    if choices is not None:
        metadata["choices"] = choices if callable(choices) else tuple(choices)
    if isinstance(default, (list, dict)):
        value = default
        return field(default_factory=lambda: type(value)(value), metadata=metadata)
    return field(default=default, metadata=metadata)


def _need(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def need_choice(path: str, value: Any, choices: Choices, hint: str = "") -> None:
    """A ``ConfigError`` unless ``value`` is one of ``choices``: it names the key, the
    closest allowed value and all of them (``hint`` says how to add one)."""
    allowed = list(choices() if callable(choices) else choices)
    if value not in allowed:
        names = [str(c) for c in allowed]
        close = did_you_mean(str(value), names)
        raise ConfigError(f"{path}={value!r}{close or ';'} choose one of {', '.join(names)}{hint}")


# ----------------------------------------------------------------------------- registries
# Each reads its registry when a value is checked, not when this module is imported, so a
# plugin registered after ``training.config`` was imported (a user's metric) is accepted.


def exec_metric_names() -> list[str]:
    """``rex.scorer.METRICS``: the execution metrics (``@rex.register_metric``)."""
    from rex.scorer import METRICS

    return METRICS.names()


def estimator_names() -> list[str]:
    """``training.algorithm.advantages.ESTIMATORS`` (``@training.algorithm.advantages.register_estimator``)."""
    from training.algorithm.advantages import ESTIMATORS

    return ESTIMATORS.names()


def agent_names() -> list[str]:
    """``agents.AGENTS`` (``@agents.register_agent``)."""
    from agents import list_agents

    return list_agents()


def engine_names() -> list[str]:
    """``auto`` and ``training.engines.ENGINES`` (``register_engine(name, module_path)``)."""
    from training.engines import ENGINES

    return ["auto", *ENGINES.names()]


def data_kind_names() -> list[str]:
    """``eval.data.KINDS``: the dataset loaders."""
    from eval.data.loaders import KINDS

    return KINDS.names()


def reward_names() -> list[str]:
    """``training.algorithm.rewards.REWARDS`` (``@training.algorithm.rewards.register_reward``)."""
    from training.algorithm.rewards import list_rewards

    return list_rewards()


# ----------------------------------------------------------------------------- type checks
# Hydra composes plain YAML, so a value of the wrong type (``resume=maybe``,
# ``trainer.total_steps=abc``) would reach the dataclasses unchecked. Every field is
# checked against its annotation here, so a field added to any dataclass is covered.


class _Mismatch(Exception):
    """A value does not fit a type annotation (turned into a ConfigError by the caller)."""


@functools.cache
def _type_hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def describe_type(hint: Any) -> str:
    """What a person should write for a field of this annotation.

    >>> describe_type(int | None)
    'an integer or null'
    >>> describe_type(list[list[float]])
    'a list of (a list of (a number))'
    """
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        named = [describe_type(a) for a in args if a is not type(None)]
        return " or ".join(named) + (" or null" if type(None) in args else "")
    if origin is list:
        return f"a list of ({describe_type(args[0])})" if args else "a list"
    if origin is dict or hint is dict:
        return "a mapping of keys to values"
    return {bool: "a boolean (true or false)", int: "an integer", float: "a number", str: "text", Any: "any value"}.get(
        hint, getattr(hint, "__name__", str(hint))
    )


def checked_value(path: str, value: Any, hint: Any, choices: Choices | None = None) -> Any:
    """``value`` conformed to ``hint`` (an int where a float is expected becomes a float,
    a number where text is expected becomes text), or a ConfigError naming the key, the
    expected type and the allowed values."""
    allowed = (choices() if callable(choices) else choices) if choices is not None else ()
    try:
        value = _conform(value, hint)
    except _Mismatch:
        listed = f"; allowed values: {', '.join(map(str, allowed))}" if allowed else ""
        raise ConfigError(f"{path}={value!r}: expected {describe_type(hint)}{listed}") from None
    if allowed and value is not None:
        need_choice(path, value, allowed)
    return value


def _conform(value: Any, hint: Any) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for arg in (a for a in args if a is not type(None)):
            try:
                return _conform(value, arg)
            except _Mismatch:
                continue
        raise _Mismatch
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is bool and isinstance(value, bool):
        return value
    if hint is int and number and isinstance(value, int):
        return value
    if hint is float and number:
        return float(value)
    if hint is str and (isinstance(value, str) or number):
        return value if isinstance(value, str) else str(value)
    if origin is list and isinstance(value, (list, tuple)):
        for item in value if args else ():
            _conform(item, args[0])  # checked; items keep their own type ([[0, 0.005]] stays as written)
        return list(value)
    if (origin is dict or hint is dict) and isinstance(value, Mapping):
        return dict(value)
    raise _Mismatch
