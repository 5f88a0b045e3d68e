"""TRUST-SQL: four actions, the acknowledgement, the invalid-format message, the schema span."""

from __future__ import annotations

import json

import pytest

from agents import make_agent
from agents.types import TurnRecord
from designs.trustsql.agent import ACTIONS, schema_span_turn
from tests.helpers.agent_db import COUNT_SQL
from tests.helpers.agent_scripts import TRUSTSQL, call, play

THINK = "<think>t</think>"
EXPLORE = THINK + "<action>explore_schema</action>" + call("execute_sql_query", db_id="schools", sql="SELECT 1")
PROPOSE = (
    THINK + '<action>propose_schema</action><schema>{"tables": ["schools"], "columns": {"schools": ["city"]}}</schema>'
)
GENERATE = THINK + "<action>generate_sql</action>" + call("execute_sql_query", db_id="schools", sql=COUNT_SQL)
CONFIRM = THINK + f"<action>confirm_answer</action><answer>```sql\n{COUNT_SQL}\n```</answer>"


def test_correct_trajectory(example, db) -> None:
    episode = make_agent("trustsql").start(example, db)
    assert "CREATE TABLE" not in episode.messages[1]["content"] and "# Table" not in episode.messages[1]["content"]
    assert episode.stop == ("</tool_call>", "</schema>", "</answer>")
    steps = play(episode, TRUSTSQL["agent"])
    assert [s.phase for s in steps] == [
        "explore_schema",
        "explore_schema",
        "propose_schema",
        "generate_sql",
        "confirm_answer",
    ]
    assert all(s.format_ok for s in steps)
    tables = json.loads(steps[0].observations[0]["content"])
    assert ["schools"] in tables["rows"] and ["satscores"] in tables["rows"]
    assert "city" in steps[1].observations[0]["content"]  # PRAGMA table_info is allowed in this preset
    assert steps[2].observations[0]["content"] == "Schema acknowledged: 1 table(s), 1 column(s)."
    assert json.loads(steps[3].observations[0]["content"])["rows"] == [[2]]
    result = episode.result()
    assert result.final_sql == COUNT_SQL and result.end_reason == "answer"
    assert result.schema.tables == ("schools",) and result.schema.columns == ("schools.city",)
    assert result.flags == {"schema_span_turn": 2}
    assert [t.tool_outcome for t in result.turns] == ["ok", "ok", None, "ok", None]
    assert result.all_turns_valid


def test_acknowledgement_counts_tables_and_columns(example, db) -> None:
    episode = make_agent("trustsql").start(example, db)
    episode.step(EXPLORE)
    text = THINK + (
        '<action>propose_schema</action><schema>{"tables": ["schools", "satscores"], '
        '"columns": {"schools": ["id", "city"], "satscores": ["school_id"]}, '
        '"joins": ["schools.id = satscores.school_id"]}</schema>'
    )
    step = episode.step(text)
    assert step.observations[0]["content"] == "Schema acknowledged: 2 table(s), 3 column(s)."
    assert episode.schema.joins == ("schools.id = satscores.school_id",)


@pytest.mark.parametrize(
    "text, reason",
    [
        (
            "<action>explore_schema</action>" + call("execute_sql_query", db_id="schools", sql="SELECT 1"),
            "missing <think>",
        ),
        (THINK + THINK + "<action>confirm_answer</action><answer>SELECT 1</answer>", "exactly one <think>"),
        (THINK + call("execute_sql_query", db_id="schools", sql="SELECT 1"), "missing <action>"),
        (THINK + "<action>explore_schema</action><action>generate_sql</action>", "exactly one <action>"),
        (THINK + "<action>drop_everything</action>", "unknown action 'drop_everything'"),
        (THINK + "<action>explore_schema</action> SELECT 1", "explore_schema: expected exactly one <tool_call>"),
        (THINK + "<action>generate_sql</action><tool_call>{bad json</tool_call>", "not valid JSON"),
        (
            THINK + "<action>generate_sql</action>" + call("sqlite_query", db_id="schools", sql="SELECT 1"),
            "unknown tool",
        ),
        (THINK + "<action>propose_schema</action><schema>{tables: schools}</schema>", "schema is not valid JSON"),
        (THINK + '<action>propose_schema</action><schema>{"tables": "schools"}</schema>', "'tables' must be a list"),
        (THINK + "<action>propose_schema</action> schools.city", "propose_schema: missing <schema>"),
        (THINK + "<action>confirm_answer</action> SELECT 1", "confirm_answer: missing <answer>"),
        (THINK + "<action>confirm_answer</action><answer> </answer>", "holds no SQL"),
    ],
)
def test_invalid_turns_get_the_format_message(example, db, text: str, reason: str) -> None:
    episode = make_agent("trustsql", enforce_phase_order=False).start(example, db)  # each action may open
    step = episode.step(text)
    assert step.phase == "invalid" and not step.format_ok and not step.done
    assert reason in step.format_reason
    (message,) = step.observations
    assert message["content"].startswith("Invalid format:") and reason in message["content"]
    assert all(action in message["content"] for action in ACTIONS)  # the message lists the four formats
    assert episode.turns[0].phase == "invalid" and episode.turns[0].format_reason == step.format_reason


