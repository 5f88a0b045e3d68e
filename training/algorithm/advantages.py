"""From rewards to advantages: GRPO, TRUST-SQL's two-track advantages, dynamic sampling.

Pure tensor functions. Sequence-level advantages are ``[n]`` tensors (one per trajectory);
the engine broadcasts them onto token masks with ``token_advantages``. Group statistics
come from veRL's ``core_algos.compute_grpo_outcome_advantage`` (runs on CPU), so the
local and verl engines normalise identically (unbiased std, ``(r - mean) / (std + eps)``;
a group of one gets mean 0 and std 1, as in veRL).

Groups: a trajectory's group key is its question, or (question, role) for DualSQL, whose
linker and generator trajectories of one question form two separate groups
(``group_keys``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from tools.errors import ConfigError
from tools.plugins import DESIGN_GROUP, Registry

if TYPE_CHECKING:  # torch is imported where tensors are made: the config lists estimators without it
    import torch


@dataclass(frozen=True)
class AdvantageOptions:
    """The values an estimator needs (not the whole config)."""

    epsilon: float = 1e-6
    norm_by_std: bool = True
    clamp: float | None = None
    schema_track: str = "schema"


TrackScores = Mapping[str, "torch.Tensor"]  # track name -> [n] scalar rewards
Estimator = Callable[[TrackScores, Sequence[str], AdvantageOptions], "dict[str, torch.Tensor]"]

ESTIMATORS: Registry[Estimator] = Registry("advantage estimator", plugins=DESIGN_GROUP)


def register_estimator(name: str, replace: bool = False) -> Callable[[Estimator], Estimator]:
    """Decorator: an advantage estimator ``(tracks, group keys, options) -> {track: [n]}``;
    ``advantage.estimator=<name>`` then picks it (the config reads this registry)."""
    return ESTIMATORS.register(name, replace=replace)


def get_estimator(name: str) -> Estimator:
    """The registered estimator ``name`` (``grpo`` or ``two_track``); lists names if unknown."""
    return ESTIMATORS.get(name)


def group_keys(example_ids: Sequence[str], roles: Sequence[str], group_by: str) -> list[str]:
    """One key per trajectory: ``question`` -> example id; ``role`` -> ``id:role``.

    >>> group_keys(["q1", "q1", "q2"], ["linker", "generator", "agent"], "role")
    ['q1:linker', 'q1:generator', 'q2:agent']
    """
    if group_by == "question":
        return list(example_ids)
    if group_by == "role":
        return [f"{e}:{r}" for e, r in zip(example_ids, roles, strict=True)]
    raise ConfigError(f"advantage.group_by={group_by!r}; choose role or question")


def grpo_advantages(
    scores: torch.Tensor,  # [n]
    groups: Sequence[str],
    epsilon: float = 1e-6,
    norm_by_std: bool = True,
) -> torch.Tensor:  # [n]
    """Group-normalised scalar advantages via veRL's GRPO outcome advantage."""
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    if scores.dim() != 1 or scores.shape[0] != len(groups):
        raise ValueError(f"scores {tuple(scores.shape)} and {len(groups)} group keys must match")
    if scores.shape[0] == 0:
        return scores.clone().float()
    token_rewards = scores.detach().float().unsqueeze(-1)  # [n, 1]
    ones = token_rewards.new_ones(token_rewards.shape)  # [n, 1]
    index = np.array(list(groups), dtype=object)
    adv, _ = compute_grpo_outcome_advantage(
        token_rewards, ones, index, epsilon=epsilon, norm_adv_by_std_in_grpo=norm_by_std
    )
    return adv.squeeze(-1)  # [n]


def _clamp(adv: torch.Tensor, bound: float | None) -> torch.Tensor:
    return adv if bound is None else adv.clamp(-bound, bound)


