"""EX / REX / QATCH from fixture files (tests/rex/fixtures/metric_cases.json).

SQL cases run on the real database of conftest.py through ExecScorer (tools.execute);
row cases are literal tables. Every case is also scored by a straightforward
reimplementation of BIRD's official evaluation loop: the project's EX and the
official-compatible mode must agree with it on every case.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from rex import (
    ExecScorer,
    MetricInputError,
    execution_match,
    qatch_scores,
    rex_compare,
    rex_score,
)
from rex.metrics import OUTCOMES, ex_score
from rex.tables import Failure, Table

CASES = json.loads((Path(__file__).parent / "fixtures" / "metric_cases.json").read_text())
SQL_CASES = CASES["sql_cases"]
ROW_CASES = CASES["row_cases"]
TIMEOUT_S = 2.0  # runaway cases meet it; ordinary ones stay far below it on a loaded machine (parallel tests)


def bird_official(db_path: Path, pred_sql: str, gold_sql: str, timeout_s: float) -> int:
    """BIRD evaluation.py's loop: a new connection, predicted then gold, any exception or
    timeout → 0, else set(pred) == set(gold)."""
    conn = sqlite3.connect(db_path)
    timer = threading.Timer(timeout_s, conn.interrupt)
    timer.start()
    try:
        cursor = conn.cursor()
        cursor.execute(pred_sql)
        pred = cursor.fetchall()
        cursor.execute(gold_sql)
        gold = cursor.fetchall()
        return int(set(pred) == set(gold))
    except Exception:
        return 0
    finally:
        timer.cancel()
        conn.close()


def _row_side(spec: dict[str, Any]) -> Table | Failure:
    if "error" in spec:
        return Failure(spec["error"], "fixture error")
    return Table(tuple(spec["columns"]), tuple(tuple(r) for r in spec["rows"]))


def _check_scores(case: dict, gold: Any, pred: Any, ordered: bool) -> None:
    expect = case["expect"]
    if "ex" in expect:
        assert execution_match(gold, pred) == expect["ex"]
    if "rex" in expect:
        assert rex_score(gold, pred, ordered) == pytest.approx(expect["rex"], abs=1e-12)
    if "qatch" in expect:
        got = qatch_scores(gold, pred).to_json()
        assert got == pytest.approx(expect["qatch"], abs=1e-12)


@pytest.fixture(scope="module")
def scorer() -> ExecScorer:
    return ExecScorer(timeout_s=TIMEOUT_S)


@pytest.mark.parametrize("case", SQL_CASES, ids=[c["id"] for c in SQL_CASES])
def test_sql_case(case: dict, scorer: ExecScorer, test_db: Any, test_db_path: Path) -> None:
    gold = scorer.gold(test_db, case["gold"]["sql"])
    pred = scorer.execute(test_db, case["pred"]["sql"])
    _check_scores(case, gold.result, pred, gold.ordered)
    official = bird_official(test_db_path, case["pred"]["sql"], case["gold"]["sql"], TIMEOUT_S)
    assert ex_score(execution_match(gold.result, pred)) == official
    assert execution_match(gold.result, pred, official=True) == ("match" if official else "mismatch")


@pytest.mark.parametrize("case", ROW_CASES, ids=[c["id"] for c in ROW_CASES])
def test_row_case(case: dict) -> None:
    gold, pred = _row_side(case["gold"]), _row_side(case["pred"])
    _check_scores(case, gold, pred, case["ordered"])
    errors = isinstance(gold, Failure) or isinstance(pred, Failure)
    official = 0 if errors else int(set(pred.rows) == set(gold.rows))  # type: ignore[union-attr]
    assert ex_score(execution_match(gold, pred)) == official
    assert execution_match(gold, pred, official=True) == ("match" if official else "mismatch")


def test_fixtures_cover_every_outcome() -> None:
    seen = {c["expect"]["ex"] for c in SQL_CASES + ROW_CASES if "ex" in c["expect"]}
    assert seen == set(OUTCOMES)


@pytest.mark.parametrize("metric", ["ex", "rex", "qatch"])
@pytest.mark.parametrize("case", SQL_CASES, ids=[c["id"] for c in SQL_CASES])
def test_exec_scorer_agrees_with_the_pure_metrics(case: dict, metric: str, scorer: ExecScorer, test_db: Any) -> None:
    score = scorer.score(test_db, case["gold"]["sql"], case["pred"]["sql"], metric)
    expect = case["expect"]
    if "ex" in expect:
        assert score.outcome == expect["ex"]
        assert score.ex_match is (expect["ex"] == "match")
    if score.gold_failed or not score.pred_executed:
        assert score.score == 0.0
        return
    wanted = {
        "ex": 1.0 if score.outcome == "match" else 0.0,
        "rex": expect.get("rex"),
        "qatch": expect.get("qatch", {}).get("mean"),
    }[metric]
    if wanted is not None:
        assert score.score == pytest.approx(wanted, abs=1e-12)


def test_plain_pairs_and_query_results_are_interchangeable(test_db: Any, scorer: ExecScorer) -> None:
    result = scorer.execute(test_db, "SELECT name, age FROM people")
    pair = (list(result.columns), [list(r) for r in result.rows])
    assert execution_match(result, pair) == "match"
    assert rex_score(result, pair, ordered=True) == 1.0
    assert qatch_scores(pair, result).mean == 1.0


def test_truncated_results_are_refused(test_db: Any) -> None:
    from tools import PRESETS, execute

    capped = execute(test_db, "SELECT * FROM big", PRESETS["retoolsql"])
    assert capped.truncated
    with pytest.raises(MetricInputError, match="truncated"):
        execution_match(capped, capped)


def test_rex_and_qatch_refuse_failures_with_a_clear_message() -> None:
    with pytest.raises(MetricInputError, match="execution_match"):
        rex_score(Failure("syntax"), (["a"], [(1,)]), ordered=False)
    with pytest.raises(MetricInputError, match="QueryResult"):
        qatch_scores("not a table", (["a"], [(1,)]))  # type: ignore[arg-type]


def test_rex_mapping_is_reported() -> None:
    result = rex_compare((["a", "b", "c"], [(1, "x", None)]), (["q", "a"], [("x", 1)]), ordered=False)
    assert result.mapping == (1, 0, None)
    assert result.mapped_columns == 2
    assert result.matched_rows == 1  # c is NULL in gold, the sentinel matches it
    assert result.score == pytest.approx(1 / 1 * 2 / 3)


def test_rex_tolerant_matching_is_a_maximum_matching() -> None:
    """Rows that are only close (not equal) are paired by a maximum bipartite matching."""
    gold = (["v"], [(1.0,), (1.0000001,), (5.0,)])
    pred = (["v"], [(1.00000005,), (1.00000015,), (5.000001,)])
    assert rex_compare(gold, pred, ordered=False).matched_rows == 3
