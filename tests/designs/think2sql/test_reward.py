"""Think2SQL: 0.85·R_sql + 0.10·R_format + 0.05·R_tagcount (designs/think2sql/README.md)."""

from __future__ import annotations

from typing import Any

import pytest

from designs.think2sql.reward import format_reward, tag_count_reward
from tests.helpers.reward_cases import GOLD_SQL, example, trajectory, turn
from training.algorithm.rewards import get_reward

GOOD_SQL = "SELECT students.name FROM students JOIN clubs ON clubs.id = students.club_id WHERE clubs.title = 'Chess'"


def episode(text: str, sql: str | None) -> Any:
    return trajectory(sql, [turn(0, "answer", text=text)])


def test_perfect_answer_scores_one(school_db: Any) -> None:
    text = f"<think>students in the chess club</think>\n<answer>{GOOD_SQL}</answer>"
    out = get_reward("think2sql", exec_metric="ex")(episode(text, GOOD_SQL), example(), school_db)
    assert out.components == {"exec": 1.0, "format": 1.0, "tagcount": 1.0}
    assert out.total == pytest.approx(1.0)
    assert out.tracks == {"full": out.total}


def test_missing_think_block(school_db: Any) -> None:
    text = f"<answer>{GOOD_SQL}</answer>"
    out = get_reward("think2sql", exec_metric="ex")(episode(text, GOOD_SQL), example(), school_db)
    assert out.components["format"] == 0.0 and out.components["tagcount"] == 0.5
    assert out.total == pytest.approx(0.85 + 0.05 * 0.5)


def test_qatch_gives_partial_credit(school_db: Any) -> None:
    sql = "SELECT name FROM students"  # 5 names vs gold's 3: CP 3/5, CR 1, TC 3/5
    text = f"<think>all</think><answer>{sql}</answer>"
    out = get_reward("think2sql")(episode(text, sql), example(), school_db)  # default exec_metric: qatch
    qatch = (3 / 5 + 1 + 3 / 5) / 3
    assert out.components["exec"] == pytest.approx(qatch)
    assert out.total == pytest.approx(0.85 * qatch + 0.10 + 0.05)


def test_distinct_only_changes_tuple_cardinality(school_db: Any) -> None:
    gold = "SELECT club_id FROM students WHERE club_id IS NOT NULL"  # 1, 1, 2, 1
    sql = "SELECT DISTINCT club_id FROM students WHERE club_id IS NOT NULL"
    out = get_reward("think2sql")(episode(f"<think>t</think><answer>{sql}</answer>", sql), example(gold), school_db)
    assert out.components["exec"] == pytest.approx((1 + 1 + 2 / 4) / 3)


def test_no_sql_scores_only_format_terms(school_db: Any) -> None:
    text = "<think>hmm</think><answer></answer>"
    out = get_reward("think2sql")(episode(text, None), example(), school_db)
    assert out.components["exec"] == 0.0 and out.total == pytest.approx(0.10 + 0.05)


@pytest.mark.parametrize(
    "text, fmt, tags",
    [
        ("<think>a</think><answer>b</answer>", 1.0, 1.0),
        ("  \n<think>a\nb</think>\n\n<answer>\nSELECT 1\n</answer>\n", 1.0, 1.0),
        ("<think>a</think><answer>b</answer> trailing", 0.0, 1.0),
        ("<think>a</think><think>b</think><answer>c</answer>", 1.0, 0.5),
        ("<answer>b</answer><think>a</think>", 0.0, 1.0),
        ("<think>a<answer>b</answer>", 0.0, 0.75),
        ("", 0.0, 0.0),
    ],
)
def test_format_and_tag_count(text: str, fmt: float, tags: float) -> None:
    assert format_reward(text) == fmt
    assert tag_count_reward(text) == tags


def test_weights_are_options(school_db: Any) -> None:
    text = f"<think>x</think><answer>{GOOD_SQL}</answer>"
    out = get_reward("think2sql", exec_metric="ex", w_sql=1.0, w_format=0.0, w_tags=0.0)(
        episode(text, GOOD_SQL), example(), school_db
    )
    assert out.total == 1.0
    assert GOLD_SQL  # the example's gold query is the join of conftest
