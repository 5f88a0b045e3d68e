"""One local training step of each recipe on DuckDB data: the schools questions on a DuckDB
copy of their database, the scripted policy of test_step.py, rewards (EX included) scored
on DuckDB, and an update that changes the tiny model's weights."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.types import Example
from eval.data.duckdb_copy import copy_sqlite_to_duckdb
from tests.helpers.designs import project_designs
from tests.helpers.local_trainer import changed, trainer, weights
from tests.helpers.schools import make_db, school_examples
from tools import get_database
from tools.db.duckdb_backend import DuckDBDatabase

LONG_PROMPTS = {"retoolsql", "dualsql"}
"""Designs whose step costs several seconds on two cores (as in test_step.py): slow tier."""


@pytest.fixture(scope="module")
def duck_examples(tmp_path_factory: pytest.TempPathFactory) -> list[Example]:
    folder = tmp_path_factory.mktemp("duck-db")
    duck = folder / "schools.duckdb"
    copy_sqlite_to_duckdb(make_db(folder / "schools.sqlite"), duck)
    examples = school_examples(duck)
    assert isinstance(get_database(examples[0].db_path), DuckDBDatabase)
    return examples


@pytest.mark.parametrize(
    "recipe", [pytest.param(r, marks=pytest.mark.slow) if r in LONG_PROMPTS else r for r in project_designs()]
)
def test_one_step_on_duckdb_changes_the_weights(recipe: str, tmp_path: Path, duck_examples: list[Example]) -> None:
    t = trainer(recipe, tmp_path, duck_examples, "algorithm.dynamic_sampling.enable=false")
    before = weights(t.model)
    metrics = t.train_step()
    assert metrics["sampling/trajectories_updated"] > 0
    assert 0.0 < metrics["ex/batch"] < 1.0, (
        metrics
    )  # the scripted policy's right and wrong answers, told apart on DuckDB
    assert metrics["reward/exec"] > 0.0
    assert changed(before, t.model) > 1e-6
    systems = [tr.messages[0]["content"] for tr in t.last_buffer.trajectories]
    assert systems and all("SQLite" not in text for text in systems)  # the prompts name DuckDB instead
    if recipe != "dualsql":  # DualSQL's linker prompt names no dialect
        assert all("DuckDB" in text for text in systems)


LOCAL_STEP = [
    "engine=local",
    "engine.device=cpu",
    "trainer.total_steps=1",
    "algorithm.group_size=2",
    "algorithm.batch_size=1",
    "data.limit=4",
    "data.eval_limit=2",
    "rollout.max_new_tokens=256",  # room for the demonstrations' turns (the warm start replays them;
    # the longest takes 193-256 of the tiny tokenizer's tokens) and no more: the tiny model's turns run to it
    "stage.warm_start.examples=4",  # the laptop profile turns the warm start on: 4 demonstrations
    "stage.warm_start.eval_after=false",
    "trainer.eval_before_after=false",
    "logger=[console]",
]
"""test_outside_design.py's one-step overrides, with longer turns."""


@pytest.fixture(scope="module")
def duck_minibird(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from eval.data import minibird
    from eval.data.duckdb_copy import replace_sqlite_files
    from eval.data.minibird.domains import all_domains

    domains = all_domains()
    chosen = [next(d for d in domains if d.split == "train"), next(d for d in domains if d.split == "dev")]
    root = minibird.build(tmp_path_factory.mktemp("duck-minibird") / "mb", chosen)
    replace_sqlite_files(root)
    return root


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("recipe", ["think2sql", "trustsql"])
def test_training_run_takes_a_duckdb_dataset(recipe: str, duck_minibird: Path, tmp_path: Path) -> None:
    """``python -m training.run`` on minibird written as DuckDB files: the warm start replays
    the design's demonstrations (TRUST-SQL's explore turn reads DuckDB's catalogue), then one step."""
    import os
    import subprocess
    import sys

    from tests.helpers.tiny_model import tiny_model, tiny_tokenizer

    model = tmp_path / "tiny"
    tiny_tokenizer().save_pretrained(model)
    tiny_model().save_pretrained(model)
    repo = Path(__file__).resolve().parents[4]
    env = {**os.environ, "PYTHONPATH": str(repo), "SQLAGENT_RL_CACHE": str(tmp_path / "cache")}
    args = [f"recipe={recipe}", "model=hf", f"model.path={model}", f"data.root={duck_minibird}", *LOCAL_STEP]
    done = subprocess.run(
        [sys.executable, "-m", "training.run", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=850,
    )
    console = done.stdout + done.stderr
    assert done.returncode == 0, console[-4000:]
    assert f"[summary] {recipe}: 1 steps." in console
    assert "4/4 training questions demonstrated" in console and "dropped: none" in console  # clean on DuckDB