@register_estimator("grpo")
def grpo_estimator(tracks: TrackScores, groups: Sequence[str], opts: AdvantageOptions) -> dict[str, torch.Tensor]:
    """Single track: the ``full`` reward, group-normalised, applied to all policy tokens."""
    adv = grpo_advantages(tracks["full"], groups, opts.epsilon, opts.norm_by_std)
    return {"full": _clamp(adv, opts.clamp)}


@register_estimator("two_track")
def two_track_estimator(tracks: TrackScores, groups: Sequence[str], opts: AdvantageOptions) -> dict[str, torch.Tensor]:
    """Phase-aware GRPO (TRUST-SQL's): ``full`` and ``schema`` tracks normalised independently.

    The engine applies ``full`` to every policy token and ``schema`` only to policy tokens
    up to the end of the propose turn, with loss = lambda * PG_schema + PG_full.
    """
    if opts.schema_track not in tracks:
        raise ConfigError(
            f"advantage=two_track needs a reward with a {opts.schema_track!r} track, but the reward "
            f"gives tracks {sorted(tracks)}; use a reward that scores that track, or advantage=grpo"
        )
    full = grpo_advantages(tracks["full"], groups, opts.epsilon, opts.norm_by_std)
    schema = grpo_advantages(tracks[opts.schema_track], groups, opts.epsilon, opts.norm_by_std)
    return {"full": _clamp(full, opts.clamp), opts.schema_track: _clamp(schema, opts.clamp)}


def token_advantages(
    seq_adv: torch.Tensor,  # [n]
    mask: torch.Tensor,  # [n, resp_len]
) -> torch.Tensor:  # [n, resp_len]
    """Broadcast one advantage per trajectory onto its (0/1) token mask."""
    import torch

    return seq_adv.unsqueeze(-1).to(mask.dtype if mask.is_floating_point() else torch.float32) * mask


@dataclass(frozen=True)
class DynamicSamplingResult:
    """Which trajectories survive DAPO dynamic sampling, and how full the batch is."""

    keep: list[bool]  # per trajectory
    kept_groups: list[str]
    zero_variance_groups: list[str]
    target_groups: int

    @property
    def fill_rate(self) -> float:
        """Kept groups over the batch's group slots (unfilled slots are zero-masked)."""
        return len(self.kept_groups) / self.target_groups if self.target_groups else 0.0


def dynamic_sampling_filter(
    metric: Sequence[float | None],
    groups: Sequence[str],
    target_groups: int,
    min_std: float = 1e-6,
) -> DynamicSamplingResult:
    """Keep groups whose metric has std >= ``min_std``, at most ``target_groups`` of them.
    A None value is unknown (a flagged positive under ``flagged_positive_as_unknown``,
    ``training.algorithm.reward_trust.decision_values``): it takes no part in the std, and a
    group with fewer than two known values has none.

    Groups are considered in first-appearance order (the sampler's order), so the choice
    is deterministic. Groups beyond the target are dropped even if they vary.

    >>> r = dynamic_sampling_filter([1, 0, 1, 1, 0, 0], ["a", "a", "b", "b", "c", "c"], 2)
    >>> r.keep, r.zero_variance_groups, r.fill_rate
    ([True, True, False, False, False, False], ['b', 'c'], 0.5)
    """
    if len(metric) != len(groups):
        raise ValueError(f"{len(metric)} metric values for {len(groups)} group keys")
    members: dict[str, list[int]] = {}
    for i, key in enumerate(groups):
        members.setdefault(key, []).append(i)
    kept: list[str] = []
    flat: list[str] = []
    for key, idx in members.items():
        values = np.asarray([float(v) for i in idx if (v := metric[i]) is not None], dtype=np.float64)
        if len(values) < 2 or float(values.std()) < min_std:
            flat.append(key)
        elif len(kept) < target_groups:
            kept.append(key)
    kept_set = set(kept)
    return DynamicSamplingResult(
        keep=[key in kept_set for key in groups],
        kept_groups=kept,
        zero_variance_groups=flat,
        target_groups=target_groups,
    )
