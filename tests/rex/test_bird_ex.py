"""The official-compatible EX against BIRD's rule, implemented here independently.

BIRD's ``evaluation_ex.py`` runs the prediction, then the gold SQL, each with Python's
sqlite3 (``cursor.execute`` + ``fetchall``) and scores ``set(pred) == set(gold)``; any
exception scores 0. ``official_reference`` is that rule; the project's official mode must
give its 0/1 on every pair of an edge-case table, and the strict mode keeps its own rules.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from itertools import product
from pathlib import Path
from typing import Any

import pytest

from agents.types import Example
from eval.scoring import Sample, score_question
from rex import ExecScorer, execution_match
from rex.__main__ import compare
from rex.bird_ex import official_ex, official_result
from tools import get_database

GOLD_ROWS = "SELECT name FROM people WHERE age > 30"
GOLD_EMPTY = "SELECT name FROM people WHERE age > 100"
GOLD_FAILS = "SELECT nope FROM people"
GOLD_ONE = "SELECT 1"
GOLDS = [
    GOLD_ROWS,
    GOLD_EMPTY,
    GOLD_FAILS,
    GOLD_ONE,
    "SELECT 1;;",  # a gold query the official script cannot run
    "SELECT note FROM notes",  # reads a cell that is not valid UTF-8
    "SELECT * FROM pragma_table_info('people')",  # what the PRAGMA prediction returns
]
PREDS: list[str | None] = [
    None,
    "",
    " ",
    "\n",
    ";",
    "-- comment only",
    "/* comment only */",
    "SELECT 1",
    "SELECT 1;",
    "SELECT 1;;",
    "SELECT 1; ;",
    "SELECT 1; SELECT 2",
    "SELECT 1; -- trailing comment after the semicolon",
    "SELECT 1 -- trailing comment",
    ";SELECT 1",
    "SELECT\u00a01",  # a no-break space: whitespace to Python, not to SQLite
    "SELECT\v1",
    "SELECT 1\x00",
    GOLD_ROWS + ";",
    GOLD_ROWS + ";;",
    "SELECT name FROM people WHERE age > 30 UNION ALL SELECT name FROM people WHERE age > 30 ORDER BY name DESC",
    "SELECT name FROM people WHERE age > 30 AND name <> 'a;b'",  # a ';' inside a literal
    "SELECT name FROM people WHERE age >= 30",
    "SELECT note FROM notes ORDER BY rowid DESC",
    "SELECT note FROM notes WHERE rowid = 1",
    "SELECT nope FROM people",
    "PRAGMA table_info(people)",
    "EXPLAIN SELECT 1",
]
WRITE = "DELETE FROM people WHERE age > 100"


@pytest.fixture(scope="module")
def edge_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("bird_ex") / "edges.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT, age INTEGER)")
    conn.executemany(
        "INSERT INTO people VALUES (?, ?, ?)", [(1, "Ann", 41), (2, "Bob", 25), (3, "Cid", 35), (4, "Dee", None)]
    )
    conn.execute("CREATE TABLE notes (note TEXT)")
    conn.execute("INSERT INTO notes VALUES ('plain'), (CAST(X'ff41' AS TEXT))")
    conn.commit()
    conn.close()
    return path


def official_reference(path: Path, pred: str | None, gold: str) -> int:
    """BIRD's rule: its loader turns a non-string prediction into ' ', then both queries run
    with Python's sqlite3 on one cursor; any exception is a 0."""
    conn = sqlite3.connect(path)
    try:
        cursor = conn.cursor()
        cursor.execute(pred if isinstance(pred, str) else " ")
        predicted = cursor.fetchall()
        cursor.execute(gold)
        expected = cursor.fetchall()
    except Exception:
        return 0
    finally:
        conn.rollback()
        conn.close()
    return int(set(predicted) == set(expected))


def _project_official(scorer: ExecScorer, path: Path, gold: str, pred: str | None, reuse: bool) -> int:
    db = get_database(path)
    if not reuse:
        return official_ex(scorer, db, gold, pred)
    executed = scorer.execute(db, pred) if pred is not None else None
    return official_ex(scorer, db, gold, pred, scorer.gold(db, gold).result, executed)


@pytest.mark.parametrize("reuse", [True, False], ids=["reusing_the_strict_results", "running_as_written"])
def test_official_mode_equals_the_official_rule_on_every_edge(edge_db: Path, reuse: bool) -> None:
    scorer = ExecScorer(timeout_s=5.0)
    expected = {(g, p): official_reference(edge_db, p, g) for g, p in product(GOLDS, PREDS)}
    got = {(g, p): _project_official(scorer, edge_db, g, p, reuse) for g, p in product(GOLDS, PREDS)}
    assert got == expected
    # The table has teeth: both scores occur, and the named edges score as the script does.
    assert set(expected.values()) == {0, 1}
    for pred in (None, "", " ", "\n", ";", "-- comment only"):
        assert expected[(GOLD_EMPTY, pred)] == 1, pred
    for pred in ("SELECT 1;;", "SELECT 1; ;", "SELECT\u00a01"):
        assert expected[(GOLD_ONE, pred)] == 0, pred
    assert expected[(GOLD_ONE, "SELECT 1; -- trailing comment after the semicolon")] == 1
    assert not any(expected[(GOLD_FAILS, p)] for p in PREDS)
    assert expected[("SELECT * FROM pragma_table_info('people')", "PRAGMA table_info(people)")] == 1


