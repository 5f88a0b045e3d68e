"""Think2SQL's reward (README.md): 0.85·R_sql + 0.10·R_format + 0.05·R_tagcount.

R_sql is the execution score under ``exec_metric`` (the paper's arms: EX or QATCH;
default QATCH, the headline RL-QATCH run). R_format and R_tagcount read the text of the
single turn (``turns[0].text``). Components hold the unweighted signals.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from agents.types import Example, RewardBreakdown, Trajectory
from designs.think2sql.agent import follows_format
from tools.errors import ConfigError
from training.algorithm.rewards import (
    METRIC_MAX_RESULT_BYTES,
    METRIC_MAX_RESULT_ROWS,
    check_budget,
    check_exec_metric,
    check_positive,
    execution,
    failure,
    guarded,
    register_reward,
)

if TYPE_CHECKING:
    from tools import Backend

TAGS = ("<think>", "</think>", "<answer>", "</answer>")


def format_reward(text: str) -> float:
    """1.0 iff the whole text is ``<think>…</think>`` then ``<answer>…</answer>``.

    >>> format_reward("<think>a</think>\\n<answer>SELECT 1</answer>")
    1.0
    >>> format_reward("<answer>SELECT 1</answer>")
    0.0
    """
    return 1.0 if isinstance(text, str) and follows_format(text) else 0.0


def tag_count_reward(text: str) -> float:
    """0.25 for each of the four tags that occurs exactly once.

    >>> tag_count_reward("<think>a</think><answer>x</answer><answer>")
    0.75
    """
    if not isinstance(text, str):
        return 0.0
    return 0.25 * sum(text.count(tag) == 1 for tag in TAGS)


@register_reward("think2sql")
@dataclass(frozen=True)
class Think2SQLReward:
    """Weights ``w_sql``, ``w_format``, ``w_tags`` default to the paper's 0.85/0.10/0.05."""

    exec_metric: str = "qatch"
    w_sql: float = 0.85
    w_format: float = 0.10
    w_tags: float = 0.05
    timeout_s: float = 30.0
    max_result_rows: int | None = METRIC_MAX_RESULT_ROWS
    max_result_bytes: int | None = METRIC_MAX_RESULT_BYTES

    component_names = ("exec", "format", "tagcount")
    track_names = ()

    def __post_init__(self) -> None:
        check_exec_metric(self.exec_metric)
        for name in ("w_sql", "w_format", "w_tags"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or value < 0:
                raise ConfigError(f"think2sql {name}={value!r}; use a non-negative number")
        check_positive("think2sql timeout_s", self.timeout_s)
        check_budget("think2sql", self.max_result_rows, self.max_result_bytes)

    @guarded
    def __call__(self, trajectory: Trajectory, example: Example, db: Backend | None) -> RewardBreakdown:
        score, reason = execution(
            trajectory, example, db, self.exec_metric, self.timeout_s, self.max_result_rows, self.max_result_bytes
        )
        if score is None:
            return failure(reason or "execution failed", self.component_names)
        text = trajectory.result.turns[0].text if trajectory.result.turns else ""
        components = {
            "exec": score.score if trajectory.result.final_sql is not None else 0.0,
            "format": format_reward(text),
            "tagcount": tag_count_reward(text),
        }
        total = (
            self.w_sql * components["exec"]
            + self.w_format * components["format"]
            + self.w_tags * components["tagcount"]
        )
        return RewardBreakdown(total=total, components=components, tracks={"full": total}, flags=score.flags)
