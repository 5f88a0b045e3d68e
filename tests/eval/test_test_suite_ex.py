"""``ex_test_suite`` in eval.run's records, summary and report: an EX match the test suite
rejects is counted in EX and not in test-suite EX, with the neighbour that rejected it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agents.types import Example
from eval.evaluate import evaluate_predictions
from eval.settings import EvalSettings
from tests.eval.conftest import quiet, write_jsonl
from tests.rex.test_suite.conftest import IN_OSLO, OVER_100, build_shop


@pytest.fixture
def shop_examples(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Example]:
    monkeypatch.setenv("SQLAGENT_RL_CACHE", str(tmp_path / "cache"))
    db = build_shop(tmp_path / "shop.sqlite")
    golds = [OVER_100, IN_OSLO, "SELECT COUNT(*) FROM orders WHERE status = 'refunded'"]
    return [
        Example(id=str(i), db_id="shop", db_path=str(db), question=f"q{i}", gold_sql=sql, difficulty="simple")
        for i, sql in enumerate(golds)
    ]


def run(examples: list[Example], tmp_path: Path, **settings: object) -> tuple[dict, dict[str, dict]]:
    preds = write_jsonl(
        tmp_path / "preds.jsonl",
        [
            {"question_id": "0", "db_id": "shop", "sql": "SELECT COUNT(*) FROM orders"},  # matches on the original only
            {"question_id": "1", "db_id": "shop", "sql": "SELECT c.name FROM customers AS c WHERE c.city IN ('Oslo')"},
            {"question_id": "2", "db_id": "shop", "sql": "SELECT COUNT(*) FROM orders WHERE status = 'paid'"},
        ],
    )
    out = tmp_path / "out"
    summary = evaluate_predictions(examples, preds, out, EvalSettings(**settings), say=quiet, progress=False)  # type: ignore[arg-type]
    records = {r["id"]: r for r in map(json.loads, (out / "records.jsonl").read_text().splitlines())}
    return summary, records


def test_records_summary_and_report_carry_test_suite_ex(shop_examples: list[Example], tmp_path: Path) -> None:
    summary, records = run(shop_examples, tmp_path)
    assert [(records[i]["ex"], records[i]["ex_test_suite"]) for i in "012"] == [(1, 0), (1, 1), (0, 0)]
    assert records["0"]["details"]["suite_rejected"] is True
    assert records["0"]["details"]["suite_neighbour"] in range(4)
    assert "suite_rejected" not in records["1"]["details"]
    assert summary["ex"] == pytest.approx(2 / 3) and summary["ex_test_suite"] == pytest.approx(1 / 3)
    assert summary["by_difficulty"]["simple"]["ex_test_suite"] == pytest.approx(1 / 3)
    report = (tmp_path / "out" / "report.md").read_text()
    assert "| EX on the test suite (the database and its neighbours) | 33.3% |" in report
    assert "| difficulty | n | EX | EX official | EX suite | REX | QATCH |" in report


def test_eval_test_suite_false_leaves_it_out(shop_examples: list[Example], tmp_path: Path) -> None:
    summary, records = run(shop_examples, tmp_path, test_suite=False)
    assert "ex_test_suite" not in summary and all("ex_test_suite" not in r for r in records.values())
    assert not (tmp_path / "cache" / "test_suites").exists()
    assert "EX suite" not in (tmp_path / "out" / "report.md").read_text()
