"""DualSQL: linker → generator chaining, every guardrail of designs/dualsql/README.md, the cut after a fence."""

from __future__ import annotations

import json
import sqlite3

import pytest

from agents import make_agent
from agents.types import EpisodeResult, SchemaSelection
from tests.helpers.agent_db import JOIN_SQL
from tests.helpers.agent_scripts import DUALSQL, LINKED, call, play

THINK = "<think>reason</think>\n"
EXEC = call("execute_sql", db_id="schools", sql="SELECT 1")


def _linker_result(schema: SchemaSelection | None) -> EpisodeResult:
    return EpisodeResult("linker", None, schema, [], "answer")


def test_linker_then_generator(join_example, db) -> None:
    agent = make_agent("dualsql")
    linker = agent.start(join_example, db)
    assert linker.role == "linker" and linker.max_turns == 5 and linker.stop == ("</tool_call>",)
    assert "# Table: satscores" in linker.messages[1]["content"]
    steps = play(linker, DUALSQL["linker"])
    assert [s.phase for s in steps] == ["tool_call", "answer"] and all(s.format_ok for s in steps)
    assert "Fresno" in steps[0].observations[0]["content"]
    linked = linker.result()
    assert linked.end_reason == "answer" and linked.role == "linker"
    assert set(linked.schema.tables) == {"schools", "satscores"}
    assert set(linked.schema.columns) == {"schools.id", "schools.city", "satscores.school_id", "satscores.avg_math"}
    assert linked.turns[0].tool_name == "fts_search" and linked.turns[0].tool_outcome == "ok"

    generator = agent.start(join_example, db, [linked])
    assert generator.role == "generator" and generator.max_turns == 10
    prompt = generator.messages[1]["content"]
    assert "# Table: satscores" in prompt and "enrollment" not in prompt and "county" not in prompt
    steps = play(generator, DUALSQL["generator"])
    assert [s.phase for s in steps] == ["tool_call", "answer"] and all(s.format_ok for s in steps)
    expected = sqlite3.connect(join_example.db_path).execute(JOIN_SQL).fetchall()
    assert json.loads(steps[0].observations[0]["content"])["rows"] == [list(row) for row in expected]
    assert steps[1].text == f"<think>Works.</think>\n```sql\n{JOIN_SQL}\n```"  # cut after the closing fence
    result = generator.result()
    assert result.final_sql == JOIN_SQL and result.end_reason == "answer" and result.role == "generator"
    assert result.schema == linked.schema and "full_schema_fallback" not in result.flags
    assert result.used_tool_successfully
    assert agent.start(join_example, db, [linked, result]) is None


@pytest.mark.parametrize("schema", [None, SchemaSelection(tables=("no_such_table",), columns=("no_such_table.x",))])
def test_generator_falls_back_to_the_full_schema(example, db, schema) -> None:
    generator = make_agent("dualsql").start(example, db, [_linker_result(schema)])
    assert "# Table: satscores" in generator.messages[1]["content"] and "enrollment" in generator.messages[1]["content"]
    play(generator, [THINK + "```sql\nSELECT 1\n```"])
    assert generator.result().flags["full_schema_fallback"] is True


@pytest.mark.parametrize(
    "text, reason",
    [
        (EXEC, "no non-empty <think>"),
        ("<think>   </think>" + EXEC, "no non-empty <think>"),
        (THINK + "I am not sure.", "found 0 tool call(s) and 0 code block(s)"),
        (THINK + "```sql\nSELECT 1\n```" + EXEC, "found 1 tool call(s) and 1 code block(s)"),
        (THINK + "```sql\nSELECT 1\n``` or ```sql\nSELECT 2\n```", "found 0 tool call(s) and 2 code block(s)"),
        (THINK + "<tool_call>" + EXEC, "found 2 tool call(s)"),
        (THINK + "```sql\nSELECT 1", "not closed"),
        (THINK + "<tool_call>{'name': 'execute_sql'}</tool_call>", "not valid JSON"),
        (THINK + call("drop_database", db_id="schools"), "unknown tool 'drop_database'"),
        (THINK + call("execute_sql", db_id="schools"), "invalid tool arguments"),
        (THINK + call("execute_sql", db_id="schools", sql="SELECT 1", bogus=1), "invalid tool arguments"),
        (THINK + "```sql\nSELECT 1\n```\n" + "Here is why this works. " * 20, "more than half the turn"),
    ],
)
def test_guardrails_cut_off_at_once(example, db, text: str, reason: str) -> None:
    episode = make_agent("dualsql").start(example, db)
    step = episode.step(text)
    assert step.done and not step.format_ok and step.phase == "invalid" and step.observations == ()
    assert reason in step.format_reason
    result = episode.result()
    assert result.end_reason == "format_cutoff" and result.turns[-1].format_reason == step.format_reason


