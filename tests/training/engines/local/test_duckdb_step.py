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
    assert 0.0 < metrics["ex/batch"] < 1.0, metrics  # the scripted policy's right and wrong answers, told apart on DuckDB
    assert metrics["reward/exec"] > 0.0
    assert changed(before, t.model) > 1e-6
    systems = [tr.messages[0]["content"] for tr in t.last_buffer.trajectories]
    assert systems and all("SQLite" not in text for text in systems)  # the prompts name DuckDB instead
    if recipe != "dualsql":  # DualSQL's linker prompt names no dialect
        assert all("DuckDB" in text for text in systems)
