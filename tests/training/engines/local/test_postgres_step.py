"""One local training step of each recipe on PostgreSQL data: the schools questions loaded
with ``dsn`` (their database a schema of the test server, read through a SELECT-only
role), the scripted policy of test_step.py, rewards (EX included) scored on the server,
and an update that changes the tiny model's weights; and ``python -m training.run`` with
``data.dsn`` pointing at the server."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest

from agents.types import Example
from eval.data.loaders import load_split
from eval.data.postgres_copy import copy_sqlite_to_postgres, create_reader_role, role_dsn
from tests.helpers.designs import project_designs
from tests.helpers.local_trainer import changed, trainer, weights
from tests.helpers.pg_server import PgServer
from tests.helpers.schools import make_db, school_rows
from tests.training.engines.local.test_duckdb_step import LOCAL_STEP, LONG_PROMPTS
from tools import get_database
from tools.db.postgres_backend import PostgresDatabase


@pytest.fixture(scope="module")
def pg_examples(pg_server: PgServer, tmp_path_factory: pytest.TempPathFactory) -> list[Example]:
    """The schools questions as a JSONL dataset whose database is the server's ``schools`` schema."""
    folder = tmp_path_factory.mktemp("pg-schools")
    (folder / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in school_rows()))
    admin = pg_server.new_database("step")
    with psycopg.connect(admin) as conn:
        copy_sqlite_to_postgres(make_db(folder / "schools.sqlite"), conn, "schools")
        create_reader_role(conn, "step_reader", ["schools"])
        conn.execute("SELECT pg_stat_force_next_flush()")
    (folder / "schools.sqlite").unlink()  # the questions' database is the server's alone
    examples = load_split("jsonl", folder, "train", dsn=role_dsn(admin, "step_reader")).examples
    assert len(examples) == 4 and all(isinstance(get_database(e.db_path), PostgresDatabase) for e in examples)
    return examples


@pytest.mark.parametrize(
    "recipe", [pytest.param(r, marks=pytest.mark.slow) if r in LONG_PROMPTS else r for r in project_designs()]
)
def test_one_step_on_postgres_changes_the_weights(recipe: str, tmp_path: Path, pg_examples: list[Example]) -> None:
    t = trainer(recipe, tmp_path, pg_examples, "algorithm.dynamic_sampling.enable=false")
    before = weights(t.model)
    metrics = t.train_step()
    assert metrics["sampling/trajectories_updated"] > 0
    assert 0.0 < metrics["ex/batch"] < 1.0, metrics  # the scripted policy's right and wrong answers, on the server
    assert metrics["reward/exec"] > 0.0
    assert changed(before, t.model) > 1e-6
    systems = [tr.messages[0]["content"] for tr in t.last_buffer.trajectories]
    assert systems and all("SQLite" not in text for text in systems)  # the prompts name PostgreSQL instead
    if recipe != "dualsql":  # DualSQL's linker prompt names no dialect
        assert all("PostgreSQL" in text for text in systems)


@pytest.fixture(scope="module")
def pg_minibird(pg_server: PgServer, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """minibird (one train and one dev database) and the reader DSN of its copy on the server."""
    from eval.data import minibird
    from eval.data.minibird.domains import all_domains
    from eval.data.postgres_copy import write_postgres

    domains = all_domains()
    chosen = [next(d for d in domains if d.split == "train"), next(d for d in domains if d.split == "dev")]
    root = minibird.build(tmp_path_factory.mktemp("pg-minibird") / "mb", chosen)
    return root, write_postgres(root, pg_server.new_database("run"), role="run_reader")


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("recipe", ["think2sql", "trustsql"])
def test_training_run_takes_a_postgres_dsn(recipe: str, pg_minibird: tuple[Path, str], tmp_path: Path) -> None:
    """``python -m training.run`` with ``data.dsn``: questions from the files, databases on the
    server; the warm start replays the design's demonstrations (TRUST-SQL's explore turn
    reads PostgreSQL's catalogue), then one step."""
    import os
    import subprocess
    import sys

    from tests.helpers.tiny_model import tiny_model, tiny_tokenizer

    root, reader = pg_minibird
    model = tmp_path / "tiny"
    tiny_tokenizer().save_pretrained(model)
    tiny_model().save_pretrained(model)
    repo = Path(__file__).resolve().parents[4]
    env = {**os.environ, "PYTHONPATH": str(repo), "SQLAGENT_RL_CACHE": str(tmp_path / "cache")}
    args = [
        f"recipe={recipe}",
        "model=hf",
        f"model.path={model}",
        f"data.root={root}",
        f'data.dsn="{reader}"',
    ]  # quoted: Hydra
    done = subprocess.run(
        [sys.executable, "-m", "training.run", *args, *LOCAL_STEP],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=850,
    )
    console = done.stdout + done.stderr
    assert done.returncode == 0, console[-4000:]
    assert f"[summary] {recipe}: 1 steps." in console
    assert "4/4 training questions demonstrated" in console and "dropped: none" in console  # clean on PostgreSQL
