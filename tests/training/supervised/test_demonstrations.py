"""Demonstrations: each design's script, played through the real agent and rollout
driver on a small SQLite file, is a perfect episode in that design's protocol."""

from __future__ import annotations

import dataclasses

import pytest

from agents import make_agent
from agents.types import Example
from tests.helpers.schools import QUESTIONS, make_db
from tests.helpers.tiny_model import tiny_tokenizer
from tools import get_database
from tools.errors import ConfigError
from training.algorithm.rewards import get_reward
from training.rollout import RolloutLimits
from training.supervised.demonstrations import get_script, record_demonstrations, register_script

AGENTS = {  # agent options and the reward of each recipe (its exec component must be full)
    "think2sql": ({}, "think2sql"),
    "retoolsql": ({"max_turns": 2, "num_few_shot": 0}, "composite"),
    "trustsql": ({"max_turns": 4}, "trustsql"),
    "dualsql": ({"linker_max_turns": 2, "generator_max_turns": 2}, "dualsql"),
}
LIMITS = RolloutLimits(
    max_response_tokens=4000, max_tokens_per_turn=400, max_prompt_tokens=8000, max_context_tokens=12000
)


@pytest.fixture(scope="module")
def examples(tmp_path_factory: pytest.TempPathFactory) -> list[Example]:
    db = make_db(tmp_path_factory.mktemp("db") / "schools.sqlite")
    return [
        Example(
            id=f"q{i}",
            db_id="schools",
            db_path=str(db),
            question=q,
            evidence="(a hint)",
            gold_sql=sql,
            gold_tables=t,
            gold_columns=c,
            split="train",
        )
        for i, (q, sql, t, c) in enumerate(QUESTIONS)
    ]


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_demonstrations_are_valid_episodes_with_full_reward(name: str, examples: list[Example]) -> None:
    options, reward_name = AGENTS[name]
    tok = tiny_tokenizer()
    demos = record_demonstrations(make_agent(name, **options), examples, tok, LIMITS, get_script(name))
    assert demos.dropped == {} and demos.kept_examples == len(examples)
    per_example = 2 if name == "dualsql" else 1
    assert len(demos.trajectories) == per_example * len(examples)
    reward = get_reward(reward_name)
    by_id = {ex.id: ex for ex in examples}
    for t in demos.trajectories:
        ex = by_id[t.example_id]
        assert t.result.end_reason == "answer" and t.result.all_turns_valid
        policy_text = tok.decode([i for i, m in zip(t.response_ids, t.response_mask, strict=True) if m])
        if t.role == "linker":
            assert t.result.schema is not None and set(t.result.schema.tables) == set(ex.gold_tables)
            continue
        assert t.result.final_sql.strip() == ex.gold_sql
        assert ex.gold_sql in policy_text
        assert reward(t, ex, get_database(ex.db_path)).components["exec"] == pytest.approx(1.0)


@pytest.mark.parametrize("name", ["retoolsql", "trustsql"])
def test_tool_results_are_real_observations_without_loss(name: str, examples: list[Example]) -> None:
    options, _ = AGENTS[name]
    tok = tiny_tokenizer()
    demos = record_demonstrations(make_agent(name, **options), examples[:1], tok, LIMITS, get_script(name))
    t = demos.trajectories[0]
    observed = tok.decode([i for i, m in zip(t.response_ids, t.response_mask, strict=True) if not m])
    assert '"row_count"' in observed or "rows" in observed  # the executor's JSON came back
    assert [turn.tool_outcome for turn in t.result.turns if turn.tool_name] == ["ok"] * sum(
        1 for turn in t.result.turns if turn.tool_name
    )


def test_scripts_fit_the_turn_budget(examples: list[Example]) -> None:
    ex = examples[0]
    assert len(get_script("retoolsql")(ex, "agent", 1)) == 1
    assert len(get_script("retoolsql")(ex, "agent", 8)) == 2
    four, three = get_script("trustsql")(ex, "agent", 10), get_script("trustsql")(ex, "agent", 3)
    assert [t.split("<action>")[1].split("<")[0] for t in four] == [
        "explore_schema",
        "propose_schema",
        "generate_sql",
        "confirm_answer",
    ]
    assert [t.split("<action>")[1].split("<")[0] for t in three] == [
        "explore_schema",
        "propose_schema",
        "confirm_answer",
    ]
    unordered = make_agent("trustsql", max_turns=3, enforce_phase_order=False)
    demos = record_demonstrations(unordered, examples, tiny_tokenizer(), LIMITS, get_script("trustsql"))
    assert demos.dropped == {} and all(len(t.result.turns) == 3 for t in demos.trajectories)
    # with the phase order, confirm needs a generate turn: 3 turns cannot reach an answer
    ordered = make_agent("trustsql", max_turns=3)
    demos = record_demonstrations(ordered, examples, tiny_tokenizer(), LIMITS, get_script("trustsql"))
    assert demos.trajectories == [] and sum(demos.dropped.values()) == len(examples)


def test_demonstrations_over_the_limits_are_dropped_and_counted(examples: list[Example]) -> None:
    tight = dataclasses.replace(LIMITS, max_tokens_per_turn=12)
    demos = record_demonstrations(make_agent("think2sql"), examples, tiny_tokenizer(), tight, get_script("think2sql"))
    assert demos.trajectories == [] and demos.kept_examples == 0
    assert sum(demos.dropped.values()) == len(examples)
    assert all(reason.startswith("agent:") for reason in demos.dropped)


def test_unknown_agent_and_missing_gold_sql_are_explained(examples: list[Example]) -> None:
    with pytest.raises(ConfigError, match="no demonstration script for agent 'mine'.*register_script"):
        get_script("mine")
    with pytest.raises(ConfigError, match="has no gold SQL"):
        get_script("think2sql")(dataclasses.replace(examples[0], gold_sql=""), "agent", 1)


def test_register_script_adds_a_design(examples: list[Example]) -> None:
    @register_script("think2sql_plain_test")
    def plain(ex: Example, role: str, max_turns: int) -> list[str]:
        return [f"<think>x</think><answer>{ex.gold_sql}</answer>"]

    assert get_script("think2sql_plain_test") is plain
    demos = record_demonstrations(make_agent("think2sql"), examples[:2], tiny_tokenizer(), LIMITS, plain)
    assert demos.kept_examples == 2


def test_sft_without_propose_replays_four_phase_traces_in_its_own_prompt(examples: list[Example]) -> None:
    """App. B.3's SFT-only ablation: the propose turns leave the trajectories and the rest is
    replayed under the three-phase prompt (agent ``propose_phase=false``), which the warm
    start's demonstrations follow too."""
    from training.supervised.dataset import replay

    tok, script = tiny_tokenizer(), get_script("trustsql")
    rows = [
        {"question_id": ex.id, "messages": [{"role": "assistant", "content": t} for t in script(ex, "agent", 4)]}
        for ex in examples
    ]
    three = make_agent("trustsql", max_turns=4, propose_phase=False)
    trajectories, dropped = replay(three, rows, {ex.id: ex for ex in examples}, tok, LIMITS)
    demos = record_demonstrations(three, examples, tok, LIMITS, script)
    assert dropped == {} and len(trajectories) == len(examples) and demos.dropped == {}
    for t in trajectories + demos.trajectories:
        assert [turn.phase for turn in t.result.turns] == ["explore_schema", "generate_sql", "confirm_answer"]
        prompt = tok.decode(t.prompt_ids)
        assert "three phases" in prompt and "propose" not in prompt.lower()
        assert "propose_schema" not in tok.decode(t.response_ids)
