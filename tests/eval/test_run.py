"""eval.run, the command line: the entry point in a subprocess (a predictions file, a saved
model), the eval config composed from the training groups, the settings checks, and the
dry run that prints the papers' evaluation settings and the laptop caps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from eval.settings import EvalSettings
from tests.eval.conftest import PREDICTIONS, quiet, write_jsonl
from tools.errors import ConfigError
from training.config import compose_tree

REPO = Path(__file__).resolve().parents[2]


def test_settings_validation() -> None:
    with pytest.raises(ConfigError, match="eval.mode='beam'"):
        EvalSettings(mode="beam")
    with pytest.raises(ConfigError, match="use eval.mode=sc or eval.mode=passk"):
        EvalSettings(mode="greedy", samples=4)
    assert EvalSettings(mode="sc").num_samples == 16 and EvalSettings().num_samples == 1


def _run(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), WANDB_MODE="offline")
    return subprocess.run(
        [sys.executable, "-m", "eval.run", *args],
        check=False,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )


@pytest.mark.slow
def test_entry_point_scores_a_predictions_file(bird: Path, tmp_path: Path) -> None:
    preds = write_jsonl(tmp_path / "preds.jsonl", PREDICTIONS)
    work = tmp_path / "work"
    work.mkdir()
    proc = _run(work, f"predictions={preds}", "data=bird", f"data.root={bird}", "eval.timeout_s=1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = work / "runs" / "eval" / "preds-bird-dev-greedy"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["ex_official"] == pytest.approx(2 / 7) and summary["outcomes"]["missing"] == 1
    assert "EX 33.3% (official 28.6%) on 7 questions" in proc.stdout
    assert sorted(p.name for p in work.iterdir()) == ["runs"]  # nothing else written in the working directory
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"question_id": 13, "db_id": "music", "sql": "SELECT 1"}])
    proc = _run(work, f"predictions={bad}", "data=bird", f"data.root={bird}")
    assert proc.returncode == 2 and "question 13" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_entry_point_runs_a_saved_model(bird: Path, tmp_path: Path) -> None:
    from tests.helpers.tiny_model import tiny_model, tiny_tokenizer

    model_dir = tmp_path / "tiny"
    tiny_model().save_pretrained(model_dir)
    tiny_tokenizer().save_pretrained(model_dir)
    proc = _run(
        tmp_path,
        "recipe=think2sql",
        f"model.path={model_dir}",
        "data=bird",
        f"data.root={bird}",
        "data.split=dev2",
        "eval.limit=2",
        "rollout.max_new_tokens=4",
        "engine.device=cpu",
        f"eval.out_dir={tmp_path / 'out'}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["n"] == 2 and summary["settings"]["model"] == str(model_dir)
    assert summary["settings"]["recipe"] == "think2sql" and summary["behaviour"]["policy_tokens"] <= 4
    assert "[data] bird/dev: evaluating 2 of 7 questions" in proc.stdout


def _compose(*overrides: str) -> dict:
    return compose_tree("eval", overrides)


def test_eval_config_reuses_the_training_groups_and_recipes() -> None:
    from eval.run import run

    raw = _compose("recipe=trustsql", "eval.mode=sc", "eval.samples=4")
    assert raw["agent"]["name"] == "trustsql" and raw["agent"]["max_turns_inference"] == 15
    assert raw["rollout"]["temperature"] == 0.8 and raw["model"]["path"] is None
    assert raw["data"]["drop_failing_gold"] is False  # gold errors are an outcome, not dropped
    assert raw["eval"] == {
        "mode": "sc",
        "samples": 4,
        "temperature": None,
        "limit": None,
        "out_dir": None,
        "fresh": False,
        "batch_size": 8,
        "timeout_s": 30.0,
        "max_result_rows": 1_000_000,
        "max_result_bytes": 128 << 20,
        "ex_metric": None,
        "test_suite": True,
    }
    with pytest.raises(ConfigError, match="pass recipe=<name> to evaluate a model .* or predictions=PATH"):
        run(_compose(), set(), say=quiet)
    with pytest.raises(ConfigError, match="unknown eval option"):
        run(_compose("recipe=think2sql", "+eval.sample=3"), set(), say=quiet)


def test_predictions_with_sampling_modes_is_refused(bird: Path, tmp_path: Path) -> None:
    from eval.run import run

    preds = write_jsonl(tmp_path / "p.jsonl", PREDICTIONS)
    raw = _compose(
        f"predictions={preds}", "data=bird", f"data.root={bird}", "eval.mode=sc", f"eval.out_dir={tmp_path / 'o'}"
    )
    with pytest.raises(ConfigError, match="needs a model"):
        run(raw, set(), say=quiet)


def _dry(*overrides: str) -> str:
    from eval.run import run
    from training.run import explicit_keys

    lines: list[str] = []
    assert run(_compose(*overrides, "dry_run=true"), explicit_keys(overrides), say=lines.append) is None
    return "\n".join(lines)


def test_dry_run_prints_the_papers_evaluation_settings_and_exits(tmp_path: Path) -> None:
    text = _dry("recipe=think2sql", "engine.laptop_profile=off", f"eval.out_dir={tmp_path / 'never'}")
    assert "decoding: sample: 1 sample(s) at T 0.7, top-p 0.95" in text
    assert "questions: all" in text and "laptop profile: off" in text
    assert not (tmp_path / "never").exists()  # nothing evaluated, nothing written
    text = _dry("recipe=retoolsql", "engine.laptop_profile=off", "eval.mode=sc")
    assert "sc: 16 sample(s) at T 1.2, top-p 0.95" in text
    text = _dry("recipe=trustsql", "engine.laptop_profile=off")
    assert "greedy (temperature 0)" in text and "max_turns_inference=15" in text and "observations: 1024" in text


def test_on_cpu_eval_applies_the_laptop_caps_printed_and_overridable() -> None:
    text = _dry("recipe=think2sql", "engine.device=cpu")
    assert "[laptop profile] CPU" in text and "evaluation.mode: sample -> greedy" in text
    assert "decoding: greedy" in text and "questions: 8" in text and "128 per call" in text
    text = _dry("recipe=retoolsql", "engine.device=cpu", "eval.mode=sc", "eval.limit=3")
    assert "sc: 4 sample(s) at T 1.2" in text and "questions: 3" in text  # 16 samples capped to 4 on CPU
    text = _dry("recipe=retoolsql", "engine.device=cpu", "eval.mode=sc", "eval.samples=6")
    assert "sc: 6 sample(s)" in text
