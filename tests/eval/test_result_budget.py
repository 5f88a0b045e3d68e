"""eval.run's result budget: set in the eval block, a prediction past it is counted as
``pred_too_large`` (wrong, reported on its own line), a gold result past it as
``gold_too_large`` (not scorable), and self-consistency drops a too-large candidate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eval.data import load_examples
from eval.evaluate import evaluate_predictions
from eval.settings import settings_from
from eval.voting import self_consistency
from rex import ExecScorer
from tests.eval.conftest import make_music_db, quiet, write_bird, write_jsonl
from tools import get_database
from tools.errors import ConfigError

CROSS = "SELECT * FROM singer a, singer b"  # 16 rows: past a 10-row budget

RECORDS = [
    {"question_id": 1, "db_id": "music", "question": "How many singers?", "evidence": "",
     "SQL": "SELECT COUNT(*) FROM singer", "difficulty": "simple"},
    {"question_id": 2, "db_id": "music", "question": "Every pair of singers?", "evidence": "",
     "SQL": "SELECT a.name, b.name FROM singer a, singer b", "difficulty": "simple"},
    {"question_id": 3, "db_id": "music", "question": "Singers from Spain?", "evidence": "",
     "SQL": "SELECT name FROM singer WHERE country = 'Spain'", "difficulty": "simple"},
]  # fmt: skip
PREDICTIONS = [
    {"question_id": 1, "db_id": "music", "sql": CROSS},  # pred_too_large
    {"question_id": 2, "db_id": "music", "sql": "SELECT name FROM singer"},  # gold_too_large
    {"question_id": 3, "db_id": "music", "sql": "SELECT name FROM singer WHERE country = 'Spain'"},  # match
]
BUDGET = {"eval": {"max_result_rows": 10, "max_result_bytes": None, "timeout_s": 5.0}}


def test_the_summary_and_report_count_too_large_results_apart(tmp_path: Path) -> None:
    root = write_bird(tmp_path / "bird", records=RECORDS, dbs=("music",)).parent
    preds = write_jsonl(tmp_path / "preds.jsonl", PREDICTIONS)
    out = tmp_path / "out"
    s = evaluate_predictions(
        load_examples("bird", root, "dev"), preds, out, settings_from(BUDGET), say=quiet, progress=False
    )
    records = {r["id"]: r for r in map(json.loads, (out / "records.jsonl").read_text().splitlines())}
    assert {i: r["outcome"] for i, r in records.items()} == {"1": "pred_too_large", "2": "gold_too_large", "3": "match"}
    assert records["1"]["details"]["pred_error"].startswith("too_large:")
    assert (records["1"]["ex"], records["1"]["ex_official"], records["1"]["pred_executed"]) == (0, 0, False)
    assert records["2"]["gold_failed"] is True
    assert s["outcomes"] == {
        "match": 1,
        "mismatch": 0,
        "pred_error": 0,
        "pred_timeout": 0,
        "pred_too_large": 1,
        "gold_error": 0,
        "gold_timeout": 0,
        "gold_too_large": 1,
    }
    assert (s["n"], s["scorable"]) == (3, 2)
    assert s["ex"] == pytest.approx(1 / 2)  # the too-large prediction is wrong, the too-large gold left out
    assert s["ex_official"] == pytest.approx(1 / 3)  # every failure is wrong
    report = (out / "report.md").read_text()
    assert "| pred_too_large | 1 |" in report and "| gold_too_large | 1 |" in report


def test_without_a_budget_the_same_predictions_run_whole(tmp_path: Path) -> None:
    root = write_bird(tmp_path / "bird", records=RECORDS, dbs=("music",)).parent
    preds = write_jsonl(tmp_path / "preds.jsonl", PREDICTIONS)
    unbounded = settings_from({"eval": {"max_result_rows": None, "max_result_bytes": None}})
    s = evaluate_predictions(load_examples("bird", root, "dev"), preds, tmp_path / "o", unbounded, say=quiet)
    assert (s["outcomes"]["mismatch"], s["outcomes"]["pred_too_large"], s["outcomes"]["gold_too_large"]) == (2, 0, 0)


@pytest.mark.parametrize("key, value", [("max_result_rows", 0), ("max_result_bytes", -1), ("max_result_rows", "x")])
def test_a_bad_budget_in_the_eval_block_is_a_config_error(key: str, value: object) -> None:
    with pytest.raises(ConfigError, match=rf"eval\.{key}={value!r}"):
        settings_from({"eval": {key: value}})


def test_self_consistency_drops_a_too_large_candidate(tmp_path: Path) -> None:
    db = get_database(make_music_db(tmp_path / "music.sqlite"))
    sqls = [CROSS, "SELECT name FROM singer", "SELECT name FROM singer ORDER BY name"]
    ballot, results = self_consistency(db, sqls, ExecScorer(max_result_rows=10, max_result_bytes=None))
    assert ballot.dropped == ((0, "too_large"),)
    assert (ballot.index, ballot.clusters) == (1, ((1, 2),))
    assert results[0].kind == "too_large"
