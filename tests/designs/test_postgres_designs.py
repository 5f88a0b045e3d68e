"""The four designs on PostgreSQL: whole episodes on the bundled benchmark written into a
server database (one schema per ``db_id``, read through the SELECT-only role), played by
each design's demonstration script and scored with EX on the server; the designs'
schema exploration reads PostgreSQL's catalogue. (The SQLite prompts are the golden files
of test_golden_prompts.py, unchanged.)"""

from __future__ import annotations

import pytest

from agents import make_agent, runtime_options
from agents.types import EpisodeResult, Example
from eval.data import minibird
from eval.data.loaders import load_split
from eval.data.minibird.domains import all_domains
from eval.data.postgres_copy import write_postgres
from rex import ExecScorer
from tests.helpers.agent_scripts import play
from tests.helpers.designs import project_designs
from tests.helpers.pg_server import PgServer
from tools import get_database
from tools.db.postgres_backend import PostgresDatabase
from training.supervised.demonstrations import get_script


@pytest.fixture(scope="module")
def pg_examples(pg_server: PgServer, tmp_path_factory: pytest.TempPathFactory) -> list[Example]:
    """minibird's dev questions (one train and one dev database) on the server; only those
    whose gold SQL (SQLite's) also runs on PostgreSQL."""
    domains = all_domains()
    chosen = [next(d for d in domains if d.split == "train"), next(d for d in domains if d.split == "dev")]
    root = minibird.build(tmp_path_factory.mktemp("pg-minibird") / "mb", chosen)
    reader = write_postgres(root, pg_server.new_database("designs"), role="designs_reader")
    examples = load_split("minibird", root, "dev", drop_failing_gold=True, dsn=reader).examples
    assert len(examples) >= 3 and all(e.db_path.startswith(reader) for e in examples)
    return examples


def _episodes(design: str, example: Example, pool: list[Example], **options: object) -> list[EpisodeResult]:
    """Every episode of ``design`` on ``example``, each turn written by the design's script;
    each episode's system prompt must not speak of SQLite."""
    agent = make_agent(design, **runtime_options(design, options, inference=True, few_shot_pool=lambda: pool))
    script = get_script(agent.name)
    db = get_database(example.db_path)
    assert isinstance(db, PostgresDatabase)
    results: list[EpisodeResult] = []
    while (episode := agent.start(example, db, results)) is not None:
        system = episode.messages[0]["content"]
        assert "SQLite" not in system and "sqlite_master" not in system and "PRAGMA" not in system, design
        play(episode, script(example, episode.role, episode.max_turns))
        episode.end("turn_budget")
        results.append(episode.result())
    return results


@pytest.mark.parametrize("design", project_designs())
def test_an_episode_on_postgres_minibird_scores_ex(design: str, pg_examples: list[Example]) -> None:
    scorer = ExecScorer()
    for example in pg_examples[:3]:
        results = _episodes(design, example, pg_examples)
        assert results and all(r.end_reason == "answer" for r in results), [r.end_reason for r in results]
        turns = [t for r in results for t in r.turns]
        assert all(t.format_ok for t in turns), [t.format_reason for t in turns if not t.format_ok]
        assert all(t.tool_outcome in (None, "ok") for t in turns), [(t.tool_outcome, t.text) for t in turns]
        final = results[-1].final_sql
        score = scorer.score(get_database(example.db_path), example.gold_sql, final, "ex")
        assert score.score == 1.0, (example.id, final, score)


def test_trustsql_explores_the_postgres_catalogue(pg_examples: list[Example]) -> None:
    example = pg_examples[0]
    db = get_database(example.db_path)
    explore = _episodes("trustsql", example, pg_examples)[0].turns[0]
    assert explore.phase == "explore_schema" and "information_schema.columns" in str(explore.tool_arguments)
    agent = make_agent("trustsql", schema_prefill=True)
    episode = agent.start(example, db)
    assert episode is not None
    call, answer = episode.messages[-2]["content"], episode.messages[-1]["content"]
    assert "information_schema.columns" in call and "sqlite_master" not in call
    for table in db.schema():  # the tool's real answer: every table's CREATE TABLE text
        assert f"CREATE TABLE {table} (" in answer


def test_dualsql_reads_the_postgres_catalogue_in_full(pg_examples: list[Example]) -> None:
    """DualSQL's executor caps rows at 10 and cuts long cells, except on schema queries:
    on PostgreSQL a query on ``information_schema`` or ``pg_catalog`` is one."""
    from tools import ToolBox

    db = get_database(pg_examples[0].db_path)
    box = ToolBox(db, ("execute_sql",))
    columns = sum(len(c) for c in db.schema().values())
    assert columns > 10
    catalogue = "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = current_schema()"
    full = box.call("execute_sql", {"db_id": db.db_id, "sql": catalogue})
    assert full.ok and len(full.payload["rows"]) == columns, full.payload
    ddl = box.call(
        "execute_sql", {"db_id": db.db_id, "sql": "SELECT relname, repeat('x', 400) FROM pg_catalog.pg_class LIMIT 12"}
    )
    assert ddl.ok and len(ddl.payload["rows"]) == 12 and all(len(r[1]) == 400 for r in ddl.payload["rows"])
    table = next(iter(db.schema()))
    capped = box.call(
        "execute_sql", {"db_id": db.db_id, "sql": f"SELECT repeat('x', 400) FROM {table}"}
    )  # not a schema query
    assert capped.ok and len(capped.payload["rows"]) <= 10
    assert all(len(r[0]) < 400 for r in capped.payload["rows"])