def test_strict_mode_keeps_its_own_rules_at_the_edges(edge_db: Path) -> None:
    """The differences ``execution_match`` lists, on the same texts."""
    db = get_database(edge_db)
    scorer = ExecScorer(timeout_s=5.0)

    def strict(gold: str, pred: str) -> str:
        return execution_match(scorer.gold(db, gold).result, scorer.execute(db, pred))

    assert strict(GOLD_EMPTY, " ") == "pred_error"
    assert strict(GOLD_ONE, "SELECT 1;;") == "match"
    assert strict(GOLD_ONE, "SELECT\u00a01") == "match"
    assert strict("SELECT note FROM notes", "SELECT note FROM notes ORDER BY rowid DESC") == "match"
    assert strict(GOLD_FAILS, GOLD_FAILS) == "gold_error"
    assert strict(GOLD_ROWS, "PRAGMA table_info(people)") == "pred_error"


def test_a_write_is_refused_in_both_modes_where_the_script_runs_it(edge_db: Path) -> None:
    """The one difference the official mode keeps on purpose (model-written writes never
    run): the script runs a DELETE on its writable connection and gets no rows."""
    scorer = ExecScorer(timeout_s=5.0)
    assert official_reference(edge_db, WRITE, GOLD_EMPTY) == 1
    assert _project_official(scorer, edge_db, GOLD_EMPTY, WRITE, reuse=True) == 0
    assert sqlite3.connect(edge_db).execute("SELECT count(*) FROM people").fetchone() == (4,)


def test_official_result_runs_the_text_as_written(edge_db: Path) -> None:
    db = get_database(edge_db)
    scorer = ExecScorer(timeout_s=5.0)
    empty = official_result(scorer, db, "  -- nothing\n")
    assert empty.rows == () and empty.columns == ()  # type: ignore[union-attr]
    assert official_result(scorer, db, "SELECT 1;;").kind == "too_many_statements"  # type: ignore[union-attr]
    bad_text = official_result(scorer, db, "SELECT note FROM notes")
    assert bad_text.kind == "other" and "decode" in bad_text.message  # type: ignore[union-attr]
    assert official_result(scorer, db, "DELETE FROM people").kind == "forbidden"  # type: ignore[union-attr]
    # A result the strict mode already has is reused when the text runs the same as written.
    executed = scorer.execute(db, "SELECT name\n  FROM people;\n")
    assert official_result(scorer, db, "SELECT name\n  FROM people;\n", executed) is executed


def test_compare_reports_the_official_ex_at_the_edges(edge_db: Path) -> None:
    assert compare(str(edge_db), GOLD_EMPTY, "")["ex_official"] == "match"
    on_semicolons = compare(str(edge_db), GOLD_ONE, "SELECT 1;;")
    assert (on_semicolons["ex"], on_semicolons["ex_official"]) == ("match", "mismatch")
    out = subprocess.run(
        [sys.executable, "-m", "rex", "compare", "--db", str(edge_db), "--gold", GOLD_EMPTY, "--pred", " "],
        capture_output=True,
        text=True,
        check=True,
    )
    report = json.loads(out.stdout)
    assert (report["ex"], report["ex_official"]) == ("pred_error", "match")


def test_eval_records_carry_the_official_ex(edge_db: Path) -> None:
    scorer = ExecScorer(timeout_s=5.0)

    def record(gold: str, sql: str | None) -> dict[str, Any]:
        example = Example(id="1", db_id="edges", db_path=str(edge_db), question="q", gold_sql=gold)
        return score_question(example, [Sample(sql=sql)], scorer, "greedy")

    assert (record(GOLD_EMPTY, " ")["ex"], record(GOLD_EMPTY, " ")["ex_official"]) == (0, 1)
    assert (record(GOLD_EMPTY, None)["ex"], record(GOLD_EMPTY, None)["ex_official"]) == (0, 1)
    assert (record(GOLD_ONE, "SELECT 1;;")["ex"], record(GOLD_ONE, "SELECT 1;;")["ex_official"]) == (1, 0)
    assert (record(GOLD_ROWS, GOLD_ROWS)["ex"], record(GOLD_ROWS, GOLD_ROWS)["ex_official"]) == (1, 1)


def test_the_summary_counts_the_official_ex_of_each_record(edge_db: Path) -> None:
    """summary.json's ex_official is the script's score over all questions: the empty answer
    on the empty-gold question counts, the ``;;`` answer does not, the failing gold is wrong."""
    from eval.summary import summarize

    scorer = ExecScorer(timeout_s=5.0)
    pairs = [(GOLD_EMPTY, ""), (GOLD_ONE, "SELECT 1;;"), (GOLD_ROWS, GOLD_ROWS), (GOLD_FAILS, "SELECT 1")]
    records = [
        score_question(
            Example(id=str(i), db_id="edges", db_path=str(edge_db), question="q", gold_sql=gold),
            [Sample(sql=sql)],
            scorer,
            "greedy",
        )
        for i, (gold, sql) in enumerate(pairs)
    ]
    summary = summarize(records, {})
    expected = sum(official_reference(edge_db, sql, gold) for gold, sql in pairs)
    assert expected == 2 and summary["ex_official"] == pytest.approx(expected / 4)
    assert summary["ex"] == pytest.approx(2 / 3)  # strict: ";;" matches, "" does not, the failing gold is left out
