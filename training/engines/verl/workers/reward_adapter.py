"""The reward function adapter between ``training.algorithm.rewards`` and veRL.

Our rewards need the whole episode (turn records, proposed schema, policy-token counts)
and the database, which exist only inside the agent loop. So the agent loop scores each
episode with the project's registered reward (:func:`score_episode`) and ships the
breakdown with the output: ``reward_score`` (the total, which makes veRL skip its reward
manager), ``extra_fields["reward_extra_info"]`` (flat floats veRL logs and that dynamic
sampling reads its metric from) and ``extra_fields["sqlagent_reward"]`` (the
full breakdown, per output, for the trainer subclass's per-role, per-track advantages).

:func:`compute_score` is the function named in ``reward.custom_reward_function``: veRL's
reward managers call it with ``extra_info`` holding the output's extra fields, and it
returns that same breakdown, so any configuration that routes rewards through veRL's
reward manager (a colocated reward model, a validation re-score) gets identical numbers.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from training.engines.verl.shared import REWARD_KEY

if TYPE_CHECKING:
    from agents.types import Example, RewardBreakdown, RewardFn, Trajectory
    from tools import Backend

__all__ = ["REWARD_KEY", "breakdown_to_json", "compute_score", "extra_info_keys", "flat_extra_info"]


@functools.lru_cache(maxsize=16)
def _cached_reward(name: str, options_items: tuple[tuple[str, Any], ...]) -> RewardFn:
    from training.algorithm.rewards import get_reward

    return get_reward(name, **dict(options_items))


def reward_function(name: str, options: Mapping[str, Any] | None = None) -> RewardFn:
    """The registered reward ``name`` built once per process (options must be hashable JSON)."""
    items = tuple(sorted((str(k), _freeze(v)) for k, v in (options or {}).items()))
    return _cached_reward(name, items)


def _freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), _freeze(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


def score_episode(reward_fn: RewardFn, trajectory: Trajectory, example: Example, db: Backend) -> RewardBreakdown:
    """Score one episode. A reward that cannot be computed returns a breakdown whose
    ``error`` says why (counted in ``reward_error``); a reward that raises is a bug and
    propagates, so veRL marks the group failed instead of training on a silent 0."""
    return reward_fn(trajectory, example, db)


def breakdown_to_json(breakdown: RewardBreakdown) -> dict[str, Any]:
    """A breakdown as plain JSON (what travels through Ray and TransferQueue).

    >>> from agents.types import RewardBreakdown
    >>> breakdown_to_json(RewardBreakdown(1.2, {"exec": 1.0}, {"full": 1.2}))
    {'total': 1.2, 'components': {'exec': 1.0}, 'tracks': {'full': 1.2}, 'error': None, 'flags': []}
    """
    return {
        "total": float(breakdown.total),
        "components": {str(k): float(v) for k, v in breakdown.components.items()},
        "tracks": {str(k): float(v) for k, v in breakdown.tracks.items()},
        "error": breakdown.error,
        "flags": [str(f) for f in breakdown.flags],
    }


def breakdown_from_json(data: Mapping[str, Any]) -> RewardBreakdown:
    from agents.types import RewardBreakdown

    return RewardBreakdown(
        total=float(data["total"]),
        components=dict(data.get("components") or {}),
        tracks=dict(data.get("tracks") or {}),
        error=data.get("error"),
        flags=tuple(data.get("flags") or ()),
    )


BASE_INFO_KEYS = ("score", "exec", "reward_error")


def extra_info_keys(metric: str | None = None) -> list[str]:
    """The ``reward_extra_info`` keys every output carries: the same fixed set for every
    row of a run, because veRL stacks them per key across a batch.

    ``score`` (total), ``exec`` (the execution component, which dynamic sampling reads by
    default), ``reward_error`` (1 when the reward could not be computed), plus a
    dynamic-sampling ``metric`` naming another component. Per-component and per-track
    values stay in ``extra_fields["sqlagent_reward"]`` (logged per role by the trainer).

    >>> extra_info_keys("format")
    ['score', 'exec', 'reward_error', 'format']
    """
    keys = list(BASE_INFO_KEYS)
    if metric and metric not in keys and metric != "total":
        keys.append(metric)
    return keys


def flat_extra_info(breakdown: Mapping[str, Any], keys: Sequence[str]) -> dict[str, float]:
    """One output's ``reward_extra_info``: floats under exactly ``keys``.

    >>> b = {"total": 2.5, "components": {"exec": 1.0, "format": 0.5}, "tracks": {"full": 2.5}, "error": None}
    >>> flat_extra_info(b, extra_info_keys("format"))
    {'score': 2.5, 'exec': 1.0, 'reward_error': 0.0, 'format': 0.5}
    """
    components = breakdown.get("components", {})
    values: dict[str, float] = {}
    for key in keys:
        if key == "score":
            values[key] = float(breakdown["total"])
        elif key == "reward_error":
            values[key] = 1.0 if breakdown.get("error") else 0.0
        elif key in components:
            values[key] = float(components[key])
        elif key == "exec" and breakdown.get("error"):
            values[key] = 0.0  # a failed reward carries no components; it is counted in reward_error
        else:
            raise ValueError(
                f"reward breakdown has no component {key!r} (components: {sorted(components)}); "
                "set algorithm.dynamic_sampling.metric to one of them or to 'total'"
            )
    return values


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: str,
    extra_info: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> dict[str, float]:
    """veRL's custom reward function signature; returns ``{"score": total, ...}``.

    veRL's reward managers merge the output's extra fields into ``extra_info``; the
    project's agent loop put the episode's breakdown there. Rows that did not come from
    that agent loop cannot be scored from text alone (the reward needs the episode's
    turns and database), so they fail with an explanation.
    """
    breakdown = (extra_info or {}).get(REWARD_KEY)
    if not isinstance(breakdown, Mapping) or "total" not in breakdown:
        raise ValueError(
            f"row from data source {data_source!r} carries no '{REWARD_KEY}' breakdown: the project's rewards "
            "are computed inside its agent loop; set actor_rollout_ref.rollout.agent.default_agent_loop=sqlagent "
            "and agent_name=sqlagent in the data rows"
        )
    total = float(breakdown["total"])
    if math.isnan(total):
        raise ValueError(f"reward total is NaN for data source {data_source!r}: {breakdown}")
    return flat_extra_info(breakdown, extra_info_keys())
