"""eval.evaluate on predictions files: pairing, db_id checks, missing, outcomes and EX per
difficulty, BIRD's official format, the bundled benchmark, and the settings in report.md."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from eval.data import load_examples
from eval.evaluate import evaluate_predictions
from eval.settings import EvalSettings
from tests.eval.conftest import PREDICTIONS, quiet, write_jsonl
from tools.errors import DataError


def test_predictions_give_the_expected_outcomes_and_ex_per_difficulty(bird: Path, tmp_path: Path) -> None:
    examples = load_examples("bird", bird, "dev")
    preds = write_jsonl(tmp_path / "preds.jsonl", PREDICTIONS)
    s = evaluate_predictions(examples, preds, tmp_path / "out", EvalSettings(timeout_s=1.0), say=quiet, progress=False)
    records = {r["id"]: r for r in map(json.loads, (tmp_path / "out" / "records.jsonl").read_text().splitlines())}
    assert {i: r["outcome"] for i, r in records.items()} == {
        "10": "match",
        "11": "mismatch",
        "12": "match",
        "13": "pred_error",
        "14": "gold_error",
        "15": "missing",
        "16": "pred_timeout",
    }
    assert s["outcomes"] == {
        "match": 2,
        "mismatch": 1,
        "pred_error": 1,
        "pred_timeout": 1,
        "pred_too_large": 0,
        "gold_error": 1,
        "gold_timeout": 0,
        "gold_too_large": 0,
        "missing": 1,
    }
    assert (s["n"], s["scorable"], s["missing"]) == (7, 6, 1)
    assert s["ex"] == pytest.approx(2 / 6)  # gold error left out of the denominator
    assert s["ex_official"] == pytest.approx(2 / 7)  # every error counts as wrong
    by = s["by_difficulty"]
    assert list(by) == ["simple", "moderate", "challenging"]
    assert (by["simple"]["n"], by["simple"]["ex"]) == (3, pytest.approx(1 / 3))
    assert (by["moderate"]["n"], by["moderate"]["ex"]) == (2, pytest.approx(0.5))
    assert (by["challenging"]["n"], by["challenging"]["scorable"], by["challenging"]["ex"]) == (2, 1, 0.0)
    assert by["challenging"]["ex_official"] == 0.0
    # REX: 12 is ordered by gold's ORDER BY and reversed -> only the middle row keeps its place
    assert records["12"]["rex"] == pytest.approx(1 / 3)
    assert records["10"]["rex"] == 1.0 and records["11"]["qatch"]["tc"] == 1.0
    report = (tmp_path / "out" / "report.md").read_text()
    assert "| moderate | 2 | 50.0% |" in report and "| missing | 1 |" in report
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["ex_official"] == pytest.approx(2 / 7)
    # predict.json in BIRD's format reads back as the same predictions (missing ones as '')
    again = evaluate_predictions(
        load_examples("bird", bird, "dev"),
        tmp_path / "out" / "predict.json",
        tmp_path / "again",
        EvalSettings(timeout_s=1.0),
        say=quiet,
        progress=False,
    )
    assert again["matches"] == s["matches"] and again["outcomes"]["pred_error"] == 2


def test_bird_official_dict_format_pairs_by_position(bird: Path, tmp_path: Path) -> None:
    """The i-th value answers the i-th question, as BIRD's evaluation_ex.py pairs them (the
    questions' ids here are 10..16; MINIDEV's cases are in tests/eval/test_minidev.py)."""
    examples = load_examples("bird", bird, "dev")
    sep = "\t----- bird -----\t"
    preds = tmp_path / "predict_dev.json"
    preds.write_text(
        json.dumps(
            {
                "0": "SELECT COUNT(*) FROM singer" + sep + "music",
                "1": "SELECT name FROM singer WHERE country = 'Spain'" + sep + "music",
            },
            indent=2,
        )
    )
    said: list[str] = []
    s = evaluate_predictions(examples, preds, tmp_path / "out", say=said.append, progress=False)
    # five questions have no prediction; one of them has a failing gold SQL, so it is a gold_error
    assert s["outcomes"]["match"] == 2 and s["missing"] == 5
    assert s["outcomes"]["missing"] == 4 and s["outcomes"]["gold_error"] == 1
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["unmatched_predictions"] == 0
    assert any(
        "has 2 predictions for the 7 questions of the question file: positions 2..6 have none" in x for x in said
    )


def test_db_id_mismatch_names_the_id_and_both_db_ids(bird: Path, tmp_path: Path) -> None:
    examples = load_examples("bird", bird, "dev")
    preds = write_jsonl(tmp_path / "p.jsonl", [{"question_id": 13, "db_id": "music", "sql": "SELECT 1"}])
    with pytest.raises(DataError, match=r"question 13: .* db_id 'music' but the question's db_id is 'shop'"):
        evaluate_predictions(examples, preds, tmp_path / "out", say=quiet, progress=False)


def test_bad_prediction_files_are_reported_whole(bird: Path, tmp_path: Path) -> None:
    examples = load_examples("bird", bird, "dev")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"question_id": 10, "sql": "SELECT 1"}\nnot json\n'
        '{"question_id": 11, "db_id": "music", "sql": "x"}\n{"question_id": 11, "db_id": "music", "sql": "y"}\n'
    )
    with pytest.raises(DataError) as err:
        evaluate_predictions(examples, bad, tmp_path / "out", say=quiet, progress=False)
    text = str(err.value)
    assert "bad.jsonl:1: missing db_id" in text and "bad.jsonl:2: not valid JSON" in text
    assert "predicted twice" in text
    other = write_jsonl(tmp_path / "other.jsonl", [{"question_id": 99, "db_id": "music", "sql": "SELECT 1"}])
    with pytest.raises(DataError, match="none of the 1 predictions"):
        evaluate_predictions(examples, other, tmp_path / "out2", say=quiet, progress=False)
    with pytest.raises(DataError, match="no such file"):
        evaluate_predictions(examples, tmp_path / "nope.jsonl", tmp_path / "out3", say=quiet, progress=False)


@pytest.mark.slow
def test_bundled_benchmark_ex_per_difficulty_matches_the_data_file(minibird_root: Path, tmp_path: Path) -> None:
    """Gold SQL as predictions on every minibird dev question except, per difficulty, one
    broken and one missing prediction: EX per difficulty is exactly (n - 2) / n with n
    counted from the data file itself."""
    raw = json.loads((minibird_root / "dev" / "dev.json").read_text())
    counts = Counter(q["difficulty"] for q in raw)
    examples = load_examples("minibird", minibird_root, "dev")
    broken, missing, rows = set(), set(), []
    for ex in examples:
        if ex.difficulty not in {examples[i].difficulty for i in broken}:
            broken.add(examples.index(ex))
            rows.append({"question_id": ex.id, "db_id": ex.db_id, "sql": "SELECT * FROM no_such_table"})
        elif ex.difficulty not in {examples[i].difficulty for i in missing}:
            missing.add(examples.index(ex))
        else:
            rows.append({"question_id": ex.id, "db_id": ex.db_id, "sql": ex.gold_sql})
    preds = write_jsonl(tmp_path / "gold.jsonl", rows)
    s = evaluate_predictions(examples, preds, tmp_path / "out", say=quiet, progress=False)
    assert {d: b["n"] for d, b in s["by_difficulty"].items()} == dict(counts)
    for d, n in counts.items():
        assert s["by_difficulty"][d]["ex"] == pytest.approx((n - 2) / n)
        assert s["by_difficulty"][d]["outcomes"]["missing"] == 1
    assert s["outcomes"]["pred_error"] == len(counts) and s["outcomes"]["match"] == len(raw) - 2 * len(counts)
    assert s["rex"] == pytest.approx(s["ex"]) and s["qatch"]["mean"] == pytest.approx(s["ex"])


def test_report_states_the_evaluation_settings(bird: Path, tmp_path: Path) -> None:
    from eval.evaluate import decoding_section

    section = decoding_section(
        {"mode": "sample", "samples": 1, "temperature": 0.7, "top_p": 0.95, "max_new_tokens": 30000, "ex_metric": "ex"}
    )
    assert "## Evaluation settings" in section and "- temperature: 0.7" in section and "- top_p: 0.95" in section
    preds = write_jsonl(tmp_path / "preds.jsonl", PREDICTIONS)
    examples = load_examples("bird", bird, "dev")
    evaluate_predictions(
        examples,
        preds,
        tmp_path / "out",
        EvalSettings(timeout_s=1.0),
        say=quiet,
        progress=False,
        data_info={"ex_metric": "ex"},
    )
    assert "## Evaluation settings" in (tmp_path / "out" / "report.md").read_text()
