"""ReToolSQL's composite reward (README.md): a weighted sum with maximum 3.8.

| term | signal (component value) | default weight |
|---|---|---|
| format | 1 iff every turn followed the template, the final turn has both annotations, an answer ended it (*) | 0.2 |
| syntax | 1 iff the final SQL executes | 0.5 |
| exec | execution score under ``exec_metric`` (EX 1/0, REX, QATCH mean) | 2.0 |
| tables | 1 iff the annotated tables ⊇ the gold SQL's tables | 0.5 |
| columns | Jaccard(annotated columns, gold columns), J(∅, ∅) = 1 | 0.5 |
| nonempty | 1 iff the final SQL returns ≥ 1 non-NULL cell | 0.1 |
| length | DAPO soft overlong penalty in [-1, 0] on policy tokens (0 up to 6,000, -1 at 8,000) | 0.1 |

(*) the episode ended with a final answer within ``max_turns``.

Components hold the unweighted signals; ``total`` is the weighted sum. A trajectory with
no final SQL scores 0 on every SQL and annotation term and on format (the length term
still applies).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agents.types import EpisodeResult, Example, RewardBreakdown, Trajectory
from tools.errors import ConfigError
from training.algorithm.rewards import (
    METRIC_MAX_RESULT_BYTES,
    METRIC_MAX_RESULT_ROWS,
    check_budget,
    check_exec_metric,
    check_positive,
    dapo_overlong_penalty,
    execution,
    failure,
    gold_references,
    guarded,
    jaccard,
    register_reward,
    selection_sets,
)

if TYPE_CHECKING:
    from tools import Backend

DEFAULT_WEIGHTS: dict[str, float] = {
    "format": 0.2,
    "syntax": 0.5,
    "exec": 2.0,
    "tables": 0.5,
    "columns": 0.5,
    "nonempty": 0.1,
    "length": 0.1,
}
TERMS = tuple(DEFAULT_WEIGHTS)


def weighted_total(components: Mapping[str, float], weights: Mapping[str, float]) -> float:
    """Σ weight × component over the composite's terms.

    >>> best = {"format": 1, "syntax": 1, "exec": 1, "tables": 1, "columns": 1, "nonempty": 1, "length": 0}
    >>> round(weighted_total(best, DEFAULT_WEIGHTS), 10)
    3.8
    """
    return float(sum(weights[name] * components[name] for name in TERMS))


def annotations_present(result: EpisodeResult) -> bool:
    """Whether the final turn carries ``<relevant_tables>`` and ``<relevant_columns>``
    (read from its text; the agent's verdict when the text was not kept)."""
    if not result.turns:
        return False
    last = result.turns[-1]
    if not last.text:
        return bool(last.format_ok)
    return "<relevant_tables>" in last.text and "<relevant_columns>" in last.text


def template_followed(result: EpisodeResult, max_turns: int) -> bool:
    """The format term: every turn valid, a final answer with both annotations, within
    ``max_turns``."""
    return (
        result.all_turns_valid
        and result.end_reason == "answer"
        and result.turns[-1].phase == "final_answer"
        and len(result.turns) <= max_turns
        and annotations_present(result)
    )


@register_reward("composite")
@dataclass(frozen=True)
class CompositeReward:
    """ReToolSQL's weighted sum; ``weights`` overrides some or all default weights,
    ``length_start`` / ``length_max`` place the overlong ramp (policy tokens)."""

    exec_metric: str = "ex"
    weights: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    length_start: int = 6000
    length_max: int = 8000
    max_turns: int = 8
    timeout_s: float = 30.0
    max_result_rows: int | None = METRIC_MAX_RESULT_ROWS
    max_result_bytes: int | None = METRIC_MAX_RESULT_BYTES

    component_names = TERMS
    track_names = ()

    def __post_init__(self) -> None:
        check_exec_metric(self.exec_metric)
        unknown = sorted(set(self.weights) - set(TERMS))
        if unknown:
            raise ConfigError(f"composite weights has unknown term(s) {unknown}; terms: {', '.join(TERMS)}")
        merged = {**DEFAULT_WEIGHTS, **{k: float(v) for k, v in self.weights.items()}}
        object.__setattr__(self, "weights", merged)
        if not 0 <= self.length_start < self.length_max:
            raise ConfigError(
                f"composite length_start={self.length_start}, length_max={self.length_max}; "
                "need 0 <= length_start < length_max (paper: 6000 and 8000)"
            )
        check_positive("composite max_turns", self.max_turns)
        check_positive("composite timeout_s", self.timeout_s)
        check_budget("composite", self.max_result_rows, self.max_result_bytes)

    @guarded
    def __call__(self, trajectory: Trajectory, example: Example, db: Backend | None) -> RewardBreakdown:
        result = trajectory.result
        score, reason = execution(
            trajectory, example, db, self.exec_metric, self.timeout_s, self.max_result_rows, self.max_result_bytes
        )
        if score is None:
            return failure(reason or "execution failed", TERMS)
        has_sql = result.final_sql is not None
        gold_tables, gold_columns = gold_references(example, db)
        linked = has_sql and annotations_present(result)
        pred_tables, pred_columns = selection_sets(result.schema, db) if linked else (frozenset(), frozenset())
        components: dict[str, Any] = {
            "format": float(has_sql and template_followed(result, self.max_turns)),
            "syntax": float(has_sql and score.pred_executed),
            "exec": score.score if has_sql else 0.0,
            "tables": float(linked and pred_tables >= gold_tables),
            "columns": jaccard(pred_columns, gold_columns) if linked else 0.0,
            "nonempty": float(has_sql and score.pred_nonempty),
            "length": dapo_overlong_penalty(
                trajectory.num_policy_tokens, self.length_max, self.length_max - self.length_start
            ),
        }
        total = weighted_total(components, self.weights)
        return RewardBreakdown(total=total, components=components, tracks={"full": total}, flags=score.flags)
