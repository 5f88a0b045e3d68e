"""Numbers the local engine logs: rollout statistics per step and greedy EX on held-out data."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from training.algorithm.reward_trust import trust_metrics


def rollout_metrics(trajectories: Sequence[Any], rewards: Sequence[Any]) -> dict[str, float]:
    """Reward and every component (per role when there are several), EX on the batch, the
    suspect-positive and unscored rates (``training.algorithm.reward_trust``), lengths,
    turns, tool calls per tool, format-failure rate, end reasons."""
    out: dict[str, float] = {}
    if not trajectories:
        return out
    out["reward/total"] = _mean(r.total for r in rewards)
    for name in sorted({c for r in rewards for c in r.components}):
        out[f"reward/{name}"] = _mean(r.components.get(name, 0.0) for r in rewards)
    for name in sorted({t for r in rewards for t in r.tracks}):
        out[f"reward/track_{name}"] = _mean(r.tracks.get(name, 0.0) for r in rewards)
    out["reward/errors"] = float(sum(r.error is not None for r in rewards))
    roles = sorted({t.role for t in trajectories})
    if len(roles) > 1:
        for role in roles:
            out[f"reward/{role}/total"] = _mean(
                r.total for t, r in zip(trajectories, rewards, strict=True) if t.role == role
            )
    finals = [
        r for t, r in zip(trajectories, rewards, strict=True) if t.result.final_sql is not None or len(roles) == 1
    ]
    out["ex/batch"] = _mean(float(r.components.get("exec", 0.0) >= 1.0 - 1e-9) for r in finals) if finals else 0.0
    out.update(
        trust_metrics(
            [r.components.get("exec", 0.0) for r in finals], [r.flags for r in finals], [r.error for r in rewards]
        )
    )
    out["length/response"] = _mean(len(t.response_ids) for t in trajectories)
    out["length/policy_tokens"] = _mean(t.num_policy_tokens for t in trajectories)
    out["length/prompt"] = _mean(len(t.prompt_ids) for t in trajectories)
    out["episode/turns"] = _mean(len(t.result.turns) for t in trajectories)
    turns = [turn for t in trajectories for turn in t.result.turns]
    out["format/failure_rate"] = _mean(not turn.format_ok for turn in turns) if turns else 0.0
    tools = Counter(turn.tool_name for turn in turns if turn.tool_name)
    for name, count in sorted(tools.items()):
        out[f"tools/{name}"] = float(count)
    out["tools/calls_per_episode"] = sum(tools.values()) / len(trajectories)
    out["tools/error_rate"] = _mean(turn.tool_outcome != "ok" for turn in turns if turn.tool_name) if tools else 0.0
    for reason, count in Counter(t.result.end_reason for t in trajectories).items():
        out[f"episode/end_{reason}"] = count / len(trajectories)
    return out


def execution_accuracy(examples: Sequence[Any], trajectories: Sequence[Any]) -> dict[str, Any]:
    """Greedy EX: one prediction per example (``training.rollout.setup.final_sql``), BIRD EX."""
    from agents.types import final_sql
    from rex import ExecScorer
    from tools import get_database

    final: dict[str, str | None] = {}
    by_example: dict[str, list[Any]] = defaultdict(list)
    for t in trajectories:
        by_example[t.example_id].append(t)
    for ex in examples:
        final[ex.id] = final_sql(by_example.get(ex.id, []))
    scorer = ExecScorer()
    outcomes: Counter[str] = Counter()
    matches = executable = 0
    for ex in examples:
        score = scorer.score(get_database(ex.db_path), ex.gold_sql, final[ex.id], "ex")
        outcomes[score.outcome] += 1
        matches += int(score.ex_match)
        executable += int(score.pred_executed)
    n = len(examples)
    return {
        "ex": matches / n if n else 0.0,
        "n": n,
        "executable": executable / n if n else 0.0,
        "answered": sum(v is not None for v in final.values()) / n if n else 0.0,
        "outcomes": dict(outcomes),
    }


def _mean(values: Any) -> float:
    items = [float(v) for v in values]
    return float(np.mean(items)) if items else 0.0
