"""ExecScorer (execution through tools.execute, gold cache) and `python -m rex compare`."""

from __future__ import annotations

import json
import pickle
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rex import ExecScorer
from tools.errors import ConfigError


def test_gold_results_are_cached_per_content_and_normalised_sql(test_db: Any) -> None:
    scorer = ExecScorer(timeout_s=5)
    scorer.score(test_db, "SELECT name FROM people", "SELECT name FROM people")
    scorer.score(test_db, "SELECT name  -- same query\nFROM people;", "SELECT 1")
    assert (scorer.misses, scorer.hits) == (1, 1)
    scorer.score(test_db, "SELECT name FROM people WHERE id > 1", "SELECT 1")
    assert scorer.misses == 2


def test_cache_key_includes_the_database_content(tmp_path: Path) -> None:
    from tests.rex.conftest import build_test_db
    from tools import get_database

    a = get_database(build_test_db(tmp_path / "a.sqlite"))
    other = tmp_path / "b.sqlite"
    shutil.copy(a.path, other)
    con = sqlite3.connect(other)
    con.execute("DELETE FROM people WHERE id > 2")
    con.commit()
    con.close()
    b = get_database(other)
    scorer = ExecScorer()
    gold = "SELECT name FROM people"
    assert scorer.score(a, gold, "SELECT name FROM people WHERE id <= 2").outcome == "mismatch"
    assert scorer.score(b, gold, "SELECT name FROM people WHERE id <= 2").outcome == "match"
    assert scorer.misses == 2


def test_score_fields(test_db: Any) -> None:
    scorer = ExecScorer()
    s = scorer.score(test_db, "SELECT name FROM people ORDER BY id", "SELECT name FROM people ORDER BY id DESC", "rex")
    assert (s.metric, s.outcome, s.ex_match, s.pred_executed, s.pred_nonempty) == ("rex", "match", True, True, True)
    assert s.score == 0.0 and s.details["ordered"] is True and s.details["rex"]["matched_rows"] == 0
    nulls = scorer.score(test_db, "SELECT name FROM people", "SELECT score FROM people WHERE score IS NULL")
    assert nulls.pred_executed and not nulls.pred_nonempty
    none = scorer.score(test_db, "SELECT name FROM people", None, "qatch")
    assert none.outcome == "pred_error" and none.score == 0.0 and not none.pred_executed
    gold_bad = scorer.score(test_db, "SELECT * FROM nowhere", "SELECT 1")
    assert gold_bad.gold_failed and "nowhere" in gold_bad.details["gold_error"]


def test_predictions_cannot_write(test_db: Any) -> None:
    scorer = ExecScorer()
    for sql in ("DELETE FROM people", "DROP TABLE people", "SELECT 1; DELETE FROM people"):
        assert scorer.score(test_db, "SELECT COUNT(*) FROM people", sql).outcome == "pred_error"
    assert scorer.score(test_db, "SELECT COUNT(*) FROM people", "SELECT 6").outcome == "match"


def test_bad_settings_are_config_errors(test_db: Any) -> None:
    with pytest.raises(ConfigError, match="timeout_s"):
        ExecScorer(timeout_s=0)
    with pytest.raises(ConfigError, match="registered: ex, qatch, rex, spider"):
        ExecScorer().score(test_db, "SELECT 1", "SELECT 1", metric="bleu")
    with pytest.raises(ConfigError, match="did you mean 'qatch'"):
        ExecScorer().score(test_db, "SELECT 1", "SELECT 1", metric="qatc")


def _first_word_is_select(sql: str) -> bool:
    return sql.lstrip().upper().startswith("SELECT")


