"""ReToolSQL's composite reward on hand-built episodes (designs/retoolsql/README.md: max 3.8)."""

from __future__ import annotations

from typing import Any

import pytest

from agents.types import SchemaSelection
from tests.helpers.reward_cases import GOLD_COLUMNS, GOLD_SQL, GOLD_TABLES, example, trajectory, turn
from training.algorithm.rewards import get_reward

FINAL_TEXT = (
    "<scratch_pad>join students to clubs</scratch_pad>\n"
    "<relevant_tables>students, clubs</relevant_tables>\n"
    "<relevant_columns>students.name, students.club_id, clubs.id, clubs.title</relevant_columns>\n"
    "<final_answer>{sql}</final_answer>"
)
GOOD_SQL = "SELECT students.name FROM students JOIN clubs ON clubs.id = students.club_id WHERE clubs.title = 'Chess'"
GOLD_SCHEMA = SchemaSelection(tables=GOLD_TABLES, columns=GOLD_COLUMNS)


def episode(
    sql: str | None = GOOD_SQL,
    schema: SchemaSelection | None = GOLD_SCHEMA,
    final_text: str | None = None,
    tokens: int = 100,
    ok: bool = True,
    end_reason: str = "answer",
) -> Any:
    text = final_text if final_text is not None else FINAL_TEXT.format(sql=sql)
    turns = [
        turn(
            0,
            "tool_call",
            text="<scratch_pad>look</scratch_pad><tool_call>{}</tool_call>",
            tool="sqlite_query",
            outcome="ok",
        ),
        turn(1, "final_answer", ok=ok, text=text),
    ]
    return trajectory(sql, turns, schema=schema, end_reason=end_reason, policy_tokens=tokens)


def test_perfect_episode_scores_the_maximum_3_8(school_db: Any) -> None:
    out = get_reward("composite")(episode(), example(), school_db)
    assert out.error is None
    assert out.components == {
        "format": 1.0,
        "syntax": 1.0,
        "exec": 1.0,
        "tables": 1.0,
        "columns": 1.0,
        "nonempty": 1.0,
        "length": 0.0,
    }
    assert out.total == pytest.approx(3.8)
    assert out.tracks == {"full": out.total}


@pytest.mark.parametrize(
    "tokens, length, total", [(6000, 0.0, 3.8), (7000, -0.5, 3.75), (8000, -1.0, 3.7), (12000, -1.0, 3.7)]
)
def test_soft_overlong_length_term(school_db: Any, tokens: int, length: float, total: float) -> None:
    out = get_reward("composite")(episode(tokens=tokens), example(), school_db)
    assert out.components["length"] == pytest.approx(length)
    assert out.total == pytest.approx(total)


def test_length_counts_policy_tokens_only(school_db: Any) -> None:
    traj = episode(tokens=5000)
    traj.response_mask.extend([0] * 5000)  # 5,000 observation tokens: no penalty
    traj.response_ids.extend([9] * 5000)
    assert get_reward("composite")(traj, example(), school_db).components["length"] == 0.0


def test_length_thresholds_are_configurable(school_db: Any) -> None:
    reward = get_reward("composite", length_start=100, length_max=200)
    assert reward(episode(tokens=150), example(), school_db).components["length"] == pytest.approx(-0.5)


def test_wrong_but_executing_sql(school_db: Any) -> None:
    sql = "SELECT students.name FROM students JOIN clubs ON clubs.id = students.club_id WHERE clubs.title = 'Drama'"
    out = get_reward("composite")(episode(sql), example(), school_db)
    assert out.components["exec"] == 0.0 and out.components["syntax"] == 1.0 and out.components["nonempty"] == 1.0
    assert out.total == pytest.approx(0.2 + 0.5 + 0.5 + 0.5 + 0.1)


def test_failing_sql_scores_no_sql_terms(school_db: Any) -> None:
    out = get_reward("composite")(episode("SELECT name FROM studnts"), example(), school_db)
    assert (out.components["syntax"], out.components["exec"], out.components["nonempty"]) == (0.0, 0.0, 0.0)
    assert out.total == pytest.approx(0.2 + 0.5 + 0.5)


@pytest.mark.parametrize("sql", ["SELECT name FROM students WHERE 0", "SELECT NULL FROM students"])
def test_nonempty_needs_a_non_null_cell(school_db: Any, sql: str) -> None:
    out = get_reward("composite")(episode(sql), example(), school_db)
    assert out.components["syntax"] == 1.0 and out.components["nonempty"] == 0.0


