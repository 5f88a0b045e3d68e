"""The four designs on DuckDB: prompts that name the dialect, and whole episodes on the
bundled benchmark written as ``.duckdb`` files, played by each design's demonstration
script and scored with EX on DuckDB. (The SQLite prompts are the golden files of
test_golden_prompts.py, unchanged.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from agents import make_agent, runtime_options
from agents.__main__ import prompt_messages
from agents.designs import get_design
from agents.types import EpisodeResult, Example
from eval.data import minibird
from eval.data.duckdb_copy import copy_sqlite_to_duckdb, replace_sqlite_files
from eval.data.loaders import load_split
from eval.data.minibird.domains import all_domains
from rex import ExecScorer
from tests.designs.retoolsql.test_agent import _pool
from tests.helpers.agent_scripts import play
from tests.helpers.designs import project_designs
from tools import get_database
from tools.db.duckdb_backend import DuckDBDatabase
from training.supervised.demonstrations import get_script

LINKED = "schools.id, schools.city, satscores.school_id, satscores.avg_math"
ROLES = [("retoolsql", None), ("think2sql", None), ("trustsql", None), ("dualsql", "linker"), ("dualsql", "generator")]


@pytest.fixture(scope="module")
def duck_minibird(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """minibird with one train and one dev database, its SQLite files replaced by DuckDB ones."""
    domains = all_domains()
    chosen = [next(d for d in domains if d.split == "train"), next(d for d in domains if d.split == "dev")]
    root = minibird.build(tmp_path_factory.mktemp("duck-minibird") / "mb", chosen)
    replace_sqlite_files(root)
    return root


@pytest.fixture(scope="module")
def dev_examples(duck_minibird: Path) -> list[Example]:
    examples = load_split("minibird", duck_minibird, "dev").examples
    assert examples and all(e.db_path.endswith(".duckdb") for e in examples)
    return examples


@pytest.mark.parametrize(("design", "role"), ROLES)
def test_duckdb_prompt_names_duckdb(design: str, role: str | None, join_example: Example, db_path: Path) -> None:
    duck = db_path.parent / f"{db_path.stem}-{design}-{role}.duckdb"
    if not duck.exists():
        copy_sqlite_to_duckdb(db_path, duck)
    example = Example(**{**join_example.__dict__, "db_path": str(duck)})
    options = {"few_shot_pool": _pool()} if design == "retoolsql" else {}
    agent = get_design(design).agent
    lite = prompt_messages(agent, join_example, get_database(db_path), options, role, LINKED)
    messages = prompt_messages(agent, example, get_database(duck), options, role, LINKED)
    system, lite_system = messages[0]["content"], lite[0]["content"]
    if "SQLite" in lite_system:  # every prompt that named SQLite names DuckDB instead
        assert "DuckDB" in system and "SQLite" not in system
    assert "sqlite_master" not in system and "PRAGMA" not in system
    if design == "trustsql":  # the catalogue to explore, and the example call reads it
        assert "information_schema.columns" in system and "FROM information_schema.tables" in system


def _episodes(design: str, example: Example, pool: list[Example], **options: object) -> list[EpisodeResult]:
    """Every episode of ``design`` on ``example``, each turn written by the design's script."""
    agent = make_agent(design, **runtime_options(design, options, inference=True, few_shot_pool=lambda: pool))
    script = get_script(agent.name)
    db = get_database(example.db_path)
    assert isinstance(db, DuckDBDatabase)
    results: list[EpisodeResult] = []
    while (episode := agent.start(example, db, results)) is not None:
        play(episode, script(example, episode.role, episode.max_turns))
        episode.end("turn_budget")
        results.append(episode.result())
    return results


@pytest.mark.parametrize("design", project_designs())
def test_an_episode_on_duckdb_minibird_scores_ex(design: str, dev_examples: list[Example]) -> None:
    scorer = ExecScorer()
    for example in dev_examples[:3]:
        results = _episodes(design, example, dev_examples)
        assert results and all(r.end_reason == "answer" for r in results), [r.end_reason for r in results]
        turns = [t for r in results for t in r.turns]
        assert all(t.format_ok for t in turns), [t.format_reason for t in turns if not t.format_ok]
        assert all(t.tool_outcome in (None, "ok") for t in turns), [t.tool_outcome for t in turns]
        final = results[-1].final_sql
        score = scorer.score(get_database(example.db_path), example.gold_sql, final, "ex")
        assert score.score == 1.0, (example.id, final, score)


def test_trustsql_explores_the_duckdb_catalogue(dev_examples: list[Example]) -> None:
    example = dev_examples[0]
    db = get_database(example.db_path)
    explore = _episodes("trustsql", example, dev_examples)[0].turns[0]
    assert explore.phase == "explore_schema" and "duckdb_tables()" in str(explore.tool_arguments)
    agent = make_agent("trustsql", schema_prefill=True)
    episode = agent.start(example, db)
    assert episode is not None
    call, answer = episode.messages[-2]["content"], episode.messages[-1]["content"]
    assert "duckdb_tables()" in call and "sqlite_master" not in call
    for table in db.schema():  # the tool's real answer: every table's CREATE TABLE text
        assert f"CREATE TABLE {table}" in answer or f'CREATE TABLE "{table}"' in answer
