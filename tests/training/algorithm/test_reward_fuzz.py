"""Every reward survives random and adversarial model text: no exception, a finite
total, and no error (the gold SQL is fine, so any error would be a reward bug)."""

from __future__ import annotations

import math
import random
from typing import Any

from agents.types import SchemaSelection
from rex.sql import extract_sql
from tests.helpers.reward_cases import example, trajectory, turn
from tests.helpers.turn_fuzz import finishes_within, looping_turn
from tests.rex.fuzz import random_strings
from training.algorithm.rewards import get_reward

REWARDS = {
    "composite": ("tool_call", "final_answer"),
    "think2sql": ("answer",),
    "trustsql": ("explore_schema", "propose_schema", "generate_sql", "confirm_answer"),
    "dualsql": ("tool_call", "answer"),
    "ex": ("answer",),
    "rex": ("answer",),
    "qatch": ("answer",),
}


def fuzz_schema(rng: random.Random, text: str) -> SchemaSelection | None:
    if rng.random() < 0.2:
        return None
    pieces = [p for p in text.replace("\n", ",").split(",")][:8]
    extra = ["students.*", "*", "", ".", "students.", ".name", "clubs.title", "NAME", '"students"."name"']
    return SchemaSelection(
        tables=tuple(pieces[:3]) + tuple(rng.sample(extra, 2)),
        columns=tuple(pieces) + tuple(rng.sample(extra, 3)),
    )


def test_rewards_never_raise_on_model_text(school_db: Any) -> None:
    rng = random.Random(7)
    texts = random_strings(2100, seed=3)
    rewards = {name: get_reward(name, timeout_s=0.5) for name in REWARDS}
    calls = 0
    for i, text in enumerate(texts):
        name = list(REWARDS)[i % len(REWARDS)]
        phases = REWARDS[name]
        sql = extract_sql(text) if rng.random() < 0.5 else (text if rng.random() < 0.8 else None)
        turns = [
            turn(
                j,
                rng.choice(phases + ("invalid",)),
                ok=rng.random() < 0.7,
                text=text,
                tool=rng.choice([None, "execute_sql"]),
                outcome=rng.choice([None, "ok", "syntax", "timeout"]),
            )
            for j in range(rng.randint(0, 5))
        ]
        role = rng.choice(["linker", "generator"]) if name == "dualsql" else "agent"
        traj = trajectory(
            sql,
            turns,
            schema=fuzz_schema(rng, text),
            role=role,
            end_reason=rng.choice(["answer", "turn_budget", "format_cutoff"]),
            policy_tokens=rng.randint(0, 40000),
        )
        out = rewards[name](traj, example(), school_db)
        calls += 1
        assert out.error is None, (name, text[:200], out.error)
        assert math.isfinite(out.total)
        assert "exec" in out.components and "full" in out.tracks
        assert all(math.isfinite(v) for v in out.components.values())
    assert calls == len(texts)


def test_think2sql_reward_reads_a_looping_turn_without_backtracking(school_db: Any) -> None:
    """Found by the turn fuzz: the format term used the paper's regex, which backtracks
    quadratically on a long looping turn that does not match (minutes at 2M characters,
    once per rollout). Now linear: the whole reward within the 30 s bound, in milliseconds."""
    text = looping_turn(2_000_000)
    traj = trajectory(extract_sql(text), [turn(0, "answer", ok=False, text=text)], policy_tokens=30000)
    with finishes_within(30):
        out = get_reward("think2sql", timeout_s=0.5)(traj, example(), school_db)
    assert out.error is None and out.components["format"] == 0.0
    assert out.components["tagcount"] == 0.0  # every tag repeats
