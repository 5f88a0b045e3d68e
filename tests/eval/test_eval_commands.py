"""The ``eval.run`` commands a user types: scoring a predictions file names its split with
``data.split`` (there is no training split to hold out), and a model served elsewhere
(``model.base_url``) is scored on every question on a machine without a GPU - the laptop
caps on question count are for local compute - unless ``eval.limit`` says otherwise."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from eval.data import load_examples
from tests.eval.conftest import OUTCOME_RECORDS, PREDICTIONS, quiet, write_bird, write_jsonl
from tests.eval.test_eval_concurrency import scripted_server
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.schools import QUESTIONS, make_db, school_rows
from tests.helpers.tiny_model import tiny_tokenizer
from tools.errors import ConfigError
from training.config import TrainConfig, compose_tree


def _run(*overrides: str, say: Callable[[str], None] = quiet) -> dict | None:
    from eval.run import run

    return run(compose_tree("eval", overrides), {o.split("=", 1)[0].lstrip("+") for o in overrides}, say)


# ------------------------------------------------------------- data.split names the split


@pytest.mark.slow
def test_scoring_a_predictions_file_takes_data_split_as_the_split_to_score(bird: Path, tmp_path: Path) -> None:
    preds = write_jsonl(tmp_path / "predict.jsonl", PREDICTIONS)
    common = (f"predictions={preds}", "data=bird", f"data.root={bird}", "eval.timeout_s=1")
    summary = _run(*common, "data.split=dev", f"eval.out_dir={tmp_path / 'a'}")
    assert summary is not None and summary["n"] == 7 and summary["ex_official"] == pytest.approx(2 / 7)
    assert json.loads((tmp_path / "a" / "run.json").read_text())["split"] == "dev"
    # data.split names a split that is not data.eval_split's: that split is scored
    write_bird(bird, split="test", records=OUTCOME_RECORDS)
    summary = _run(*common, "data.split=test", f"eval.out_dir={tmp_path / 'b'}")
    assert summary is not None and json.loads((tmp_path / "b" / "run.json").read_text())["split"] == "test"
    lines: list[str] = []
    _run(*common, "data.split=test", "dry_run=true", say=lines.append)
    assert "on bird/test" in lines[0]
    with pytest.raises(ConfigError, match="data.split=dev and data.eval_split=test: .* pass only one"):
        _run(*common, "data.split=dev", "data.eval_split=test", f"eval.out_dir={tmp_path / 'c'}")


def test_a_run_with_a_training_split_still_holds_validation_out() -> None:
    """Training, and a model's evaluation (its few-shot pool is data.split), still refuse
    to validate on the split they read."""
    raw = compose_tree("config", ["recipe=think2sql", "data=bird", "data.split=dev"])
    with pytest.raises(ConfigError, match="data.split and data.eval_split are both 'dev': validation must be held out"):
        TrainConfig.from_mapping(raw)
    with pytest.raises(ConfigError, match="validation must be held out"):
        _run("recipe=think2sql", "data=bird", "data.split=dev", "dry_run=true")


# ------------------------------------------------------------- an endpoint on a CPU machine


def _dry(*overrides: str) -> str:
    lines: list[str] = []
    assert _run(*overrides, "dry_run=true", say=lines.append) is None
    return "\n".join(lines)


def test_an_endpoint_on_cpu_is_not_capped_in_questions_but_a_local_model_is() -> None:
    endpoint = ("recipe=think2sql", "engine.device=cpu", "model.base_url=http://127.0.0.1:9/v1", "model.name=served")
    text = _dry(*endpoint)
    assert "questions: all" in text and "question count not capped: the model is served at" in text
    assert "laptop profile: on" in text  # the other caps still print and apply
    assert "questions: 3" in _dry(*endpoint, "eval.limit=3")  # the user's limit wins
    assert "questions: 8" in _dry("recipe=think2sql", "engine.device=cpu")  # local compute: capped


@pytest.fixture(scope="module")
def twelve_questions(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """More questions than the laptop profile's 8, on one real SQLite database."""
    root = tmp_path_factory.mktemp("schools")
    make_db(root / "schools.sqlite")
    rows = school_rows(copies=3)
    assert len(rows) > 8
    write_jsonl(root / "dev.jsonl", rows)
    return root


def test_an_endpoint_evaluation_scores_every_question_on_cpu(twelve_questions: Path, tmp_path: Path) -> None:
    tiny_tokenizer().save_pretrained(tmp_path / "tok")
    examples = load_examples("jsonl", twelve_questions, "dev")
    with FakeOpenAI(scripted_server("think2sql", examples)) as server:
        common = (
            "recipe=think2sql",
            f"model.path={tmp_path / 'tok'}",
            f"model.base_url={server.base_url}",
            "model.name=served",
            "data=jsonl",
            f"data.root={twelve_questions}",
            "engine.device=cpu",
            "rollout.max_new_tokens=200",
        )
        every = _run(*common, f"eval.out_dir={tmp_path / 'all'}")
        limited = _run(*common, "eval.limit=5", f"eval.out_dir={tmp_path / 'five'}")
    assert every is not None and limited is not None
    assert every["n"] == len(examples) == 3 * len(QUESTIONS) and limited["n"] == 5
    assert every["endpoint"]["failed_samples"] == 0 and every["outcomes"]["match"] > 0
