"""DualSQL's baselines (designs/dualsql/README.md "Ablations"): generator-only, the oracle
linker and single-turn, each as its one command line composes it, driven through its
episodes on the test database."""

from __future__ import annotations

import dataclasses

import pytest

from agents.types import Trajectory
from designs.dualsql.reward import DualSQLReward
from tests.helpers.ablations import ablation_agent
from tests.helpers.agent_db import JOIN_SQL
from tests.helpers.agent_scripts import DUALSQL, play
from tests.helpers.tiny_model import tiny_tokenizer
from tools.errors import ConfigError
from training.rollout import RolloutLimits
from training.supervised.demonstrations import get_script, record_demonstrations

ANSWER = DUALSQL["generator"][1]


def _episodes(agent, example, db, turns_by_episode):
    """Play every episode the agent starts for ``example``; the results in order."""
    results = []
    while (episode := agent.start(example, db, results)) is not None:
        play(episode, turns_by_episode[len(results)])
        results.append(episode.result())
    return results


def test_generator_only_has_no_linker_and_sees_the_full_schema(join_example, db) -> None:
    """§5.2.3's single-agent arm (DualSQL_sql): the multi-turn generator alone, trained and
    run on the full schema with a prompt that does not speak of a linked schema."""
    agent = ablation_agent("dualsql", ["agent.mode=generator_only"])
    assert agent.training_spec().roles == ("generator",)
    first = agent.start(join_example, db)
    assert first.role == "generator" and first.max_turns == 10
    prompt = first.messages[1]["content"]
    assert "enrollment" in prompt and "county" in prompt and "Linked schema" not in prompt  # the full schema
    assert "relevant part" not in first.messages[0]["content"] and "fts_search" in first.messages[0]["content"]
    results = _episodes(agent, join_example, db, [DUALSQL["generator"]])
    assert [r.role for r in results] == ["generator"] and results[0].final_sql == JOIN_SQL
    assert results[0].used_tool_successfully and results[0].schema is None
    assert "full_schema_fallback" not in results[0].flags


def test_the_oracle_linker_gives_the_generator_exactly_the_gold_schema(join_example, db) -> None:
    """§5.2.1, Table 3: the gold SQL's tables and columns stand in for the linker's answer."""
    agent = ablation_agent("dualsql", ["agent.mode=oracle_linker"])
    assert agent.training_spec().roles == ("generator",)
    episode = agent.start(join_example, db)
    assert episode.role == "generator" and episode.flags["oracle_linker"] is True
    assert set(episode.schema.tables) == {"schools", "satscores"}
    assert set(episode.schema.columns) == {"schools.id", "schools.city", "satscores.school_id", "satscores.avg_math"}
    prompt = episode.messages[1]["content"]
    assert "Linked schema" in prompt and "# Table: satscores" in prompt
    assert "enrollment" not in prompt and "county" not in prompt and "year" not in prompt  # nothing but the gold
    play(episode, DUALSQL["generator"])
    result = episode.result()
    assert result.final_sql == JOIN_SQL and result.end_reason == "answer"
    assert agent.start(join_example, db, [result]) is None


def test_the_oracle_reads_the_gold_sql_when_the_example_names_no_gold_schema(join_example, db) -> None:
    bare = dataclasses.replace(join_example, gold_tables=(), gold_columns=())
    episode = ablation_agent("dualsql", ["agent.mode=oracle_linker"]).start(bare, db)
    assert set(episode.schema.columns) == {"schools.id", "schools.city", "satscores.school_id", "satscores.avg_math"}
    with pytest.raises(ConfigError, match="no gold tables"):
        ablation_agent("dualsql", ["agent.mode=oracle_linker"]).start(
            dataclasses.replace(bare, gold_sql="SELECT 1"), db
        )


def test_single_turn_answers_at_once_without_tools(join_example, db) -> None:
    """§5.2.3's single-turn baseline: no linker, no tools, one answer turn on the full schema."""
    agent = ablation_agent("dualsql", ["agent.mode=single_turn"])
    episode = agent.start(join_example, db)
    system = episode.messages[0]["content"]
    assert episode.max_turns == 1 and episode.tool_schemas == [] and "<tools>" not in system
    assert "tool" not in system.lower() and "single reply" in system
    assert "enrollment" in episode.messages[1]["content"]
    step = episode.step(ANSWER)
    assert step.done and step.format_ok and episode.result().final_sql == JOIN_SQL
    refused = agent.start(join_example, db).step(DUALSQL["generator"][0])
    assert refused.done and not refused.format_ok and "unknown tool 'execute_sql'" in refused.format_reason


def test_the_reward_scores_a_generator_only_episode(join_example, db) -> None:
    agent = ablation_agent("dualsql", ["agent.mode=generator_only"])
    (result,) = _episodes(agent, join_example, db, [DUALSQL["generator"]])
    mask = [1] * 100
    trajectory = Trajectory("q1", "generator", [1, 2, 3], [7] * 100, mask, [0] * 100, result)
    breakdown = DualSQLReward()(trajectory, join_example, db)
    assert breakdown.components["task"] == pytest.approx(1.1)  # correct by REX, with a successful tool call


def test_an_unknown_mode_is_refused() -> None:
    with pytest.raises(ConfigError, match="dualsql mode must be one of dual, generator_only"):
        ablation_agent("dualsql", ["agent.mode=linker_only"])


@pytest.mark.parametrize("mode", ["generator_only", "oracle_linker", "single_turn"])
def test_the_rollout_driver_plays_one_generator_episode_per_question(mode: str, join_example) -> None:
    """Through the rollout driver (the warm start's path): one generator trajectory per
    question, a valid answer, no linker row."""
    limits = RolloutLimits(
        max_response_tokens=4000, max_tokens_per_turn=400, max_prompt_tokens=8000, max_context_tokens=12000
    )
    agent = ablation_agent("dualsql", [f"agent.mode={mode}"])
    demos = record_demonstrations(agent, [join_example], tiny_tokenizer(), limits, get_script("dualsql"))
    assert demos.dropped == {} and [t.role for t in demos.trajectories] == ["generator"]
    assert demos.trajectories[0].result.final_sql == JOIN_SQL and demos.trajectories[0].result.all_turns_valid
