"""Single-metric rewards for ablations: ``ex``, ``rex``, ``qatch``.

The total is the execution score of the final SQL under that metric (EX 1/0, REX score,
QATCH mean of CP, CR, TC); no format or length terms. A trajectory without final SQL
scores 0.

>>> from training.rewards import get_reward
>>> get_reward("rex").exec_metric, get_reward("qatch").component_names
('rex', ('exec',))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from agents.types import Example, RewardBreakdown, Trajectory
from tools.errors import ConfigError
from training.rewards.base import check_exec_metric, check_positive, execution, failure, guarded, register_reward

if TYPE_CHECKING:
    from tools import Database


@dataclass(frozen=True)
class ExecReward:
    """The execution score alone. ``exec_metric`` must name the reward's own metric (it
    is accepted so that every reward takes the same knob)."""

    exec_metric: str = "ex"
    timeout_s: float = 30.0

    metric = "ex"
    component_names = ("exec",)
    track_names = ()

    def __post_init__(self) -> None:
        check_exec_metric(self.exec_metric)
        if self.exec_metric != self.metric:
            raise ConfigError(
                f"reward {self.metric!r} scores with {self.metric}, but exec_metric={self.exec_metric!r}; "
                f"use reward={self.exec_metric} or exec_metric={self.metric}"
            )
        check_positive(f"{self.metric} timeout_s", self.timeout_s)

    @guarded
    def __call__(self, trajectory: Trajectory, example: Example, db: Database | None) -> RewardBreakdown:
        score, reason = execution(trajectory, example, db, self.metric, self.timeout_s)
        if score is None:
            return failure(reason or "execution failed")
        value = score.score if trajectory.result.final_sql is not None else 0.0
        return RewardBreakdown(total=value, components={"exec": value}, tracks={"full": value})


@register_reward("ex")
@dataclass(frozen=True)
class EXReward(ExecReward):
    """EX: 1 iff set(pred rows) == set(gold rows)."""

    exec_metric: str = "ex"
    metric = "ex"


@register_reward("rex")
@dataclass(frozen=True)
class REXReward(ExecReward):
    """REX score in [0, 1]."""

    exec_metric: str = "rex"
    metric = "rex"


@register_reward("qatch")
@dataclass(frozen=True)
class QATCHReward(ExecReward):
    """QATCH mean(CP, CR, TC)."""

    exec_metric: str = "qatch"
    metric = "qatch"
