"""TRUST-SQL's rewards (README.md) on two tracks.

* ``full`` track = R_exec + R_format, applied to all policy tokens;
* ``schema`` track = R_schema, applied to the tokens up to the propose turn.

R_exec is 1.0 when the execution score under ``exec_metric`` is 1, 0.2 when the final
SQL executes but is wrong, else 0. R_format is 0.1 iff every turn was valid, all four
actions occur, and no environment feedback reported an invalid call or a SQL syntax
error. R_schema compares the proposed schema (``EpisodeResult.schema``, the last valid
propose) with the gold SQL's tables and columns under ``schema_mode``:

* ``sparse_coupled`` (default): 1 iff the table set and the ``table.column`` set both
  equal gold's, and only when R_exec = 1.0;
* ``uncoupled``: the same equality, whatever R_exec;
* ``f1`` / ``precision`` / ``recall`` / ``recall_then_precision``: dense scores, coupled
  (× [R_exec = 1.0]), over the elements tables ∪ ``table.column``s (so a ``COUNT(*)``
  question, with no gold column, still scores its tables). ``recall_then_precision`` is
  a project definition: 0.5·recall while recall < 1, then 0.5 + 0.5·precision — it is 1
  iff the proposal is exact and always prefers full recall.

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

ACTIONS: frozenset[str] = frozenset({"explore_schema", "propose_schema", "generate_sql", "confirm_answer"})
SCHEMA_MODES: tuple[str, ...] = (
    "sparse_coupled",
    "uncoupled",
    "f1",
    "precision",
    "recall",
    "recall_then_precision",
)
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


def format_reward(result: EpisodeResult) -> float:
    """R_format: 0.1 iff every turn valid, all four actions used, no bad feedback."""
    phases = {turn.phase for turn in result.turns} | (
        {"explore_schema"} if result.flags.get("schema_prefill") else set()
    )
    clean = all(turn.tool_outcome not in BAD_FEEDBACK for turn in result.turns)
    return 0.1 if result.all_turns_valid and ACTIONS <= phases and clean else 0.0


def schema_reward(
    mode: str,
    gold: tuple[frozenset[str], frozenset[str]],
    proposed: tuple[frozenset[str], frozenset[str]],
    r_exec: float,
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
    precision, recall, f1 = precision_recall_f1(gold[0] | gold[1], proposed[0] | proposed[1])
    if mode == "f1":
        return f1
    if mode == "precision":
        return precision
    if mode == "recall":
        return recall
    return 0.5 * recall if recall < 1.0 else 0.5 + 0.5 * precision


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
        r_format = format_reward(result)
        r_schema = schema_reward(
            self.schema_mode, gold_references(example, db), selection_sets(result.schema, db), r_exec
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