def test_tool_errors_keep_the_turn_valid(example, db) -> None:
    episode = make_agent("trustsql", enforce_phase_order=False).start(example, db)
    episode.step(THINK + "<action>generate_sql</action>" + call("execute_sql_query", db_id="schools", sql="SELEC 1"))
    episode.step(
        THINK
        + "<action>explore_schema</action>"
        + call("execute_sql_query", db_id="schools", sql="PRAGMA writable_schema = 1")
    )
    assert [t.format_ok for t in episode.turns] == [True, True]
    assert [t.tool_outcome for t in episode.turns] == ["syntax", "forbidden"]


def test_schema_span_flags(example, db) -> None:
    unordered = make_agent("trustsql", enforce_phase_order=False)  # episodes the phase order would refuse
    explore_only = unordered.start(example, db)
    play(explore_only, [EXPLORE, EXPLORE, CONFIRM])
    result = explore_only.result()
    assert result.flags == {"schema_span_turn": 1, "propose_fallback_explore": True}
    bare = unordered.start(example, db)
    play(bare, [CONFIRM])
    assert bare.result().flags == {"schema_span_turn": -1, "no_schema_span": True}
    last_valid = unordered.start(example, db)
    play(last_valid, [PROPOSE, EXPLORE, PROPOSE.replace('{"tables"', "{bad"), CONFIRM])
    ordered = make_agent("trustsql").start(example, db)
    play(ordered, [EXPLORE, EXPLORE] + [CONFIRM] * 8)  # confirm before generate is refused: the budget ends it
    result = ordered.result()
    assert result.end_reason == "turn_budget" and result.flags["propose_fallback_explore"] is True
    assert schema_span_turn(last_valid.turns) == (0, "propose")  # the broken propose is "invalid"


def test_turn_budgets(example, db) -> None:
    train = make_agent("trustsql").start(example, db)
    assert len(play(train, [EXPLORE] * 20)) == 10 and train.result().end_reason == "turn_budget"
    infer = make_agent("trustsql", inference=True).start(example, db)
    assert len(play(infer, ["garbage"] * 20)) == 15
    assert make_agent("trustsql", max_turns=3).max_turns == 3


def test_schema_prefill_is_one_synthetic_explore_turn_then_the_same_protocol(example, db) -> None:
    """The paper's Schema-Prefill (Table 2): the full schema, as the real tool's answer to a
    call on sqlite_master, sits in the prompt as an explore turn; the protocol is unchanged."""
    episode = make_agent("trustsql", schema_prefill=True).start(example, db)
    assistant, observation = episode.messages[-2:]
    assert assistant["role"] == "assistant" and "<action>explore_schema</action>" in assistant["content"]
    assert observation["role"] == "tool"
    assert "CREATE TABLE schools" in observation["content"] and "CREATE TABLE satscores" in observation["content"]
    steps = play(episode, [PROPOSE, GENERATE, CONFIRM])
    assert [s.phase for s in steps] == ["propose_schema", "generate_sql", "confirm_answer"]
    result = episode.result()
    assert result.flags["schema_prefill"] is True and result.final_sql == COUNT_SQL
    plain = make_agent("trustsql").start(example, db)
    assert [m["role"] for m in plain.messages] == ["system", "user"]


def test_schema_prefill_renders_through_the_rollout_driver(example, db) -> None:
    """The prefilled observation renders as observations do (tool role or wrapped user)."""
    from tests.helpers.tiny_model import tiny_tokenizer
    from training.rollout import RolloutLimits, SamplingParams
    from training.rollout.chat_segments import ChatSegments
    from training.rollout.episode import EpisodeRunner

    tok = tiny_tokenizer()
    episode = make_agent("trustsql", schema_prefill=True).start(example, db)
    runner = EpisodeRunner(episode, ChatSegments(tok), SamplingParams(), RolloutLimits(), example.id)
    prompt = tok.decode(runner.prompt_ids)
    assert "CREATE TABLE schools" in prompt
    assert prompt.count("<|im_start|>assistant\n<think>The full schema") == 1  # the synthetic turn, in the prompt
    assert prompt.endswith("<|im_start|>assistant\n")  # the model writes the next turn


