"""DualSQL: linker and generator rewards, guardrail factor, length term, max/clip (designs/dualsql/README.md)."""

from __future__ import annotations

from typing import Any

import pytest

from agents.types import SchemaSelection
from designs.dualsql.reward import combine, linking_reward
from tests.helpers.reward_cases import GOLD_COLUMNS, GOLD_TABLES, example, trajectory, turn
from training.algorithm.rewards import get_reward

GOOD_SQL = "SELECT students.name FROM students JOIN clubs ON clubs.id = students.club_id WHERE clubs.title = 'Chess'"
REORDERED = (
    "SELECT DISTINCT s.name FROM clubs c JOIN students s ON c.id = s.club_id WHERE c.title = 'Chess' ORDER BY s.id"
)


def linker(schema: SchemaSelection | None, ok: bool = True, tokens: int = 100, end_reason: str = "answer") -> Any:
    turns = [turn(0, "tool_call", tool="fts_search", outcome="ok"), turn(1, "answer", ok=ok)]
    return trajectory(None, turns, schema=schema, role="linker", policy_tokens=tokens, end_reason=end_reason)


def generator(
    sql: str | None, tool_outcome: str = "ok", ok: bool = True, tokens: int = 100, end_reason: str = "answer"
) -> Any:
    turns = [turn(0, "tool_call", tool="execute_sql", outcome=tool_outcome), turn(1, "answer", ok=ok)]
    return trajectory(sql, turns, role="generator", policy_tokens=tokens, end_reason=end_reason)


def extra_columns(n: int) -> tuple[str, ...]:
    return tuple(f"students.x{i}" for i in range(n))


@pytest.mark.parametrize(
    "columns, tables, expected",
    [
        (GOLD_COLUMNS, GOLD_TABLES, 1.0),  # S' = S*
        (GOLD_COLUMNS + extra_columns(4), GOLD_TABLES, 0.9),  # superset, precision 0.5: no penalty
        (GOLD_COLUMNS + extra_columns(16), GOLD_TABLES, 0.9),  # precision exactly 0.2: no penalty
        (GOLD_COLUMNS + extra_columns(36), GOLD_TABLES, 0.8),  # precision 0.1: 0.9 - 0.1
        (GOLD_COLUMNS + extra_columns(396), GOLD_TABLES, 0.9 - 0.19),  # precision 0.01
        (("students.name", "clubs.title"), GOLD_TABLES, 0.7),  # all gold tables, not all columns
        (("students.name",) + extra_columns(19), GOLD_TABLES, 0.7 - (0.2 - 1 / 20)),
        (("students.name", "students.club_id"), ("students",), 0.5 * (2 * 1.0 * 0.5 / 1.5)),  # 0.5 F1
        ((), (), 0.0),
    ],
)
def test_linker_reward_cases(school_db: Any, columns: tuple, tables: tuple, expected: float) -> None:
    out = get_reward("dualsql")(linker(SchemaSelection(tables=tables, columns=columns)), example(), school_db)
    assert out.error is None
    assert out.components["task"] == pytest.approx(expected)
    assert out.total == pytest.approx(max(expected, 0.1))  # R_f = 1, no length penalty
    assert out.components["exec"] == out.components["task"]


def test_linker_without_a_schema_gets_the_format_floor(school_db: Any) -> None:
    out = get_reward("dualsql")(linker(None), example(), school_db)
    assert out.components["task"] == 0.0 and out.total == pytest.approx(0.1)


def test_linker_format_failure_loses_the_floor(school_db: Any) -> None:
    out = get_reward("dualsql")(linker(None, ok=False, end_reason="format_cutoff"), example(), school_db)
    assert out.components["format"] == 0.0 and out.total == 0.0


def test_count_star_gold_links_tables(school_db: Any) -> None:
    gold = example("SELECT COUNT(*) FROM clubs")
    exact = get_reward("dualsql")(linker(SchemaSelection(tables=("clubs",))), gold, school_db)
    assert exact.components["task"] == 1.0
    more = get_reward("dualsql")(linker(SchemaSelection(tables=("clubs", "students"))), gold, school_db)
    assert more.components["task"] == pytest.approx(0.9)


