"""The rollout buffer of one step: kept trajectories, their track masks and advantages.

``build_buffer`` is the pipeline between rewards and the update, run in order:
group keys -> dynamic-sampling filter -> the shared assembly of advantages and track masks
(``training.algorithm.assembly``, the same one the veRL engine runs).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from agents.registry import training_spec
from agents.types import ERROR_TURN_MASK, TrainingSpec
from training.algorithm.advantages import dynamic_sampling_filter
from training.algorithm.assembly import assemble, trajectory_groups
from training.algorithm.reward_trust import decision_values
from training.engines.local.logprobs.shared_prefix import worth_packing
from training.engines.local.loss import PolicyBatch, build_policy_batch


@dataclass
class StepBuffer:
    """What the update consumes. Masks are per trajectory, one 0/1 list per track."""

    trajectories: list[Any]
    masks: dict[str, list[list[float]]]  # track -> per trajectory, len(response_ids) each
    advantages: dict[str, list[float]]  # track -> per trajectory
    fill_rate: float = 1.0
    groups_kept: int = 0
    zero_variance_groups: int = 0
    flags: dict[str, float] = field(default_factory=dict)
    unkept_varying: list[str] = field(default_factory=list)  # example ids: varied, but beyond the B kept
    unkept_flat: list[str] = field(default_factory=list)  # example ids: every group had zero variance

    @property
    def size(self) -> int:
        return len(self.trajectories)

    def length(self, i: int) -> int:
        t = self.trajectories[i]
        return len(t.prompt_ids) + len(t.response_ids)

    def mask_tensors(self, rows: Sequence[int]) -> dict[str, torch.Tensor]:
        """track -> [len(rows), max_resp_len] float masks (for whole-mini-batch totals)."""
        width = max(1, max(len(self.trajectories[i].response_ids) for i in rows))
        out: dict[str, torch.Tensor] = {}
        for track, per_row in self.masks.items():
            mask = torch.zeros((len(rows), width))  # [rows, resp_len]
            for j, i in enumerate(rows):
                if per_row[i]:
                    mask[j, : len(per_row[i])] = torch.tensor(per_row[i])
            out[track] = mask
        return out

    def policy_batch(self, rows: Sequence[int], pad_id: int, share: float | None = None) -> PolicyBatch:
        """The rows' tensors; packed behind their shared prompt prefix when that is cheaper
        (``share``: ``shared_prefix.model_share`` of the model, None: never)."""
        trajs = [self.trajectories[i] for i in rows]
        pack = worth_packing([t.prompt_ids for t in trajs], [self.length(i) for i in rows], share)
        return build_policy_batch(
            [t.prompt_ids for t in trajs],
            [t.response_ids for t in trajs],
            {track: [per_row[i] for i in rows] for track, per_row in self.masks.items()},
            {track: [values[i] for i in rows] for track, values in self.advantages.items()},
            pad_id,
            rows=rows,
            rollout_log_probs=[t.logprobs for t in trajs],
            pack=pack,
        )


def build_buffer(
    trajectories: Sequence[Any],
    rewards: Sequence[Any],
    cfg: Any,
    target_questions: int,
    spec: TrainingSpec | None = None,
) -> StepBuffer:
    """Filter, compute advantages and masks for the update (see the module docstring).
    ``spec``: the agent's training needs; None asks the configured agent (``cfg.agent``)."""
    adv_cfg, ds = cfg.advantage, cfg.algorithm.dynamic_sampling
    groups = trajectory_groups(trajectories, adv_cfg.group_by)
    roles = max(1, len({t.role for t in trajectories}))
    metric = decision_values(
        [_metric(r, ds.metric) for r in rewards],
        [_metric(r, "exec") for r in rewards],
        [getattr(r, "flags", ()) for r in rewards],
        ds.flagged_positive_as_unknown,
    )
    if ds.enable:
        result = dynamic_sampling_filter(metric, groups, target_questions * roles, ds.min_std)
        keep, fill = result.keep, result.fill_rate
    else:
        result = dynamic_sampling_filter(metric, groups, len(groups), ds.min_std)
        keep, fill = [True] * len(trajectories), 1.0
    kept = [i for i, k in enumerate(keep) if k]
    kept_ids = {trajectories[i].example_id for i in kept}
    flat_groups = set(result.zero_variance_groups)
    varying_ids = {t.example_id for t, g in zip(trajectories, groups, strict=True) if g not in flat_groups}
    unkept = list(dict.fromkeys(t.example_id for t in trajectories if t.example_id not in kept_ids))
    buffer = StepBuffer(
        trajectories=[trajectories[i] for i in kept],
        masks={},
        advantages={},
        fill_rate=fill,
        groups_kept=len(set(groups[i] for i in kept)),
        zero_variance_groups=len(result.zero_variance_groups),
        unkept_varying=[e for e in unkept if e in varying_ids],
        unkept_flat=[e for e in unkept if e not in varying_ids],
    )
    if not kept:
        return buffer
    if spec is None:  # the agent's own answer, from its effective options (its defaults included)
        spec = training_spec(cfg.agent.name, cfg.agent.options)
    kept_rewards, kept_groups = [rewards[i] for i in kept], [groups[i] for i in kept]
    assembly = assemble(buffer.trajectories, kept_rewards, kept_groups, adv_cfg, spec.needs(ERROR_TURN_MASK))
    buffer.advantages, buffer.masks, buffer.flags = assembly.advantages, assembly.masks, assembly.flags
    return buffer


RETURN_UNKEPT = ("none", "varying", "all")


class CandidatePool:
    """DAPO's "backup pool" in front of the epoch sampler (``DataSampler``).

    ``take`` serves questions handed back first, then the sampler's seeded order. After a
    dynamic-sampling step, ``give_back`` returns candidates that were drawn but not used:
    ``varying`` (the default) returns those whose group varied but fell beyond the B kept
    (they would have given a gradient); ``all`` also returns zero-variance ones (the policy
    may change on them later); ``none`` consumes every candidate drawn. The paper draws
    B*K "from a shuffled backup pool" and does not say more: this is the project's choice
    (``algorithm.dynamic_sampling.return_unkept``). The queue is part of the checkpoint state.

    >>> from training.engines.local.state import DataSampler
    >>> pool = CandidatePool(DataSampler(6, seed=0))
    >>> first = pool.take(3); pool.give_back(first[1:]); pool.take(2) == first[1:]
    True
    """

    def __init__(self, sampler: Any) -> None:
        self.sampler = sampler
        self.returned: list[int] = []

    def take(self, count: int) -> list[int]:
        out, self.returned = self.returned[:count], self.returned[count:]
        return out + self.sampler.take(count - len(out))

    def give_back(self, indices: Sequence[int]) -> None:
        self.returned.extend(i for i in indices if i not in self.returned)

    def state_dict(self) -> dict[str, Any]:
        return {**self.sampler.state_dict(), "returned": list(self.returned)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        state = dict(state)
        self.returned = [int(i) for i in state.pop("returned", [])]
        self.sampler.load_state_dict(state)


def unkept_to_return(buffer: StepBuffer, mode: str) -> list[str]:
    """Example ids a dynamic-sampling step hands back to the pool under ``mode``."""
    if mode == "none":
        return []
    return list(buffer.unkept_varying) + (list(buffer.unkept_flat) if mode == "all" else [])


def _metric(reward: Any, name: str) -> float:
    if name == "total":
        return float(reward.total)
    return float(reward.components.get(name, 0.0))