def test_the_schema_span_ends_at_the_last_valid_propose_else_explore_turn() -> None:
    """The turn TRUST-SQL's schema track ends at, from the turn records alone."""

    def turn(index: int, phase: str, ok: bool = True) -> TurnRecord:
        return TurnRecord(index=index, phase=phase, text_chars=10, format_ok=ok)

    rest = [turn(2, "generate_sql"), turn(3, "confirm_answer")]
    assert schema_span_turn([turn(0, "explore_schema"), turn(1, "propose_schema"), *rest]) == (1, "propose")
    assert schema_span_turn([turn(0, "explore_schema"), turn(1, "invalid", ok=False), *rest]) == (
        0,
        "explore_fallback",
    )
    assert schema_span_turn([turn(0, "explore_schema"), turn(1, "explore_schema"), *rest]) == (1, "explore_fallback")
    assert schema_span_turn([turn(0, "generate_sql"), turn(1, "invalid", ok=False), *rest]) == (-1, "none")


# ----------------------------------------------------------------------------- phase order (§3.1)


@pytest.mark.parametrize(
    "turns, needed",
    [
        ([GENERATE], "propose_schema"),  # SQL generation before the propose checkpoint
        ([PROPOSE], "explore_schema"),  # a proposal with nothing explored
        ([EXPLORE, PROPOSE, CONFIRM], "generate_sql"),  # confirming a query never executed
        ([EXPLORE, GENERATE], "propose_schema"),
    ],
)
def test_an_out_of_order_turn_is_invalid_and_says_what_must_come_first(
    example, db, turns: list[str], needed: str
) -> None:
    """Propose is "a mandatory cognitive checkpoint … before SQL generation" (§3.1): by
    default each phase needs an earlier valid turn of the phase before it."""
    episode = make_agent("trustsql").start(example, db)
    steps = play(episode, turns)
    last = steps[-1]
    assert last.phase == "invalid" and not last.format_ok and not last.done
    assert last.format_reason.startswith("out of order") and needed in last.format_reason
    (message,) = last.observations
    assert message["content"].startswith("Out of order:") and needed in message["content"]
    assert episode.turns[-1].tool_outcome is None  # the out-of-order query never ran
    assert all(s.format_ok for s in steps[:-1])


def test_the_phases_in_order_and_explore_again_are_accepted(example, db) -> None:
    episode = make_agent("trustsql").start(example, db)
    steps = play(episode, [EXPLORE, PROPOSE, GENERATE, EXPLORE, PROPOSE, GENERATE, GENERATE, CONFIRM])
    assert all(s.format_ok for s in steps) and steps[-1].done
    assert episode.result().final_sql == COUNT_SQL


def test_phase_order_can_be_switched_off(example, db) -> None:
    episode = make_agent("trustsql", enforce_phase_order=False).start(example, db)
    steps = play(episode, [GENERATE, CONFIRM])
    assert [s.phase for s in steps] == ["generate_sql", "confirm_answer"] and all(s.format_ok for s in steps)


def test_the_prefilled_explore_turn_opens_the_way_to_propose(example, db) -> None:
    episode = make_agent("trustsql", schema_prefill=True).start(example, db)
    steps = play(episode, [PROPOSE, GENERATE, CONFIRM])
    assert all(s.format_ok for s in steps) and steps[-1].done


# ----------------------------------------------------------------------------- without propose (App. B.3)


def test_without_propose_the_agent_has_its_own_three_phase_prompt(example, db) -> None:
    """App. B.3's ablation: the workflow without the propose phase, with a prompt written
    for three phases (not the four-phase prompt with the propose lines removed)."""
    four = make_agent("trustsql").start(example, db)
    three = make_agent("trustsql", propose_phase=False).start(example, db)
    system = three.messages[0]["content"]
    assert "propose" not in system.lower() and "<schema>" not in system
    assert "three phases" in system and "four phases" in four.messages[0]["content"]
    assert system != four.messages[0]["content"].replace("propose", "")
    steps = play(three, [EXPLORE, GENERATE, CONFIRM])
    assert [s.phase for s in steps] == ["explore_schema", "generate_sql", "confirm_answer"]
    assert all(s.format_ok for s in steps)
    result = three.result()
    assert result.flags["without_propose"] is True and result.final_sql == COUNT_SQL
    rejected = make_agent("trustsql", propose_phase=False).start(example, db)
    step = rejected.step(PROPOSE)
    assert not step.format_ok and "unknown action 'propose_schema'" in step.format_reason
    assert "three formats" in step.observations[0]["content"]
    early = make_agent("trustsql", propose_phase=False).start(example, db)
    assert "explore_schema" in early.step(GENERATE).format_reason  # the order holds here too
