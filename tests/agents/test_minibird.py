"""Every agent on the bundled benchmark: a scripted policy built from each question's gold
SQL and gold schema plays the design's protocol and must end with that SQL, every turn
valid, every tool call answered, and the SQL matching gold by execution."""

from __future__ import annotations

import json
import re

import pytest

from agents import make_agent
from agents.types import Example
from tests.helpers.designs import project_designs

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def examples(tmp_path_factory: pytest.TempPathFactory) -> list[Example]:
    from eval.data import load_examples

    with pytest.MonkeyPatch.context() as patch:  # build the benchmark in a throwaway cache
        patch.setenv("SQLAGENT_RL_CACHE", str(tmp_path_factory.mktemp("minibird-cache")))
        dev = load_examples(kind="minibird", split="dev")
    by_db: dict[str, list[Example]] = {}
    for ex in dev:
        by_db.setdefault(ex.db_id, []).append(ex)
    return [ex for group in by_db.values() for ex in group[:2]]  # two questions per database


def _call(name: str, **arguments: str) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def _columns_json(ex: Example) -> str:
    columns: dict[str, list[str]] = {t: [] for t in ex.gold_tables}
    for item in ex.gold_columns:
        table, _, column = item.partition(".")
        columns.setdefault(table, []).append(column)
    return json.dumps({"tables": list(ex.gold_tables), "columns": columns, "joins": []})


def _policy(name: str, role: str, ex: Example) -> list[str]:
    sql = ex.gold_sql
    if name == "retoolsql":
        return [
            f"<scratch_pad>candidate: {sql}</scratch_pad>" + _call("sqlite_query", db_id=ex.db_id, sql=sql),
            "<scratch_pad>verified</scratch_pad>"
            f"<relevant_tables>{', '.join(ex.gold_tables)}</relevant_tables>"
            f"<relevant_columns>{', '.join(ex.gold_columns)}</relevant_columns>"
            f"<final_answer>```sql\n{sql}\n```</final_answer>",
        ]
    if name == "think2sql":
        return [f"<think>The schema shows what is needed.</think>\n<answer>```sql\n{sql}\n```</answer>"]
    if name == "trustsql":
        return [
            "<think>tables?</think><action>explore_schema</action>"
            + _call(
                "execute_sql_query", db_id=ex.db_id, sql="SELECT name, sql FROM sqlite_master WHERE type = 'table'"
            ),
            f"<think>commit</think><action>propose_schema</action><schema>{_columns_json(ex)}</schema>",
            "<think>try</think><action>generate_sql</action>" + _call("execute_sql_query", db_id=ex.db_id, sql=sql),
            f"<think>done</think><action>confirm_answer</action><answer>```sql\n{sql}\n```</answer>",
        ]
    if role == "linker":
        words = " ".join(re.findall(r"[A-Za-z]{4,}", ex.question)[:3]) or "name"
        return [
            "<think>search the values</think>\n" + _call("fts_search", db_id=ex.db_id, query=words),
            "<think>link</think>\n```json\n" + _columns_json(ex) + "\n```",
        ]
    return [
        "<think>run it</think>\n" + _call("execute_sql", db_id=ex.db_id, sql=sql),
        f"<think>good</think>\n```sql\n{sql}\n```",
    ]


@pytest.mark.parametrize("name", project_designs())
def test_gold_policy_on_minibird(name: str, examples: list[Example]) -> None:
    from rex import ExecScorer
    from tools import get_database

    agent, scorer = make_agent(name), ExecScorer()
    for ex in examples:
        db = get_database(ex.db_path)
        results = []
        while (episode := agent.start(ex, db, results)) is not None:
            for text in _policy(name, episode.role, ex):
                step = episode.step(text)
                assert step.format_ok, (ex.id, episode.role, step.format_reason)
                if step.done:
                    break
            results.append(episode.result())
        final = results[-1]
        assert final.end_reason == "answer" and final.final_sql == ex.gold_sql.strip()
        assert all(t.tool_outcome in (None, "ok") for r in results for t in r.turns), [
            (t.tool_name, t.tool_outcome) for r in results for t in r.turns
        ]
        assert scorer.score(db, ex.gold_sql, final.final_sql, metric="ex").ex_match
        if name == "dualsql":
            linked, generator_prompt = results[0].schema, agent.start(ex, db, results[:1]).messages[1]["content"]
            assert set(linked.tables) == set(ex.gold_tables)
            other = set(db.schema()) - {t for t in db.schema() if t.lower() in ex.gold_tables}
            assert all(f"# Table: {t} " not in generator_prompt for t in other)
        if name == "trustsql":
            assert final.flags == {"schema_span_turn": 1}
