"""ReToolSQL: the scripted correct trajectory, every format rule, BM25 few-shot."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from agents import make_agent
from agents.types import Example
from tests.helpers.agent_db import COUNT_SQL
from tests.helpers.agent_scripts import RETOOLSQL, call, play

SCRATCH = "<scratch_pad>intent: count</scratch_pad>"
QUERY = call("sqlite_query", db_id="schools", sql=COUNT_SQL)
ANNOTATED = "<relevant_tables>schools</relevant_tables><relevant_columns>schools.city</relevant_columns>"
FINAL = f"<final_answer>```sql\n{COUNT_SQL}\n```</final_answer>"


def test_correct_trajectory(example, db) -> None:
    episode = make_agent("retoolsql").start(example, db)
    assert episode.stop == ("</tool_call>", "</final_answer>")
    assert {s["function"]["name"] if "function" in s else s["name"] for s in episode.tool_schemas} == {
        "sqlite_query",
        "sqlite_peek",
        "bm25_search_sqlite",
    }
    steps = play(episode, RETOOLSQL["agent"])
    assert [s.phase for s in steps] == ["tool_call", "final_answer"]
    assert all(s.format_ok for s in steps) and steps[-1].done
    (obs,) = steps[0].observations
    assert obs["role"] == "tool" and json.loads(obs["content"])["rows"] == [[2]]
    result = episode.result()
    assert result.final_sql == COUNT_SQL and result.end_reason == "answer"
    assert result.schema.tables == ("schools",) and result.schema.columns == ("schools.city",)
    first, last = result.turns
    assert (first.tool_name, first.tool_outcome, first.tool_arguments["sql"]) == ("sqlite_query", "ok", COUNT_SQL)
    assert last.tool_name is None and last.text == RETOOLSQL["agent"][1]
    assert result.used_tool_successfully and result.all_turns_valid


def test_prompt_holds_schema_evidence_and_tools(example, db) -> None:
    system, user = make_agent("retoolsql").start(example, db).messages
    assert "sqlite_peek" in system["content"] and "<scratch_pad>" in system["content"]
    assert "# Table: schools" in user["content"] and "# Table: satscores" in user["content"]
    assert example.evidence in user["content"] and example.question in user["content"]


@pytest.mark.parametrize(
    "text, reason",
    [
        (QUERY, "missing <scratch_pad>"),
        (SCRATCH + SCRATCH + QUERY, "exactly one <scratch_pad>"),
        (SCRATCH + "I will think more.", "no tool call and no <final_answer>"),
        (SCRATCH + ANNOTATED + "<final_answer>SELECT 1" + QUERY, "not both"),
        (SCRATCH + "<tool_call>{not json}</tool_call>", "not valid JSON"),
        (SCRATCH + '<tool_call>{"arguments": {}}</tool_call>', "no string 'name'"),
        (SCRATCH + call("drop_table", db_id="schools"), "unknown tool 'drop_table'"),
        (SCRATCH + "<tool_call>" + QUERY, "exactly one <tool_call>"),  # nested opening tag
        (SCRATCH + QUERY.replace("</tool_call>", ""), "not closed"),  # unclosed: no stop string hit
        (QUERY.replace("</tool_call>", "") + SCRATCH, "must come before"),
        (SCRATCH + ANNOTATED + FINAL.replace("</final_answer>", ""), "found 1 and 0"),
        (SCRATCH + ANNOTATED + "<final_answer>   </final_answer>", "holds no SQL"),
    ],
)
def test_format_rules(example, db, text: str, reason: str) -> None:
    episode = make_agent("retoolsql").start(example, db)
    step = episode.step(text)
    assert step.phase == "invalid" and not step.format_ok and not step.done
    assert reason in step.format_reason
    (obs,) = step.observations
    assert obs["role"] == "tool" and reason in obs["content"]
    assert episode.turns[0].format_reason == step.format_reason


def test_scratch_pad_must_come_before_the_action_and_can_be_bounded(example, db) -> None:
    step = (
        make_agent("retoolsql")
        .start(example, db)
        .step(ANNOTATED + f"<final_answer>{SCRATCH}{COUNT_SQL}</final_answer>")
    )
    assert step.phase == "invalid" and "must come before" in step.format_reason
    bounded = make_agent("retoolsql", max_scratch_pad_chars=5).start(example, db)
    assert "longer than 5" in bounded.step(SCRATCH + QUERY).format_reason


@pytest.mark.parametrize(
    "annotations, reason",
    [
        ("", "missing <relevant_tables>"),
        ("<relevant_tables>schools</relevant_tables>", "missing <relevant_columns>"),
    ],
)
def test_final_answer_without_annotations_ends_but_fails_format(example, db, annotations: str, reason: str) -> None:
    episode = make_agent("retoolsql").start(example, db)
    step = episode.step(SCRATCH + annotations + FINAL)
    assert step.done and step.phase == "final_answer" and not step.format_ok and reason in step.format_reason
    result = episode.result()
    assert result.final_sql == COUNT_SQL and result.end_reason == "answer"


def test_text_after_the_stop_string_is_cut(example, db) -> None:
    episode = make_agent("retoolsql").start(example, db)
    step = episode.step(SCRATCH + QUERY + "\n<tool_response>hallucinated</tool_response>")
    assert step.format_ok and step.text == SCRATCH + QUERY


def test_tool_errors_are_observations_not_format_failures(example, db) -> None:
    episode = make_agent("retoolsql").start(example, db)
    step = episode.step(SCRATCH + call("sqlite_query", db_id="schools", sql="DELETE FROM schools"))
    assert step.format_ok and step.phase == "tool_call"
    assert episode.turns[0].tool_outcome == "forbidden"
    step = episode.step(SCRATCH + call("sqlite_query", db_id="schools", sql="SELEC nonsense"))
    assert episode.turns[1].tool_outcome == "syntax" and "syntax" in step.observations[0]["content"]


def test_turn_budget(example, db) -> None:
    episode = make_agent("retoolsql", max_turns=3).start(example, db)
    steps = play(episode, ["nonsense"] * 5)
    assert len(steps) == 3 and steps[-1].done and steps[-1].observations == ()
    result = episode.result()
    assert result.end_reason == "turn_budget" and result.final_sql is None and len(result.turns) == 3


def _pool() -> list[Example]:
    def ex(i: int, db_id: str, question: str) -> Example:
        return Example(id=f"t{i}", db_id=db_id, db_path="", question=question, gold_sql=f"SELECT {i}")

    return [
        ex(0, "schools", "How many schools are in Fresno county?"),  # same db: never used
        ex(1, "shops", "How many shops are in Fresno?"),
        ex(2, "films", "Which film has the longest runtime?"),
        ex(3, "hospitals", "How many hospitals are in Fresno?"),
        ex(4, "films", "List the directors of films."),
    ]


def test_few_shot_is_bm25_from_other_databases(example, db) -> None:
    agent = make_agent("retoolsql", few_shot_pool=_pool(), num_few_shot=2)
    shots = agent.retriever.retrieve(example, 2)
    assert [s.id for s in shots] == ["t1", "t3"]  # closest questions, never db_id "schools"
    user = agent.start(example, db).messages[1]["content"]
    assert "SELECT 1" in user and "SELECT 3" in user and "SELECT 0" not in user
    assert "How many schools are in Fresno county?" not in user
    none = make_agent("retoolsql", few_shot_pool=_pool(), num_few_shot=0).start(example, db).messages[1]["content"]
    assert "SELECT 1" not in none
    same_db_only = make_agent("retoolsql", few_shot_pool=_pool()[:1]).retriever.retrieve(example, 2)
    assert same_db_only == []
    assert make_agent("retoolsql").retriever.retrieve(replace(example, db_id="other"), 2) == []
