"""eval.compare on an eval.run output and a training run directory written by the real
writers (``eval.run`` records/summary, ``training.runs.logger.RunLogger``)."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from eval.compare import compare, load_run
from eval.data import load_examples
from eval.evaluate import evaluate_predictions
from tests.eval.conftest import write_bird
from tools.errors import DataError

REPO = Path(__file__).resolve().parents[2]
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def runs(tmp_path: Path) -> tuple[Path, Path]:
    """An eval run on the BIRD-layout fixture and a three-step training run."""
    bird = write_bird(tmp_path / "bird").parent
    examples = load_examples("bird", bird, "dev")
    preds = tmp_path / "preds.jsonl"
    preds.write_text(
        "".join(
            json.dumps(p) + "\n"
            for p in [
                {"question_id": 10, "db_id": "music", "sql": "SELECT COUNT(*) FROM singer"},  # simple: match
                {"question_id": 11, "db_id": "music", "sql": "SELECT 1"},  # simple: mismatch
                {"question_id": 12, "db_id": "music", "sql": "SELECT name FROM singer WHERE 0"},  # moderate: mismatch
                {"question_id": 13, "db_id": "shop", "sql": "SELECT * FROM item"},  # simple: match
            ]
        )
    )
    eval_dir = tmp_path / "eval-run"
    evaluate_predictions(examples, preds, eval_dir, say=lambda _: None, progress=False)

    from training.runs.logger import RunLogger

    train_dir = tmp_path / "train-run"
    logger = RunLogger(train_dir, sinks=[], total_steps=3, say=lambda _: None)
    logger.log(0, {"ex": 0.25, "n": 4}, kind="eval_before")
    for step, (reward, ex) in enumerate([(0.5, 0.0), (1.0, 0.25), (1.5, 0.5)], start=1):
        logger.log(step, {"reward/total": reward, "ex/batch": ex, "kl/beta": 0.0})
    logger.log(3, {"ex": 0.5, "n": 4}, kind="eval_after")
    logger.close()
    return eval_dir, train_dir


def test_table_csv_and_plots(runs: tuple[Path, Path], tmp_path: Path) -> None:
    eval_dir, train_dir = runs
    said: list[str] = []
    out = compare([eval_dir, train_dir], tmp_path / "cmp", use_wandb=True, say=said.append)
    header, rows = out["header"], out["rows"]
    assert header[:10] == ["run", "kind", "n", "EX", "EX official", "EX suite", "EX before", "REX", "QATCH", "SC EX"]
    assert header[10:13] == ["EX simple", "EX moderate"] + ["pass@1"]
    ev = dict(zip(header, rows[0], strict=True))
    assert ev["run"] == "eval-run" and ev["kind"] == "eval" and ev["n"] == 4
    assert ev["EX"] == pytest.approx(0.5) and ev["EX simple"] == pytest.approx(2 / 3) and ev["EX moderate"] == 0.0
    assert 0.0 <= ev["EX suite"] <= ev["EX"]  # eval.run reports test-suite EX by default
    tr = dict(zip(header, rows[1], strict=True))
    assert (tr["kind"], tr["EX before"], tr["EX"], tr["EX simple"]) == ("train", 0.25, 0.5, None)
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert "| eval-run | eval | 4 | 50.0% | 50.0% |" in md and "| train-run | train | 4 | 50.0% | - | - | 25.0% |" in md
    with open(tmp_path / "cmp" / "compare.csv") as f:
        table = list(csv.DictReader(f))
    assert float(table[0]["EX simple"]) == pytest.approx(2 / 3) and table[1]["EX simple"] == ""
    for name in ("ex_by_difficulty.png", "training_curves.png"):
        data = (tmp_path / "cmp" / name).read_bytes()
        assert data.startswith(PNG) and len(data) > 5000
    assert any(md.split("\n\n", 1)[1].strip() in line for line in said)  # the table is printed
    assert out["wandb"] is False and any("wandb is offline" in line for line in said)


def test_training_curves_read_the_metrics_jsonl(runs: tuple[Path, Path]) -> None:
    view = load_run(runs[1] / "metrics.jsonl")
    assert view.kind == "train" and view.steps == [1, 2, 3]
    assert view.curves["reward/total"] == [0.5, 1.0, 1.5] and view.curves["ex/batch"] == [0.0, 0.25, 0.5]


def test_not_a_run_directory(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="neither an eval.run summary.json nor a training metrics.jsonl"):
        load_run(tmp_path)
    with pytest.raises(DataError, match="no such run directory"):
        load_run(tmp_path / "missing")


@pytest.mark.slow
def test_entry_point_from_a_temporary_directory(runs: tuple[Path, Path], tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    env = dict(os.environ, PYTHONPATH=str(REPO), WANDB_MODE="offline")
    proc = subprocess.run(
        [sys.executable, "-m", "eval.compare", str(runs[0]), str(runs[1]), "--out", "cmp"],
        check=False,
        cwd=work,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "| eval-run | eval |" in proc.stdout and "wandb is offline" in proc.stdout
    assert sorted(p.name for p in (work / "cmp").iterdir()) == [
        "compare.csv",
        "compare.md",
        "ex_by_difficulty.png",
        "training_curves.png",
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "eval.compare", str(tmp_path / "nothing")],
        check=False,
        cwd=work,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 2 and "no such run directory" in proc.stderr and "Traceback" not in proc.stderr


def test_wandb_report_when_online(runs: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Online: one wandb run with the comparison table and both plots (a stand-in module
    records the calls; nothing leaves the machine)."""
    import types

    logged: dict = {}

    class FakeRun:
        url = "https://wandb.example/run"

        def log(self, payload: dict) -> None:
            logged.update(payload)

        def finish(self) -> None:
            logged["finished"] = True

    fake = types.SimpleNamespace(
        init=lambda **kw: logged.setdefault("init", kw) and FakeRun(),
        Table=lambda columns, data: ("table", columns, data),
        Image=lambda path: ("image", path),
    )
    monkeypatch.setitem(sys.modules, "wandb", fake)
    monkeypatch.setenv("WANDB_MODE", "online")
    out = compare(list(runs), tmp_path / "cmp", project="p", say=lambda _: None)
    assert out["wandb"] is True and logged["finished"] and logged["init"]["project"] == "p"
    kind, columns, data = logged["comparison"]
    assert kind == "table" and columns[0] == "run" and [row[0] for row in data] == ["eval-run", "train-run"]
    assert logged["ex_by_difficulty"][1].endswith("ex_by_difficulty.png") and "training_curves" in logged
