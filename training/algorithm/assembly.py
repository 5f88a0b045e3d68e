"""From scored episodes to what an update consumes, the same on both engines:
reward tracks -> group keys -> sequence advantages per track (a registered estimator), and
episodes -> per-track token masks (``training.algorithm.masks.track_masks``).

The local engine runs the whole assembly on one step's kept trajectories (``assemble``). The
veRL engine runs the same two halves where their inputs live: the agent loop, which has the
trajectories, makes each episode's track masks (``episode_masks``), and the trainer, which
has every row's reward record and group, makes the advantages (``sequence_advantages``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from agents.types import Trajectory
from training.algorithm.advantages import AdvantageOptions, get_estimator, group_keys
from training.algorithm.masks import track_masks


class AdvantageSettingsLike(Protocol):
    """The advantage settings both engines carry (``training.config.AdvantageConfig``; the
    veRL workers' ``AdvantageSettings``)."""

    @property
    def estimator(self) -> str: ...

    @property
    def epsilon(self) -> float: ...

    @property
    def norm_by_std(self) -> bool: ...

    @property
    def clamp(self) -> float | None: ...

    @property
    def group_by(self) -> str: ...

    @property
    def schema_track(self) -> str: ...


def advantage_options(settings: AdvantageSettingsLike) -> AdvantageOptions:
    """The values an estimator reads, from either engine's settings."""
    return AdvantageOptions(
        epsilon=settings.epsilon,
        norm_by_std=settings.norm_by_std,
        clamp=settings.clamp,
        schema_track=settings.schema_track,
    )


def _tracks_and_total(reward: Any) -> tuple[Mapping[str, float], float]:
    """A ``RewardBreakdown`` or its JSON record (the veRL rows carry the latter)."""
    if isinstance(reward, Mapping):
        return reward["tracks"], float(reward["total"])
    return reward.tracks, float(reward.total)


def track_scores(rewards: Sequence[Any]) -> dict[str, torch.Tensor]:
    """track -> ``[n]`` rewards: ``full`` always (the total where a reward gives no ``full``
    track, the RewardBreakdown contract), and every other track all rewards give."""
    pairs = [_tracks_and_total(r) for r in rewards]
    out = {"full": torch.tensor([float(tracks.get("full", total)) for tracks, total in pairs])}  # [n]
    shared = set.intersection(*(set(tracks) for tracks, _ in pairs)) if pairs else set()
    for name in sorted(shared - {"full"}):
        out[name] = torch.tensor([float(tracks[name]) for tracks, _ in pairs])  # [n]
    return out


def sequence_advantages(
    rewards: Sequence[Any], groups: Sequence[str], settings: AdvantageSettingsLike
) -> dict[str, torch.Tensor]:
    """track -> ``[n]`` advantages of the configured estimator over the rewards' tracks."""
    return get_estimator(settings.estimator)(track_scores(rewards), groups, advantage_options(settings))


def episode_masks(
    trajectories: Sequence[Trajectory], tracks: Sequence[str], settings: AdvantageSettingsLike, error_turns: bool
) -> tuple[dict[str, list[list[float]]], dict[str, float]]:
    """Per-track 0/1 token masks of each trajectory (unpadded) and the mask statistics:
    policy tokens, the error-turn mask where the agent asks for it, and the phase prefix of
    the schema track when ``tracks`` names it."""
    return track_masks(trajectories, tracks, settings.schema_track, error_turns)


@dataclass
class Assembly:
    """One step's update inputs: per-track advantages and masks of each trajectory."""

    advantages: dict[str, list[float]]  # track -> per trajectory
    masks: dict[str, list[list[float]]]  # track -> per trajectory, len(response_ids) each
    flags: dict[str, float] = field(default_factory=dict)


def assemble(
    trajectories: Sequence[Trajectory],
    rewards: Sequence[Any],
    groups: Sequence[str],
    settings: AdvantageSettingsLike,
    error_turns: bool,
) -> Assembly:
    """Advantages and masks for ``trajectories`` (one group key each) in one call."""
    advantages = sequence_advantages(rewards, groups, settings)
    masks, flags = episode_masks(trajectories, list(advantages), settings, error_turns)
    return Assembly({k: [float(x) for x in v] for k, v in advantages.items()}, masks, flags)


def trajectory_groups(trajectories: Sequence[Trajectory], group_by: str) -> list[str]:
    """Each trajectory's GRPO group key (its question, or question and role)."""
    return group_keys([t.example_id for t in trajectories], [t.role for t in trajectories], group_by)