def test_identical_repeat_is_cut_off(example, db) -> None:
    episode = make_agent("dualsql").start(example, db)
    assert episode.step(THINK + EXEC).format_ok
    other = episode.step("<think>different words, same call</think>" + EXEC)
    assert other.done and "identical repeat" in other.format_reason
    assert [t.format_ok for t in episode.result().turns] == [True, False]


def test_tool_errors_are_not_format_errors(example, db) -> None:
    episode = make_agent("dualsql").start(example, db)
    step = episode.step(THINK + call("execute_sql", db_id="schools", sql="SELECT nope FROM schools"))
    assert step.format_ok and not step.done and episode.turns[0].tool_outcome == "no_such_column"


def test_short_text_after_the_fence_passes_and_is_cut(example, db) -> None:
    episode = make_agent("dualsql").start(example, db)
    step = episode.step(THINK + "```sql\nSELECT 1\n```\nThat is all.")
    assert step.format_ok and step.text == THINK + "```sql\nSELECT 1\n```"
    assert episode.turns[0].text_chars == len(step.text)


def test_without_guardrails_the_episode_goes_on(example, db) -> None:
    episode = make_agent("dualsql", guardrails=False).start(example, db)
    step = episode.step(EXEC)
    assert not step.done and not step.format_ok and "no non-empty <think>" in step.observations[0]["content"]
    assert episode.step(THINK + "```sql\nSELECT 1\n```").done
    assert episode.result().end_reason == "answer"


def test_linker_answers_that_do_not_parse_are_flagged(example, db) -> None:
    episode = make_agent("dualsql").start(example, db)
    step = episode.step(THINK + "```json\n{schools: [city]}\n```")
    assert step.format_ok and step.done
    result = episode.result()
    assert result.schema is None and "not valid JSON" in result.flags["unparsable_answer"]


def test_linker_turn_budget(example, db) -> None:
    episode = make_agent("dualsql", linker_max_turns=2).start(example, db)
    steps = play(episode, [THINK + call("execute_sql", db_id="schools", sql=f"SELECT {i}") for i in range(5)])
    assert len(steps) == 2 and episode.result().end_reason == "turn_budget"


def test_linked_schema_json_forms(example, db) -> None:
    for body, tables in [
        (json.dumps(LINKED), {"schools", "satscores"}),
        (json.dumps(["Schools.City", "satscores.avg_math"]), {"schools", "satscores"}),
        (json.dumps({"columns": ["schools.city"]}), {"schools"}),
    ]:
        episode = make_agent("dualsql").start(example, db)
        episode.step(THINK + "```json\n" + body + "\n```")
        assert set(episode.result().schema.tables) == tables


def test_schema_format_renders_the_linked_schema_compactly(join_example, db) -> None:
    """``schema_format`` switches the serialiser for both roles; the linked restriction holds."""
    agent = make_agent("dualsql", schema_format="compact")
    linker = agent.start(join_example, db)
    full = make_agent("dualsql").start(join_example, db).messages[1]["content"]
    assert "# Table:" not in linker.messages[1]["content"] and len(linker.messages[1]["content"]) < len(full)
    linked = EpisodeResult("linker", None, SchemaSelection(("schools",), ("schools.city",)), [], "answer")
    prompt = agent.start(join_example, db, [linked]).messages[1]["content"]
    assert "city" in prompt and "satscores" not in prompt and "enrollment" not in prompt
