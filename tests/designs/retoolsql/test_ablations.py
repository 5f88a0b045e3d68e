"""ReToolSQL's ablations (designs/retoolsql/README.md "Ablations"), each as its one command
line composes it, driven through an episode on the test database."""

from __future__ import annotations

from designs.retoolsql.agent import ReToolSQLAgent
from tests.helpers.ablations import ablation_agent
from tests.helpers.agent_db import COUNT_SQL
from tests.helpers.agent_scripts import RETOOLSQL, play
from tests.helpers.tiny_model import tiny_tokenizer
from training.rollout import RolloutLimits
from training.supervised.demonstrations import get_script, record_demonstrations

NO_TOOLS = ["+agent.tools=[]"]


def test_without_tools_the_prompt_is_its_own_and_the_answer_comes_in_one_turn(example, db) -> None:
    """§6.1, Table 4 "no tools": a prompt written without tools (not the tool prompt with the
    tool list emptied), and one answer turn."""
    agent = ablation_agent("retoolsql", NO_TOOLS)
    with_tools = ablation_agent("retoolsql").start(example, db)
    episode = agent.start(example, db)
    system = episode.messages[0]["content"]
    assert "<tools>" not in system and "tool call" not in system.lower() and "tool_call" not in system
    for name in ("sqlite_query", "sqlite_peek", "bm25_search_sqlite"):
        assert name in with_tools.messages[0]["content"] and name not in system
    assert "single reply" in system and "<final_answer>" in system
    assert episode.tool_schemas == [] and episode.max_turns == 1
    assert episode.messages[1] == with_tools.messages[1]  # the same schema, question and evidence
    steps = play(episode, [RETOOLSQL["agent"][1]])
    assert len(steps) == 1 and steps[0].done and steps[0].format_ok
    result = episode.result()
    assert result.final_sql == COUNT_SQL and result.end_reason == "answer"
    assert [t.phase for t in result.turns] == ["final_answer"] and not result.used_tool_successfully


def test_without_tools_a_tool_call_is_a_format_error_and_ends_the_episode(example, db) -> None:
    episode = ablation_agent("retoolsql", NO_TOOLS).start(example, db)
    step = episode.step(RETOOLSQL["agent"][0])
    assert not step.format_ok and "no tools are offered" in step.format_reason and step.done
    assert episode.result().final_sql is None and episode.result().turns[0].tool_name is None


def test_the_no_tools_turn_budget_leaves_the_tool_setting_alone() -> None:
    assert ReToolSQLAgent(max_turns=8).episode_turns == 8
    assert ReToolSQLAgent(max_turns=8, tools=()).episode_turns == 1


def test_the_warm_start_demonstrations_answer_in_the_one_turn(example) -> None:
    """Through the rollout driver: the demonstration script sees the one-turn budget and
    writes the final answer only; no tool schema reaches the chat template."""
    limits = RolloutLimits(
        max_response_tokens=4000, max_tokens_per_turn=400, max_prompt_tokens=8000, max_context_tokens=12000
    )
    agent = ablation_agent("retoolsql", NO_TOOLS)
    demos = record_demonstrations(agent, [example], tiny_tokenizer(), limits, get_script("retoolsql"))
    assert demos.dropped == {} and len(demos.trajectories) == 1
    result = demos.trajectories[0].result
    assert [t.phase for t in result.turns] == ["final_answer"] and result.all_turns_valid
