"""Think2SQL: one turn, the paper's fullmatch format verdict, gold-table schema scope."""

from __future__ import annotations

import pytest

from agents import make_agent
from tests.helpers.agent_db import COUNT_SQL
from tests.helpers.agent_scripts import THINK2SQL, play
from tools.errors import ConfigError


def test_correct_turn(example, db) -> None:
    episode = make_agent("think2sql").start(example, db)
    (step,) = play(episode, THINK2SQL["agent"])
    assert step.done and step.format_ok and step.phase == "answer" and step.observations == ()
    result = episode.result()
    assert result.final_sql == COUNT_SQL and result.end_reason == "answer" and result.role == "agent"
    (turn,) = result.turns
    assert turn.format_ok and turn.phase == "answer" and turn.text == THINK2SQL["agent"][0]
    assert turn.text_chars == len(THINK2SQL["agent"][0])
    assert make_agent("think2sql").start(example, db, [result]) is None


@pytest.mark.parametrize(
    "text, ok, sql",
    [
        (f"<answer>{COUNT_SQL}</answer>", False, COUNT_SQL),  # no think
        # the lazy .*? spans "a</think><think>b": the paper's regex accepts it (tag count catches it)
        (f"<think>a</think><think>b</think><answer>{COUNT_SQL}</answer>", True, COUNT_SQL),
        (f"<think>a</think> trailing prose <answer>{COUNT_SQL}</answer>", False, COUNT_SQL),
        (f"<think>a</think><answer>{COUNT_SQL}</answer> and more", False, COUNT_SQL),
        ("<think>no answer at all</think>", False, None),
        (f"  <think>\nmulti\nline\n</think>\n\n<answer>\n{COUNT_SQL}\n</answer>\n", True, COUNT_SQL),
    ],
)
def test_format_verdicts(example, db, text: str, ok: bool, sql: str | None) -> None:
    episode = make_agent("think2sql").start(example, db)
    step = episode.step(text)
    assert step.format_ok is ok and step.done
    assert (step.format_reason == "") is ok
    result = episode.result()
    assert result.final_sql == sql
    assert result.end_reason == ("answer" if sql else "turn_budget")


def test_schema_scope(example, join_example, db) -> None:
    gold = make_agent("think2sql").start(example, db).messages[1]["content"]
    assert "CREATE TABLE schools" in gold and "satscores" not in gold
    both = make_agent("think2sql").start(join_example, db).messages[1]["content"]
    assert "CREATE TABLE schools" in both and "CREATE TABLE satscores" in both
    full = make_agent("think2sql", schema_scope="full").start(example, db).messages[1]["content"]
    assert "CREATE TABLE satscores" in full
    m = make_agent("think2sql", schema_format="m_schema").start(example, db).messages[1]["content"]
    assert "# Table: schools" in m


def test_unknown_gold_tables_fall_back_to_the_full_schema(example, db) -> None:
    from dataclasses import replace

    episode = make_agent("think2sql").start(replace(example, gold_tables=()), db)
    assert "satscores" in episode.messages[1]["content"]
    episode.step(THINK2SQL["agent"][0])
    assert episode.result().flags["full_schema_fallback"] is True


def test_bad_options() -> None:
    with pytest.raises(ConfigError, match="schema_scope"):
        make_agent("think2sql", schema_scope="gold")
    with pytest.raises(ConfigError, match="schema_format"):
        make_agent("think2sql", schema_format="xml")
