"""TRUST-SQL: R_exec 1/0.2/0, R_format 0.1, R_schema modes, two tracks (designs/trustsql/README.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from agents.types import SchemaSelection
from designs.trustsql.reward import SCHEMA_MODES, schema_reward
from tests.helpers.reward_cases import GOLD_COLUMNS, GOLD_TABLES, example, trajectory, turn
from training.algorithm.rewards import get_reward

GOOD_SQL = "SELECT students.name FROM students JOIN clubs ON clubs.id = students.club_id WHERE clubs.title = 'Chess'"
WRONG_SQL = "SELECT name FROM students"
GOLD_SCHEMA = SchemaSelection(tables=GOLD_TABLES, columns=GOLD_COLUMNS)


def four_phases(bad: Sequence[int] = (), outcomes: dict[int, str] | None = None, skip: str | None = None) -> list:
    outcomes = outcomes or {}
    phases = ["explore_schema", "propose_schema", "generate_sql", "confirm_answer"]
    turns = []
    for i, phase in enumerate(p for p in phases if p != skip):
        tool = "execute_sql_query" if phase in ("explore_schema", "generate_sql") else None
        outcome = outcomes.get(i, "ok") if tool else None
        turns.append(turn(i, phase, ok=i not in bad, tool=tool, outcome=outcome))
    return turns


def run(
    sql: str | None,
    schema: SchemaSelection | None = GOLD_SCHEMA,
    turns: list | None = None,
    db: Any = None,
    **options: Any,
) -> Any:
    traj = trajectory(sql, turns if turns is not None else four_phases(), schema=schema)
    return get_reward("trustsql", **options)(traj, example(), db)


def test_correct_sql_and_exact_schema(school_db: Any) -> None:
    out = run(GOOD_SQL, db=school_db)
    assert out.error is None
    assert out.components == {"exec": 1.0, "r_exec": 1.0, "format": 0.1, "schema": 1.0}
    assert out.tracks == {"full": pytest.approx(1.1), "schema": 1.0}
    assert out.total == out.tracks["full"]


def test_coupled_schema_reward_is_zero_whenever_r_exec_below_one(school_db: Any) -> None:
    out = run(WRONG_SQL, db=school_db)  # executes, wrong: R_exec 0.2
    assert out.components["r_exec"] == 0.2 and out.tracks["schema"] == 0.0
    assert out.tracks["full"] == pytest.approx(0.3)
    out = run("SELECT nme FROM students", db=school_db)  # fails: R_exec 0
    assert out.components["r_exec"] == 0.0 and out.tracks["schema"] == 0.0
    for mode in SCHEMA_MODES:
        if mode != "uncoupled":
            assert run(WRONG_SQL, db=school_db, schema_mode=mode).tracks["schema"] == 0.0


def test_uncoupled_schema_reward_ignores_execution(school_db: Any) -> None:
    out = run(WRONG_SQL, db=school_db, schema_mode="uncoupled")
    assert out.tracks["schema"] == 1.0


def test_sparse_schema_needs_exact_sets(school_db: Any) -> None:
    superset = SchemaSelection(tables=GOLD_TABLES, columns=GOLD_COLUMNS + ("students.grade",))
    assert run(GOOD_SQL, schema=superset, db=school_db).tracks["schema"] == 0.0
    assert run(GOOD_SQL, schema=None, db=school_db).tracks["schema"] == 0.0


def test_dense_schema_modes(school_db: Any) -> None:
    # gold elements: 2 tables + 4 columns = 6; proposal: 2 tables + 2 gold columns + 1 extra = 5 (4 right)
    proposal = SchemaSelection(tables=GOLD_TABLES, columns=("students.name", "clubs.title", "students.grade"))
    precision, recall = 4 / 5, 4 / 6
    expected = {
        "f1": 2 * precision * recall / (precision + recall),
        "precision": precision,
        "recall": recall,
        "dense_coupled": 0.0,  # column recall below 1: the gate is shut
    }
    for mode, value in expected.items():
        assert run(GOOD_SQL, schema=proposal, db=school_db, schema_mode=mode).tracks["schema"] == pytest.approx(value)


@pytest.mark.parametrize(
    "turns",
    [
        four_phases(bad=[1]),  # an invalid turn
        four_phases() + [turn(4, "invalid", ok=False)],
    ],
)
def test_format_reward_all_turns_rule(school_db: Any, turns: list) -> None:
    out = run(GOOD_SQL, turns=turns, db=school_db)
    assert out.components["format"] == 0.0
    assert out.tracks["full"] == pytest.approx(1.0)


def test_other_tool_errors_keep_the_format_reward(school_db: Any) -> None:
    out = run(GOOD_SQL, turns=four_phases(outcomes={0: "no_such_table"}), db=school_db, require_clean_feedback=True)
    assert out.components["format"] == 0.1


def test_no_answer(school_db: Any) -> None:
    """Valid turns without a confirm: R_exec 0, R_format 0.1 (App. F.2 asks only for valid
    turns), R_schema 0 (coupled); with require_all_actions the missing confirm costs R_format."""
    out = run(None, turns=four_phases(skip="confirm_answer"), db=school_db)
    assert out.components["r_exec"] == 0.0 and out.tracks == {"full": pytest.approx(0.1), "schema": 0.0}
    strict = run(None, turns=four_phases(skip="confirm_answer"), db=school_db, require_all_actions=True)
    assert strict.tracks == {"full": 0.0, "schema": 0.0}


def test_exec_metric_decides_correctness(school_db: Any) -> None:
    traj = trajectory("SELECT grade, name FROM students", four_phases(), schema=GOLD_SCHEMA)
    gold = example("SELECT name, grade FROM students")
    assert get_reward("trustsql", exec_metric="ex")(traj, gold, school_db).components["r_exec"] == 0.2
    assert get_reward("trustsql", exec_metric="rex")(traj, gold, school_db).components["r_exec"] == 1.0
    # QATCH compares cell sets: a repeated column is invisible to it (R_exec 1), not to EX
    doubled = trajectory("SELECT name, name FROM students", four_phases(), schema=GOLD_SCHEMA)
    names = example("SELECT name FROM students")
    assert get_reward("trustsql", exec_metric="qatch")(doubled, names, school_db).components["r_exec"] == 1.0
    assert get_reward("trustsql", exec_metric="ex")(doubled, names, school_db).components["r_exec"] == 0.2


def test_failing_gold_has_both_tracks_and_an_error(school_db: Any) -> None:
    traj = trajectory(GOOD_SQL, four_phases(), schema=GOLD_SCHEMA)
    out = get_reward("trustsql")(traj, example("SELECT * FROM missing_table"), school_db)
    assert out.error and "missing_table" in out.error
    assert set(out.tracks) == {"full", "schema"} and out.total == 0.0


def test_schema_reward_pure_function() -> None:
    gold = (frozenset({"t"}), frozenset({"t.a"}))
    assert schema_reward("sparse_coupled", gold, gold, 1.0) == 1.0
    assert schema_reward("sparse_coupled", gold, gold, 0.2) == 0.0


def test_w_schema_baseline_sums_the_schema_reward_into_one_track(school_db: Any) -> None:
    """The paper's "w/ schema" baseline (Table 6): terminal reward + 0.25 R_schema, one track
    for plain GRPO; the two-track estimator refuses it rather than count R_schema twice."""
    import torch

    from training.algorithm.advantages import AdvantageOptions, get_estimator

    out = run(GOOD_SQL, db=school_db, schema_in_total=0.25)
    assert out.total == pytest.approx(1.0 + 0.1 + 0.25) and set(out.tracks) == {"full"}
    assert out.components["schema"] == 1.0
    assert run(WRONG_SQL, db=school_db, schema_in_total=0.25).total == pytest.approx(0.3)  # coupled: no schema term
    with pytest.raises(Exception, match="needs a reward with a 'schema' track"):
        get_estimator("two_track")({"full": torch.tensor([1.0, 0.0])}, ["q", "q"], AdvantageOptions())


def test_prefilled_explore_counts_for_r_format(school_db: Any) -> None:
    from dataclasses import replace

    turns = four_phases(skip="explore_schema")
    plain = trajectory(GOOD_SQL, turns, schema=GOLD_SCHEMA)
    reward = get_reward("trustsql", require_all_actions=True)
    assert reward(plain, example(), school_db).components["format"] == 0.0  # an action is missing
    prefilled = replace(plain, result=replace(plain.result, flags={"schema_prefill": True}))
    assert reward(prefilled, example(), school_db).components["format"] == 0.1


# ----------------------------------------------------------------------------- R_format (App. F.2)


@pytest.mark.parametrize(
    "turns",
    [
        four_phases(skip="explore_schema"),  # an action never used: not a rule of App. F.2
        four_phases(outcomes={2: "syntax"}),  # a SQL syntax error in a valid turn
        four_phases(outcomes={0: "bad_arguments"}),
    ],
)
def test_r_format_is_app_f2_every_turn_valid_and_nothing_more(school_db: Any, turns: list) -> None:
    assert run(GOOD_SQL, turns=turns, db=school_db).components["format"] == 0.1


def test_r_format_extra_conditions_are_options(school_db: Any) -> None:
    skip = four_phases(skip="explore_schema")
    assert run(GOOD_SQL, turns=skip, db=school_db, require_all_actions=True).components["format"] == 0.0
    assert run(GOOD_SQL, db=school_db, require_all_actions=True).components["format"] == 0.1
    syntax = four_phases(outcomes={2: "syntax"})
    assert run(GOOD_SQL, turns=syntax, db=school_db, require_clean_feedback=True).components["format"] == 0.0


def test_all_actions_of_the_protocol_without_propose(school_db: Any) -> None:
    """With the three-phase protocol (agent ``propose_phase=false``) "all actions" means its three."""
    from dataclasses import replace

    traj = trajectory(GOOD_SQL, four_phases(skip="propose_schema"), schema=None)
    egc = replace(traj, result=replace(traj.result, flags={"without_propose": True}))
    reward = get_reward("trustsql", require_all_actions=True)
    assert reward(egc, example(), school_db).components["format"] == 0.1
    assert reward(traj, example(), school_db).components["format"] == 0.0


# ----------------------------------------------------------------------------- Dense + Coupled (§5.1)


def test_dense_coupled_gates_on_full_recall_then_weights_table_and_column_precision(school_db: Any) -> None:
    # gold: tables {students, clubs}, columns students.name, students.club_id, clubs.id, clubs.title
    extra_column = SchemaSelection(tables=GOLD_TABLES, columns=GOLD_COLUMNS + ("students.grade",))
    assert run(GOOD_SQL, schema=extra_column, db=school_db, schema_mode="dense_coupled").tracks[
        "schema"
    ] == pytest.approx(0.5 * 1.0 + 0.5 * 4 / 5)
    extra_table = SchemaSelection(tables=GOLD_TABLES + ("teachers",), columns=GOLD_COLUMNS)
    weighted = run(
        GOOD_SQL,
        schema=extra_table,
        db=school_db,
        schema_mode="dense_coupled",
        dense_table_weight=0.25,
        dense_column_weight=0.75,
    )
    assert weighted.tracks["schema"] == pytest.approx(0.25 * 2 / 3 + 0.75 * 1.0)
    missing = SchemaSelection(tables=GOLD_TABLES, columns=GOLD_COLUMNS[:-1] + ("students.grade",))
    assert run(GOOD_SQL, schema=missing, db=school_db, schema_mode="dense_coupled").tracks["schema"] == 0.0
    assert run(GOOD_SQL, db=school_db, schema_mode="dense_coupled").tracks["schema"] == 1.0
    assert run(WRONG_SQL, db=school_db, schema_mode="dense_coupled").tracks["schema"] == 0.0  # coupled


def test_dense_weights_must_sum_to_one() -> None:
    from tools.errors import ConfigError

    with pytest.raises(ConfigError, match="dense_table_weight"):
        get_reward("trustsql", schema_mode="dense_coupled", dense_table_weight=0.5, dense_column_weight=0.6)
