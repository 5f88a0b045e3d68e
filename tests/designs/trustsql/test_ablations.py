"""TRUST-SQL's protocol variants (designs/trustsql/README.md "Ablations"): §3.1's EC and EGC,
App. E.3's ReAct baseline, each as its one command line composes it, driven through an
episode on the test database."""

from __future__ import annotations

import pytest

from agents.types import Example
from designs.trustsql.reward import format_reward
from tests.helpers.ablations import ablation_agent
from tests.helpers.agent_db import COUNT_SQL
from tests.helpers.agent_scripts import call, play
from tests.helpers.schools import make_db
from tests.helpers.tiny_model import tiny_tokenizer
from training.rollout import RolloutLimits
from training.supervised.demonstrations import get_script, record_demonstrations

THINK = "<think>t</think>"
TABLES = "SELECT name FROM sqlite_master WHERE type = 'table'"
EXPLORE = THINK + "<action>explore_schema</action>" + call("execute_sql_query", db_id="schools", sql=TABLES)
PROPOSE = (
    THINK + '<action>propose_schema</action><schema>{"tables": ["schools"], "columns": {"schools": ["city"]}}</schema>'
)
GENERATE = THINK + "<action>generate_sql</action>" + call("execute_sql_query", db_id="schools", sql=COUNT_SQL)
CONFIRM = THINK + f"<action>confirm_answer</action><answer>```sql\n{COUNT_SQL}\n```</answer>"
REACT_CALL = THINK + call("execute_sql_query", db_id="schools", sql=TABLES)
REACT_ANSWER = THINK + f"<answer>```sql\n{COUNT_SQL}\n```</answer>"


def test_ec_explores_then_confirms_without_a_generate_turn(example, db) -> None:
    """§3.1's EC: the agent queries metadata and submits its SQL directly - no generate turn
    to run the candidate first, no propose checkpoint - with a two-phase prompt of its own."""
    episode = ablation_agent("trustsql", ["agent.protocol=ec"]).start(example, db)
    system = episode.messages[0]["content"]
    assert "two phases" in system and "generate_sql" not in system and "propose" not in system.lower()
    steps = play(episode, [EXPLORE, CONFIRM])
    assert [s.phase for s in steps] == ["explore_schema", "confirm_answer"] and all(s.format_ok for s in steps)
    result = episode.result()
    assert result.final_sql == COUNT_SQL and result.end_reason == "answer" and result.flags["protocol"] == "ec"
    assert format_reward(result, all_actions=True) == 0.1  # every action of EC occurred
    paper = ablation_agent("trustsql").start(example, db)  # the paper's protocol refuses the same turns
    assert [s.format_ok for s in play(paper, [EXPLORE, CONFIRM])] == [True, False]


def test_ec_refuses_the_other_phases_and_an_answer_before_exploring(example, db) -> None:
    agent = ablation_agent("trustsql", ["agent.protocol=ec"])
    for turn, reason in ((GENERATE, "unknown action 'generate_sql'"), (PROPOSE, "unknown action 'propose_schema'")):
        step = agent.start(example, db).step(turn)
        assert not step.format_ok and reason in step.format_reason and "two formats" in step.observations[0]["content"]
    early = agent.start(example, db).step(CONFIRM)
    assert not early.format_ok and "confirm_answer needs an earlier valid explore_schema" in early.format_reason
    assert "explore the schema before you confirm an answer" in early.observations[0]["content"]


@pytest.mark.parametrize("overrides", [["agent.protocol=egc"], ["agent.propose_phase=false"]])
def test_egc_must_run_the_query_before_confirming(example, db, overrides: list[str]) -> None:
    """§3.1's EGC: a generate turn executes the candidate before the answer; no propose."""
    agent = ablation_agent("trustsql", overrides)
    assert agent.protocol == "egc" and agent.omitted_phases == ("propose_schema",)
    episode = agent.start(example, db)
    assert "three phases" in episode.messages[0]["content"]
    steps = play(episode, [EXPLORE, CONFIRM, GENERATE, CONFIRM])
    assert [s.format_ok for s in steps] == [True, False, True, True]
    assert "confirm_answer needs an earlier valid generate_sql" in steps[1].format_reason
    result = episode.result()
    assert result.final_sql == COUNT_SQL and result.flags["protocol"] == "egc" and result.flags["without_propose"]


def test_react_has_no_phases_only_thought_and_action(example, db) -> None:
    """App. E.3's ReAct-US: reasoning, then a tool call or the answer; no action names, no
    order, the same tool and turn budget (15 at inference)."""
    agent = ablation_agent("trustsql", ["agent.protocol=react"], inference=True)
    episode = agent.start(example, db)
    system = episode.messages[0]["content"]
    assert "<action>" not in system and "propose" not in system.lower() and "phase" not in system
    assert "execute_sql_query" in system and episode.max_turns == 15
    steps = play(episode, [REACT_CALL, REACT_ANSWER])
    assert [s.phase for s in steps] == ["tool_call", "confirm_answer"] and all(s.format_ok for s in steps)
    assert "schools" in steps[0].observations[0]["content"]
    result = episode.result()
    assert result.final_sql == COUNT_SQL and result.flags["protocol"] == "react" and result.flags["no_schema_span"]
    at_once = agent.start(example, db)
    assert at_once.step(REACT_ANSWER).done  # no order: answering at once is a valid turn
    neither = agent.start(example, db).step(THINK + "Not sure yet.")
    assert not neither.format_ok and "exactly one of a tool call and an <answer>" in neither.format_reason
    assert "<think>" in neither.observations[0]["content"] and "<action>" not in neither.observations[0]["content"]


def test_ec_demonstrations_leave_out_the_phases_ec_lacks(tmp_path) -> None:
    """The warm start's (and SFT replay's) four-phase script plays as explore -> confirm."""
    db = make_db(tmp_path / "schools.sqlite")
    examples = [
        Example(
            id="q1",
            db_id="schools",
            db_path=str(db),
            question="How many schools are there?",
            evidence="",
            gold_sql="SELECT COUNT(*) FROM schools",
            gold_tables=("schools",),
            gold_columns=(),
        )
    ]
    limits = RolloutLimits(
        max_response_tokens=4000, max_tokens_per_turn=400, max_prompt_tokens=8000, max_context_tokens=12000
    )
    agent = ablation_agent("trustsql", ["agent.protocol=ec", "agent.max_turns=4"])
    demos = record_demonstrations(agent, examples, tiny_tokenizer(), limits, get_script("trustsql"))
    assert demos.dropped == {} and len(demos.trajectories) == 1
    assert [t.phase for t in demos.trajectories[0].result.turns] == ["explore_schema", "confirm_answer"]