def test_generator_correct_with_tool_bonus(school_db: Any) -> None:
    out = get_reward("dualsql")(generator(GOOD_SQL), example(), school_db)
    assert out.components["task"] == pytest.approx(1.1) and out.components["tool"] == 1.0
    assert out.total == pytest.approx(1.1)


def test_generator_correct_without_successful_tool(school_db: Any) -> None:
    out = get_reward("dualsql")(generator(GOOD_SQL, tool_outcome="syntax"), example(), school_db)
    assert out.total == pytest.approx(1.0)


def test_generator_correctness_is_rex_equal_to_one(school_db: Any) -> None:
    # DISTINCT + ORDER BY on a gold without either: equal as sets and as multisets here
    out = get_reward("dualsql")(generator(REORDERED), example(), school_db)
    assert out.components["exec"] == 1.0
    dup = (
        "SELECT s.name FROM students s JOIN students t ON t.id = s.id OR t.id = s.id + 1 "
        "JOIN clubs c ON c.id = s.club_id WHERE c.title = 'Chess'"
    )
    ex = get_reward("dualsql", exec_metric="ex")(generator(dup), example(), school_db)
    rex = get_reward("dualsql")(generator(dup), example(), school_db)
    assert ex.components["task"] == pytest.approx(1.1)  # EX forgives the duplicated rows
    assert rex.components["task"] == 0.0 and rex.total == pytest.approx(0.1)  # REX does not


def test_generator_wrong_and_failing(school_db: Any) -> None:
    assert get_reward("dualsql")(generator("SELECT name FROM students"), example(), school_db).total == pytest.approx(
        0.1
    )
    assert get_reward("dualsql")(generator("SELEC"), example(), school_db).total == pytest.approx(0.1)
    assert get_reward("dualsql")(generator(None), example(), school_db).total == pytest.approx(0.1)


@pytest.mark.parametrize(
    "sql, tokens, expected",
    [
        (GOOD_SQL, 28672, 1.1),  # L_max - buffer: no penalty
        (GOOD_SQL, 30720, 1.1 - 0.2 * 0.5),  # half-way down the buffer
        (GOOD_SQL, 40000, 1.1 - 0.2),  # beyond L_max
        ("SELECT name FROM students", 30720, 0.1 - 0.1),  # max(0, 0.1) - 0.1
        ("SELECT name FROM students", 40000, 0.0),  # 0.1 - 0.2 clipped to 0
    ],
)
def test_length_term(school_db: Any, sql: str, tokens: int, expected: float) -> None:
    out = get_reward("dualsql")(generator(sql, tokens=tokens), example(), school_db)
    assert out.total == pytest.approx(expected)
    assert out.total >= 0.0


def test_length_term_applies_only_with_correct_format(school_db: Any) -> None:
    out = get_reward("dualsql")(generator(GOOD_SQL, ok=False, tokens=40000), example(), school_db)
    assert out.components["format"] == 0.0 and out.components["length"] == -1.0
    assert out.total == pytest.approx(1.1)  # max(R_task, 0) + 0.2 * R_l * 0


def test_length_window_is_configurable(school_db: Any) -> None:
    reward = get_reward("dualsql", max_length=2000, buffer=1000)
    assert reward(generator(GOOD_SQL, tokens=1500), example(), school_db).total == pytest.approx(1.1 - 0.1)


def test_components_are_the_same_keys_for_both_roles(school_db: Any) -> None:
    reward = get_reward("dualsql")
    a = reward(linker(SchemaSelection(tables=GOLD_TABLES, columns=GOLD_COLUMNS)), example(), school_db)
    b = reward(generator(GOOD_SQL), example(), school_db)
    assert set(a.components) == set(b.components)


def test_unknown_role_is_an_error(school_db: Any) -> None:
    traj = generator(GOOD_SQL)
    traj.role = "critic"
    traj.result.role = "critic"
    out = get_reward("dualsql")(traj, example(), school_db)
    assert out.error and "critic" in out.error


def test_pure_pieces() -> None:
    g = frozenset({"t.a"})
    assert linking_reward(g, frozenset(), frozenset({"t"}), frozenset()) == 0.0
    assert combine(0.0, 1.0, 0.0) == pytest.approx(0.1)
    assert combine(0.5, 1.0, -1.0, length_weight=0.2) == pytest.approx(0.3)
