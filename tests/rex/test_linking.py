"""Schema-linking metrics (rex/linking.py) on hand-made cases: names compared after case and
quoting are normalised, aliases in the gold SQL resolved to their tables, ``*`` expanded,
and the per-level precision, recall, F1 and completeness (what C-Recall counts)."""

from __future__ import annotations

import pytest

from rex.linking import gold_sets, link_score, linked_sets, precision_recall_f1

SCHEMA = {"Schools": ["ID", "Name", "City"], "satscores": ["school_id", "avg_math"]}


def test_case_and_quoting_are_normalised_on_both_sides() -> None:
    tables, columns = linked_sets(
        ["`Schools`", '"SATSCORES"'],
        ["[Schools].[City]", "`schools`.`NAME`", '"satscores"."Avg_Math"', " schools.id "],
        SCHEMA,
    )
    assert tables == {"schools", "satscores"}
    assert columns == {"schools.city", "schools.name", "satscores.avg_math", "schools.id"}
    gold_t, gold_c = gold_sets((), (), "SELECT \"Name\" FROM `Schools` WHERE City = 'Fresno'", SCHEMA)
    assert gold_t == {"schools"} and gold_c == {"schools.name", "schools.city"}
    score = link_score(gold_c, columns)
    assert score is not None and score.recall == 1.0 and score.precision == pytest.approx(2 / 4)


def test_aliases_in_the_gold_sql_resolve_to_their_tables() -> None:
    sql = (
        "SELECT MAX(T2.avg_math) FROM Schools AS T1 JOIN satscores AS T2 ON T1.ID = T2.school_id "
        "WHERE T1.City = 'Fresno'"
    )
    tables, columns = gold_sets((), (), sql, SCHEMA)
    assert tables == {"schools", "satscores"}
    assert columns == {"satscores.avg_math", "schools.id", "satscores.school_id", "schools.city"}
    assert not any(name.startswith(("t1", "t2")) for name in tables | columns)


def test_star_unqualified_columns_and_names_the_database_lacks() -> None:
    tables, columns = linked_sets(["schools"], ["schools.*", "avg_math", "ghost.col", 7], SCHEMA)
    # schools.* expands; avg_math belongs to no selected table (satscores is not linked): dropped;
    # ghost.col is a linking error kept to cost precision; a non-string entry is ignored
    assert columns == {"schools.id", "schools.name", "schools.city", "ghost.col"}
    assert tables == {"schools", "ghost"}
    _, columns = linked_sets(["schools", "satscores"], ["avg_math", "*"], SCHEMA)
    assert "satscores.avg_math" in columns and "schools.city" in columns
    gold = gold_sets((), (), "SELECT * FROM schools", SCHEMA)[1]
    assert gold == {"schools.id", "schools.name", "schools.city"}


def test_precision_recall_f1_and_completeness_on_a_known_case() -> None:
    gold = frozenset({"t.a", "t.b", "u.c"})
    linked = frozenset({"t.a", "t.b", "t.x", "t.y"})
    score = link_score(gold, linked)
    assert score is not None
    assert (score.precision, score.recall) == (0.5, pytest.approx(2 / 3))
    assert score.f1 == pytest.approx(2 * 0.5 * (2 / 3) / (0.5 + 2 / 3))
    assert score.complete is False
    full = link_score(gold, gold | {"v.z"})
    assert full is not None and full.complete and full.recall == 1.0 and full.precision == 0.75
    empty = link_score(gold, frozenset())
    assert empty is not None and (empty.precision, empty.recall, empty.f1, empty.complete) == (0.0, 0.0, 0.0, False)
    # a gold SQL that names no column (COUNT(*)) has nothing to link at that level
    assert gold_sets((), (), "SELECT COUNT(*) FROM schools", SCHEMA)[1] == frozenset()
    assert link_score(frozenset(), frozenset({"schools.id"})) is None
    assert precision_recall_f1(frozenset(), frozenset()) == (1.0, 1.0, 1.0)


def test_given_gold_lists_are_used_and_gain_their_columns_tables() -> None:
    tables, columns = gold_sets(("schools",), ("satscores.avg_math", "Schools.City"), "not sql at all")
    assert tables == {"schools", "satscores"} and columns == {"satscores.avg_math", "schools.city"}
    assert gold_sets((), (), "SELEC nonsense", SCHEMA) == (frozenset(), frozenset())
