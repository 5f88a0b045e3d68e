"""Model text never crashes an episode: thousands of random, truncated and adversarial
turns through every agent (unclosed and nested tags, huge and deeply nested JSON, wrong
tool names, SQL injection in tool arguments), and the database file never changes."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import pytest

from agents import make_agent
from agents.types import Step
from tests.helpers.agent_scripts import SCRIPTS

TURNS_PER_AGENT = 800
TAGS = [
    "think",
    "action",
    "tool_call",
    "schema",
    "answer",
    "scratch_pad",
    "final_answer",
    "relevant_tables",
    "relevant_columns",
    "tool_response",
]
TOOL_NAMES = [
    "sqlite_query",
    "sqlite_peek",
    "bm25_search_sqlite",
    "execute_sql_query",
    "execute_sql",
    "fts_search",
    "get_profile",
    "exec",
    "",
    "drop_table",
    "../../etc/passwd",
    "sqlite_query\n",
]
ACTIONS = ["explore_schema", "propose_schema", "generate_sql", "confirm_answer", "EXPLORE_SCHEMA", "", "answer"]
SQL = [
    "SELECT * FROM schools",
    "'; DROP TABLE schools; --",
    "DELETE FROM schools",
    "UPDATE schools SET city = NULL",
    "ATTACH DATABASE 'other.db' AS other",
    "PRAGMA writable_schema = 1",
    "PRAGMA table_info(schools)",
    "SELECT 1; DELETE FROM schools",
    "SELECT load_extension('evil')",
    "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r LIMIT 20000) SELECT COUNT(*) FROM r",
    "SELECT randomblob(100000)",
    "SELECT name FROM sqlite_master",
    "SELEC broken",
    "SELECT \x00 FROM schools",
    "CREATE TABLE x(a)",
    "VACUUM",
    "SELECT '\ud800' FROM schools",
]


def _value(rng: random.Random, depth: int = 0):
    kind = rng.randrange(7 if depth < 4 else 4)
    if kind == 0:
        return rng.choice(SQL)
    if kind == 1:
        return rng.randint(-(2**70), 2**70)
    if kind == 2:
        return rng.choice([None, True, 1.5e308, "", "schools", "schools.city"])
    if kind == 3:
        return "".join(chr(rng.randrange(0x20, 0x2FFF)) for _ in range(rng.randrange(20)))
    if kind == 4:
        return [_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {
        rng.choice(["db_id", "sql", "table", "columns", "query", "name", "limit", "where", "x"]): _value(rng, depth + 1)
        for _ in range(rng.randrange(5))
    }


def _tool_call(rng: random.Random) -> str:
    extra = _value(rng, 3) if rng.random() < 0.3 else {}
    arguments = {
        "db_id": rng.choice(["schools", "other", 7]),
        "sql": rng.choice(SQL),
        **(extra if isinstance(extra, dict) else {}),
    }
    if rng.random() < 0.2:
        arguments = _value(rng)
    elif rng.random() < 0.5:
        arguments = {
            "db_id": "schools",
            "table": rng.choice(["schools", "satscores", "nope", "x'--"]),
            "column": rng.choice(["city", "name", "nope"]),
            "columns": ["city"],
            "query": rng.choice(SQL),
        }
    payload = {"name": rng.choice(TOOL_NAMES), "arguments": arguments}
    if rng.random() < 0.1:
        payload["arguments"] = json.dumps(arguments)  # arguments as a JSON string
    body = json.dumps(payload, default=str)
    if rng.random() < 0.15:
        body = body[: rng.randrange(len(body) + 1)]  # truncated JSON
    return f"<tool_call>{body}</tool_call>"


def _fragment(rng: random.Random, scripts: list[str]) -> str:
    tag = rng.choice(TAGS)
    choice = rng.randrange(14)
    if choice == 0:
        return f"<{tag}>"
    if choice == 1:
        return f"</{tag}>"
    if choice == 2:
        return f"<{tag}>{_fragment(rng, scripts)}</{tag}>"  # nested
    if choice == 3:
        return _tool_call(rng)
    if choice == 4:
        return f"<action>{rng.choice(ACTIONS)}</action>"
    if choice == 5:
        return "<schema>" + json.dumps(_value(rng), default=str) + "</schema>"
    if choice == 6:
        return (
            "```"
            + rng.choice(["sql", "json", ""])
            + "\n"
            + rng.choice(SQL + [json.dumps(_value(rng), default=str)])
            + rng.choice(["\n```", ""])
        )
    if choice == 7:
        return "".join(chr(rng.randrange(0x110000)) for _ in range(rng.randrange(30)))  # lone surrogates too
    if choice == 8:
        text = rng.choice(scripts)
        return text[: rng.randrange(len(text) + 1)]  # a truncated correct turn
    if choice == 9:
        return rng.choice(scripts)
    if choice == 10 and rng.random() < 0.05:
        return (
            '<tool_call>{"name": "execute_sql", "arguments": {"db_id": "schools", "sql": "'
            + "x" * 200_000
            + '"}}</tool_call>'
        )
    if choice == 11 and rng.random() < 0.05:
        return "<tool_call>" + "[" * 50_000 + "</tool_call>"  # nesting deeper than the JSON parser's stack
    if choice == 12:
        return "<schema>" + "{" * rng.randrange(2000) + "</schema>"
    return rng.choice(["", " ", "\n", "SELECT", "<", ">", "</", "<think></think>", "```", "}", "{", "\\"])


def _turn(rng: random.Random, scripts: list[str]) -> str:
    with_calls = [t for t in scripts if "<tool_call>" in t and "</tool_call>" in t]
    if with_calls and rng.random() < 0.3:  # a well-formed turn around an adversarial call
        text = rng.choice(with_calls)
        head, rest = text.split("<tool_call>", 1)
        body, tail = rest.split("</tool_call>", 1)
        if rng.random() < 0.5:  # the right tool, hostile SQL
            name = json.loads(body)["name"]
            call = json.dumps({"name": name, "arguments": {"db_id": "schools", "sql": rng.choice(SQL)}})
            return f"{head}<tool_call>{call}</tool_call>{tail}"
        return head + _tool_call(rng) + tail
    return "".join(_fragment(rng, scripts) for _ in range(rng.randrange(9)))


def _digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.mark.parametrize(
    "name, options",
    [("retoolsql", {}), ("think2sql", {}), ("trustsql", {}), ("dualsql", {}), ("dualsql", {"guardrails": False})],
)
def test_random_turns_never_raise(name: str, options: dict, join_example, db) -> None:
    rng = random.Random(f"fuzz-{name}-{options}")
    scripts = [t for turns in SCRIPTS[name].values() for t in turns]
    agent = make_agent(name, **options)
    before = _digest(join_example.db_path)
    episode, previous, turns, episodes = agent.start(join_example, db), [], 0, 0
    outcomes: set[str | None] = set()
    while turns < TURNS_PER_AGENT:
        step = episode.step(_turn(rng, scripts))
        turns += 1
        assert isinstance(step, Step) and isinstance(step.phase, str) and isinstance(step.format_reason, str)
        assert step.format_ok or step.format_reason
        for message in step.observations:
            assert message["role"] == "tool" and isinstance(message["content"], str)
        if step.done:
            result = episode.result()
            assert result.end_reason in ("answer", "turn_budget", "format_cutoff")
            assert len(result.turns) == len(episode.turns) and result.turns[-1].index == len(result.turns) - 1
            json.dumps([t.tool_arguments for t in result.turns], default=str)
            outcomes.update(t.tool_outcome for t in result.turns)
            previous = [result] if name == "dualsql" and not previous else []
            episode = agent.start(join_example, db, previous) or agent.start(join_example, db)
            episodes += 1
    assert episodes > 10
    if name != "think2sql":  # adversarial calls reached the tools and came back as structured errors
        assert {"ok", "forbidden", "bad_arguments"} <= outcomes, outcomes
    assert _digest(join_example.db_path) == before  # nothing the model wrote changed the database
