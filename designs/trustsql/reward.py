"""TRUST-SQL's rewards (README.md) on two tracks.

* ``full`` track = R_exec + R_format, applied to all policy tokens;
* ``schema`` track = R_schema, applied to the tokens up to the propose turn.

R_exec is 1.0 when the execution score under ``exec_metric`` is 1, 0.2 when the final
SQL executes but is wrong, else 0. R_format is App. F.2's: 0.1 iff every turn was valid
(one think block, one known action, its content block; with the agent's phase order, in
order), else 0. Two stricter conditions are options, off by default: ``require_all_actions``
(every action of the protocol occurs) and ``require_clean_feedback`` (no tool reply
reported a SQL syntax error, invalid arguments or an unknown tool). R_schema compares
the proposed schema (``EpisodeResult.schema``, the last valid propose) with the gold
SQL's tables and columns under ``schema_mode``:

* ``sparse_coupled`` (default): 1 iff the table set and the ``table.column`` set both
  equal gold's, and only when R_exec = 1.0;
* ``uncoupled``: the same equality, whatever R_exec;
* ``dense_coupled`` (§5.1 "Dense + Coupled"): full recall of tables and of columns as a
  hard gate (0 unless r_t = r_c = 1), then w_t·p_t + w_c·p_c with the table and column
  precisions and the weights ``dense_table_weight`` / ``dense_column_weight`` (sum 1), and
  only when R_exec = 1.0;
* ``f1`` / ``precision`` / ``recall``: project extras, coupled (× [R_exec = 1.0]), over the
  elements tables ∪ ``table.column``s (so a ``COUNT(*)`` question, with no gold column,
  still scores its tables).

``total`` equals the full track (the schema track is a separate advantage).

``schema_in_total`` > 0 is the paper's "w/ schema" baseline (Table 6): R_schema weighted
into the one terminal reward (total = R_exec + R_format + w·R_schema, w = 0.25) for plain
GRPO; the reward then has no separate schema track, so ``advantage=two_track`` refuses it
instead of counting R_schema twice. With Schema-Prefill (agent ``schema_prefill``) the
prefilled explore turn counts as the explore action for R_format.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from agents.types import EpisodeResult, Example, RewardBreakdown, Trajectory
from designs.trustsql.agent import PROTOCOLS
from tools.errors import ConfigError
from training.algorithm.rewards import (
    METRIC_MAX_RESULT_BYTES,
    METRIC_MAX_RESULT_ROWS,
    check_budget,
    check_exec_metric,
    check_positive,
    execution,
    failure,
    gold_references,
    guarded,
    precision_recall_f1,
    register_reward,
    selection_sets,
)

if TYPE_CHECKING:
    from tools import Backend

SCHEMA_MODES: tuple[str, ...] = ("sparse_coupled", "uncoupled", "dense_coupled", "f1", "precision", "recall")
BAD_FEEDBACK: frozenset[str] = frozenset({"syntax", "bad_arguments", "unknown_tool"})
"""Tool outcomes that count as "feedback reported an invalid format or SQL syntax error"."""


def exec_reward(score: float, executed: bool) -> float:
    """R_exec: 1.0 correct, 0.2 executes but wrong, 0 otherwise.

    >>> exec_reward(1.0, True), exec_reward(0.5, True), exec_reward(0.0, False)
    (1.0, 0.2, 0.0)
    """
    if score >= 1.0:
        return 1.0
    return 0.2 if executed else 0.0


def format_reward(result: EpisodeResult, all_actions: bool = False, clean_feedback: bool = False) -> float:
    """R_format (App. F.2): 0.1 iff every turn is valid; ``all_actions`` also needs every
    action of the episode's protocol, ``clean_feedback`` no bad tool feedback."""
    if not result.all_turns_valid:
        return 0.0
    if all_actions:
        phases = {turn.phase for turn in result.turns} | (
            {"explore_schema"} if result.flags.get("schema_prefill") else set()
        )
        protocol = result.flags.get("protocol") or ("egc" if result.flags.get("without_propose") else "epgc")
        if not set(PROTOCOLS[protocol]) <= phases:
            return 0.0
    if clean_feedback and any(turn.tool_outcome in BAD_FEEDBACK for turn in result.turns):
        return 0.0
    return 0.1


def _set_precision_recall(gold: frozenset[str], proposed: frozenset[str]) -> tuple[float, float]:
    """Precision and recall of one element kind; nothing to recall is full recall, nothing
    proposed is full precision."""
    common = len(gold & proposed)
    return (common / len(proposed) if proposed else 1.0), (common / len(gold) if gold else 1.0)