def test_a_registered_metric_scores_with_its_order_rule(test_db: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from rex import METRICS, register_metric
    from tools.plugins import Registry

    fresh: Registry[Any] = Registry("execution metric")
    for name in METRICS.names():
        fresh.register(name)(METRICS.get(name))
    monkeypatch.setattr("rex.scorer.METRICS", fresh)  # the test's metric leaves the real registry alone
    seen: list[Any] = []

    @register_metric("row_ratio", order_rule=_first_word_is_select)
    def row_ratio(gold: Any, pred: Any, ordered: bool | None, outcome: str) -> tuple[float, dict[str, Any]]:
        seen.append(ordered)
        return min(len(pred.rows), len(gold.rows)) / max(len(pred.rows), len(gold.rows), 1), {"row_ratio": "rows"}

    out = ExecScorer().score(test_db, "SELECT id FROM people", "SELECT id FROM people LIMIT 1", metric="row_ratio")
    count = ExecScorer().execute(test_db, "SELECT COUNT(*) FROM people").rows[0][0]
    assert seen == [True] and out.details["row_ratio"] == "rows" and out.details["ordered"] is True
    assert 0.0 < out.score < 1.0 and out.outcome == "mismatch" and out.metric == "row_ratio"
    assert count > 1 and out.score == pytest.approx(1 / count)
    failed = ExecScorer().score(test_db, "SELECT id FROM people", "SELECT nope FROM people", metric="row_ratio")
    assert failed.score == 0.0 and len(seen) == 1  # a failing prediction never reaches the metric

    with pytest.raises(ValueError, match="already registered"):
        register_metric("ex")(row_ratio)
    register_metric("ex", replace=True)(row_ratio)
    assert fresh.get("ex") is row_ratio


def test_scorer_pickles_for_process_pools(test_db: Any) -> None:
    scorer = ExecScorer(timeout_s=3)
    scorer.score(test_db, "SELECT 1", "SELECT 1")
    clone = pickle.loads(pickle.dumps(scorer))
    assert clone.timeout_s == 3 and clone.hits == 0
    assert clone.score(test_db, "SELECT 1", "SELECT 1.0").outcome == "match"


def test_cli_compare_prints_one_json_object(test_db_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "rex",
            "compare",
            "--db",
            str(test_db_path),
            "--gold",
            "SELECT name, age FROM people ORDER BY id",
            "--pred",
            "SELECT age, name FROM people ORDER BY id",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["ex"] == "mismatch" and report["ex_official"] == "mismatch"
    assert report["rex"] == 1.0 and report["qatch"]["mean"] == 1.0
    assert report["gold"]["tables"] == ["people"]
    assert report["gold"]["columns"] == ["people.age", "people.id", "people.name"]
    assert report["gold"]["ordered"] is True and report["pred"]["row_count"] == 6


def test_cli_reports_errors_and_bad_paths(test_db_path: Path, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "rex", "compare", "--db", str(test_db_path), "--gold", "SELECT 1", "--pred", "SELEC 1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    report = json.loads(proc.stdout)
    assert report["ex"] == "pred_error" and report["rex"] is None and report["pred"]["error"]["kind"] == "syntax"
    missing = subprocess.run(
        [
            sys.executable,
            "-m",
            "rex",
            "compare",
            "--db",
            str(tmp_path / "none.sqlite"),
            "--gold",
            "SELECT 1",
            "--pred",
            "SELECT 1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert missing.returncode == 2 and "none.sqlite" in missing.stderr


def test_scorer_is_thread_safe(test_db: Any) -> None:
    from concurrent.futures import ThreadPoolExecutor

    scorer = ExecScorer()
    golds = [f"SELECT id, val FROM big WHERE grp = {g}" for g in range(7)]

    def work(i: int) -> tuple[str, float]:
        gold = golds[i % 7]
        pred = gold if i % 2 else gold + " AND id > 600"
        s = scorer.score(test_db, gold, pred, "rex")
        return s.outcome, s.score

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(work, range(200)))
    assert all(o == "match" and sc == 1.0 for o, sc in results[1::2])
    assert all(o == "mismatch" and 0.4 < sc < 0.6 for o, sc in results[0::2])
    assert scorer.hits + scorer.misses == 200 and scorer.misses >= 7


def test_gold_cache_is_bounded_by_entries_and_cells(test_db: Any) -> None:
    scorer = ExecScorer(gold_cache_size=2, gold_cache_cells=1300)
    for g in range(3):  # 3 entries of 1 cell each: the oldest is evicted
        scorer.score(test_db, f"SELECT {g}", "SELECT 1")
    scorer.score(test_db, "SELECT 0", "SELECT 1")
    assert scorer.misses == 4
    scorer.score(test_db, "SELECT id FROM big", "SELECT 1")  # 1,200 cells: fits alone
    scorer.score(test_db, "SELECT id, val FROM big", "SELECT 1")  # 2,400 cells: never cached
    scorer.score(test_db, "SELECT id, val FROM big", "SELECT 1")
    scorer.score(test_db, "SELECT id FROM big", "SELECT 1")
    assert (scorer.misses, scorer.hits) == (7, 1)