def test_no_final_answer_scores_zero_except_length(school_db: Any) -> None:
    turns = [
        turn(
            i,
            "tool_call",
            text="<scratch_pad>x</scratch_pad><tool_call>{}</tool_call>",
            tool="sqlite_query",
            outcome="ok",
        )
        for i in range(8)
    ]
    out = get_reward("composite")(
        trajectory(None, turns, end_reason="turn_budget", policy_tokens=7000), example(), school_db
    )
    assert out.error is None
    assert {k: v for k, v in out.components.items() if k != "length"} == dict.fromkeys(
        ["format", "syntax", "exec", "tables", "columns", "nonempty"], 0.0
    )
    assert out.total == pytest.approx(0.1 * -0.5)


def test_missing_annotations_fail_format_and_score_zero_linking(school_db: Any) -> None:
    gold = "SELECT COUNT(*) FROM students"  # no gold column: J(∅, ∅) would be 1
    text = "<scratch_pad>count</scratch_pad><final_answer>SELECT COUNT(*) FROM students</final_answer>"
    traj = episode("SELECT COUNT(*) FROM students", schema=SchemaSelection(), final_text=text, ok=False)
    out = get_reward("composite")(traj, example(gold), school_db)
    assert out.components["format"] == 0.0 and out.components["tables"] == 0.0 and out.components["columns"] == 0.0
    assert out.components["exec"] == 1.0


def test_count_star_gold_with_empty_column_annotation(school_db: Any) -> None:
    text = (
        "<scratch_pad>c</scratch_pad><relevant_tables>students</relevant_tables><relevant_columns></relevant_columns>"
        "<final_answer>SELECT COUNT(*) FROM students</final_answer>"
    )
    traj = episode("SELECT COUNT(*) FROM students", schema=SchemaSelection(tables=("students",)), final_text=text)
    out = get_reward("composite")(traj, example("SELECT COUNT(*) FROM students"), school_db)
    assert out.components["tables"] == 1.0 and out.components["columns"] == 1.0
    assert out.total == pytest.approx(3.8)


def test_linking_terms(school_db: Any) -> None:
    schema = SchemaSelection(tables=("students", "clubs", "extra"), columns=("students.name", "clubs.title"))
    out = get_reward("composite")(episode(schema=schema), example(), school_db)
    assert out.components["tables"] == 1.0  # a superset is enough
    assert out.components["columns"] == pytest.approx(2 / 4)
    schema = SchemaSelection(tables=("students",), columns=("students.*",))  # * = every students column
    out = get_reward("composite")(episode(schema=schema), example(), school_db)
    assert out.components["tables"] == 0.0
    assert out.components["columns"] == pytest.approx(2 / 7)  # {name, club_id} of {5 students + 2 clubs}


def test_gold_refs_come_from_the_gold_sql_when_the_example_lacks_them(school_db: Any) -> None:
    out = get_reward("composite")(episode(), example(with_refs=False, gold_sql=GOLD_SQL + " "), school_db)
    assert out.components["tables"] == 1.0 and out.components["columns"] == 1.0


@pytest.mark.parametrize("metric, expected", [("ex", 0.0), ("rex", 1.0), ("qatch", 1.0)])
def test_exec_metric_knob(school_db: Any, metric: str, expected: float) -> None:
    sql = "SELECT grade, name FROM students"
    gold = "SELECT name, grade FROM students"
    out = get_reward("composite", exec_metric=metric)(episode(sql), example(gold), school_db)
    assert out.components["exec"] == expected


def test_weights_are_configurable(school_db: Any) -> None:
    out = get_reward("composite", weights={"exec": 3.0})(episode(), example(), school_db)
    assert out.total == pytest.approx(4.8)


def test_failing_gold_is_an_error_not_a_silent_zero(school_db: Any) -> None:
    out = get_reward("composite")(episode(), example("SELECT nope FROM students"), school_db)
    assert out.error is not None and "gold" in out.error and "nope" in out.error
    assert out.total == 0.0 and "exec" in out.components and "full" in out.tracks


def test_bad_options_say_how_to_fix() -> None:
    from tools.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown term"):
        get_reward("composite", weights={"exe": 1.0})
    with pytest.raises(ConfigError, match="registered: ex, qatch, rex, spider"):
        get_reward("composite", exec_metric="accuracy")
    with pytest.raises(ConfigError, match="length_start"):
        get_reward("composite", length_start=8000, length_max=6000)
