"""DualSQL's rewards (README.md): one reward function, two roles.

R = max(R_task, 0.1·R_f) + λ_l·R_l·R_f, negatives clipped to 0, where

* R_task — linker episodes (``trajectory.role == "linker"``): the schema-linking score
  of the linked schema S′ against the gold SQL's ``table.column`` set S*:
  1 if S′ = S*; 0.9 − max(0.2 − |S*∩S′|/|S′|, 0) if S* ⊆ S′; 0.7 − the same penalty if
  every gold table is linked; else 0.5·F1(S*, S′). Project choice: when the gold SQL
  reads no column (``SELECT COUNT(*) FROM t``), S* and S′ are the table sets instead,
  so such questions stay winnable.
  Generator episodes (``"generator"``): 1 + 0.1·R_tool when the SQL is correct — its
  execution score under ``exec_metric`` (default REX) is 1 — else 0; R_tool = 1 when
  the trajectory used a tool successfully.
* R_f — the guardrail format factor: 1 iff every turn passed the guardrails and the
  rollout was not cut off for format, else 0.
* R_l — DAPO soft overlong penalty on policy tokens (0 up to ``max_length − buffer``,
  −1 at ``max_length``; defaults 32,768 and 4,096), weighted by λ_l = 0.2.

Components: ``exec`` (generator: the execution score; linker, whose task runs no SQL:
the linking score, so group filters see the linker's signal), ``task``, ``format``
(R_f), ``length`` (R_l), and ``tool`` (generator) or ``precision`` / ``recall``
(linker). The single track ``full`` equals the total.
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
    dapo_overlong_penalty,
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

ROLES = ("linker", "generator")


def linking_reward(
    gold_columns: frozenset[str],
    linked_columns: frozenset[str],
    gold_tables: frozenset[str],
    linked_tables: frozenset[str],
) -> float:
    """The schema-linking task reward (recall first, a penalty for precision < 0.2).

    >>> g = frozenset({"t.a", "t.b"})
    >>> linking_reward(g, g, frozenset({"t"}), frozenset({"t"}))
    1.0
    >>> linking_reward(g, g | {"t.c"}, frozenset({"t"}), frozenset({"t"}))
    0.9
    >>> wide = g | {f"u.c{i}" for i in range(18)}   # precision 2/20 = 0.1: penalty 0.1
    >>> round(linking_reward(g, wide, frozenset({"t"}), frozenset({"t", "u"})), 10)
    0.8
    """
    if not gold_columns:
        gold_columns, linked_columns = gold_tables, linked_tables
    if linked_columns == gold_columns:
        return 1.0
    precision = len(gold_columns & linked_columns) / len(linked_columns) if linked_columns else 0.0
    penalty = max(0.2 - precision, 0.0)
    if gold_columns <= linked_columns:
        return 0.9 - penalty
    if gold_tables <= linked_tables:
        return 0.7 - penalty
    return 0.5 * precision_recall_f1(gold_columns, linked_columns)[2]


def guardrail_factor(result: EpisodeResult) -> float:
    """R_f: 1.0 iff every turn passed the guardrails and no format cut-off happened."""
    return 1.0 if result.all_turns_valid and result.end_reason != "format_cutoff" else 0.0


def combine(task: float, r_f: float, r_l: float, length_weight: float = 0.2) -> float:
    """max(R_task, 0.1·R_f) + λ_l·R_l·R_f, clipped below at 0.

    >>> combine(1.1, 1.0, 0.0), combine(0.0, 1.0, -1.0), combine(0.0, 0.0, -1.0)
    (1.1, 0.0, 0.0)
    >>> round(combine(1.0, 1.0, -0.5), 10)
    0.9
    """
    return max(0.0, max(task, 0.1 * r_f) + length_weight * r_l * r_f)


@register_reward("dualsql")
@dataclass(frozen=True)
class DualSQLReward:
    """Linker or generator reward by ``trajectory.role``; ``length_weight`` is λ_l."""

    exec_metric: str = "rex"
    length_weight: float = 0.2
    max_length: int = 32768
    buffer: int = 4096
    tool_bonus: float = 0.1
    timeout_s: float = 30.0
    max_result_rows: int | None = METRIC_MAX_RESULT_ROWS
    max_result_bytes: int | None = METRIC_MAX_RESULT_BYTES

    component_names = ("exec", "task", "format", "length", "tool", "precision", "recall")
    track_names = ()

    def __post_init__(self) -> None:
        check_exec_metric(self.exec_metric)
        if not 0 < self.buffer < self.max_length:
            raise ConfigError(
                f"dualsql buffer={self.buffer}, max_length={self.max_length}; need 0 < buffer < max_length "
                "(paper: 4096 and 32768)"
            )
        if not isinstance(self.length_weight, (int, float)) or self.length_weight < 0:
            raise ConfigError(f"dualsql length_weight={self.length_weight!r}; use a number >= 0 (paper: 0.2)")
        check_positive("dualsql timeout_s", self.timeout_s)
        check_budget("dualsql", self.max_result_rows, self.max_result_bytes)

    @guarded
    def __call__(self, trajectory: Trajectory, example: Example, db: Backend | None) -> RewardBreakdown:
        role = trajectory.role or trajectory.result.role
        if role not in ROLES:
            return failure(
                f"dualsql reward got role {role!r}; expected one of {', '.join(ROLES)}", self.component_names
            )
        r_f = guardrail_factor(trajectory.result)
        r_l = dapo_overlong_penalty(trajectory.num_policy_tokens, self.max_length, self.buffer)
        flags: tuple[str, ...] = ()
        if role == "linker":
            parts = self._linker(trajectory, example, db)
        else:
            scored = self._generator(trajectory, example, db)
            parts, flags = scored if isinstance(scored, tuple) else (scored, ())
        if isinstance(parts, str):
            return failure(parts, self.component_names)
        total = combine(parts["task"], r_f, r_l, self.length_weight)
        # every component on both roles (0 where it does not apply): logged rows share keys
        components = {**dict.fromkeys(self.component_names, 0.0), **parts, "format": r_f, "length": r_l}
        return RewardBreakdown(total=total, components=components, tracks={"full": total}, flags=flags)

    def _linker(self, trajectory: Trajectory, example: Example, db: Backend | None) -> dict[str, float] | str:
        gold_tables, gold_columns = gold_references(example, db)
        if not gold_tables and not gold_columns:
            return f"example {example.id!r}: no gold tables or columns to score the linker against"
        tables, columns = selection_sets(trajectory.result.schema, db)
        task = linking_reward(gold_columns, columns, gold_tables, tables)
        precision, recall, _ = precision_recall_f1(gold_columns or gold_tables, columns if gold_columns else tables)
        return {"exec": task, "task": task, "precision": precision, "recall": recall}

    def _generator(
        self, trajectory: Trajectory, example: Example, db: Backend | None
    ) -> tuple[dict[str, float], tuple[str, ...]] | str:
        score, reason = execution(
            trajectory, example, db, self.exec_metric, self.timeout_s, self.max_result_rows, self.max_result_bytes
        )
        if score is None:
            return reason or "execution failed"
        has_sql = trajectory.result.final_sql is not None
        correct = has_sql and score.score >= 1.0
        tool = float(trajectory.result.used_tool_successfully)
        task = 1.0 + self.tool_bonus * tool if correct else 0.0
        return {"exec": score.score if has_sql else 0.0, "task": task, "tool": tool}, score.flags