def dense_match(
    gold: tuple[frozenset[str], frozenset[str]],
    proposed: tuple[frozenset[str], frozenset[str]],
    table_weight: float,
    column_weight: float,
) -> float:
    """§5.1's graduated f_match: 0 unless table and column recall are both 1, then
    w_t·p_t + w_c·p_c.

    >>> g = (frozenset({"t"}), frozenset({"t.a", "t.b"}))
    >>> dense_match(g, (frozenset({"t", "u"}), frozenset({"t.a", "t.b"})), 0.5, 0.5)
    0.75
    >>> dense_match(g, (frozenset({"t"}), frozenset({"t.a"})), 0.5, 0.5)
    0.0
    """
    p_t, r_t = _set_precision_recall(gold[0], proposed[0])
    p_c, r_c = _set_precision_recall(gold[1], proposed[1])
    if r_t < 1.0 or r_c < 1.0:
        return 0.0
    return table_weight * p_t + column_weight * p_c


def schema_reward(
    mode: str,
    gold: tuple[frozenset[str], frozenset[str]],
    proposed: tuple[frozenset[str], frozenset[str]],
    r_exec: float,
    dense_weights: tuple[float, float] = (0.5, 0.5),
) -> float:
    """R_schema under ``mode`` from (tables, columns) of gold and of the proposal.

    >>> g = (frozenset({"t"}), frozenset({"t.a", "t.b"}))
    >>> schema_reward("sparse_coupled", g, g, r_exec=0.2), schema_reward("uncoupled", g, g, r_exec=0.2)
    (0.0, 1.0)
    >>> schema_reward("recall", g, (frozenset({"t"}), frozenset({"t.a"})), r_exec=1.0)
    0.6666666666666666
    """
    exact = float(gold[0] == proposed[0] and gold[1] == proposed[1])
    if mode == "uncoupled":
        return exact
    if r_exec < 1.0:
        return 0.0
    if mode == "sparse_coupled":
        return exact
    if mode == "dense_coupled":
        return dense_match(gold, proposed, *dense_weights)
    precision, recall, f1 = precision_recall_f1(gold[0] | gold[1], proposed[0] | proposed[1])
    if mode == "f1":
        return f1
    if mode == "precision":
        return precision
    return recall


@register_reward("trustsql")
@dataclass(frozen=True)
class TrustSQLReward:
    """Two tracks: ``full`` (R_exec + R_format) and ``schema`` (R_schema)."""

    exec_metric: str = "ex"
    schema_mode: str = "sparse_coupled"
    timeout_s: float = 30.0
    max_result_rows: int | None = METRIC_MAX_RESULT_ROWS
    max_result_bytes: int | None = METRIC_MAX_RESULT_BYTES
    schema_in_total: float = 0.0
    dense_table_weight: float = 0.5
    dense_column_weight: float = 0.5
    require_all_actions: bool = False
    require_clean_feedback: bool = False

    component_names = ("exec", "r_exec", "format", "schema")

    @property
    def track_names(self) -> tuple[str, ...]:
        return ("full",) if self.schema_in_total > 0 else ("full", "schema")

    def __post_init__(self) -> None:
        check_exec_metric(self.exec_metric)
        if not 0 <= self.schema_in_total:
            raise ConfigError(
                f"trustsql schema_in_total={self.schema_in_total}: >= 0 (0.25 = the 'w/ schema' baseline)"
            )
        if self.schema_mode not in SCHEMA_MODES:
            raise ConfigError(f"trustsql schema_mode={self.schema_mode!r}; use one of {', '.join(SCHEMA_MODES)}")
        weights = (self.dense_table_weight, self.dense_column_weight)
        if min(weights) < 0 or abs(sum(weights) - 1.0) > 1e-9:
            raise ConfigError(
                f"trustsql dense_table_weight={weights[0]}, dense_column_weight={weights[1]}: two weights >= 0 "
                "that sum to 1 (an exact proposal then scores 1)"
            )
        check_positive("trustsql timeout_s", self.timeout_s)
        check_budget("trustsql", self.max_result_rows, self.max_result_bytes)

    @guarded
    def __call__(self, trajectory: Trajectory, example: Example, db: Backend | None) -> RewardBreakdown:
        result = trajectory.result
        score, reason = execution(
            trajectory, example, db, self.exec_metric, self.timeout_s, self.max_result_rows, self.max_result_bytes
        )
        if score is None:
            return failure(reason or "execution failed", self.component_names, self.track_names)
        has_sql = result.final_sql is not None
        r_exec = exec_reward(score.score, score.pred_executed) if has_sql else 0.0
        r_format = format_reward(result, self.require_all_actions, self.require_clean_feedback)
        r_schema = schema_reward(
            self.schema_mode,
            gold_references(example, db),
            selection_sets(result.schema, db),
            r_exec,
            (self.dense_table_weight, self.dense_column_weight),
        )
        full = r_exec + r_format + self.schema_in_total * r_schema
        tracks = {"full": full} if self.schema_in_total > 0 else {"full": full, "schema": r_schema}
        return RewardBreakdown(
            total=full,
            components={
                "exec": score.score if has_sql else 0.0,
                "r_exec": r_exec,
                "format": r_format,
                "schema": r_schema,
            },
            tracks=tracks,
            flags=score.flags,
        )
