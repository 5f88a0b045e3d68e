"""Correct scripted trajectories for each agent on the test database (tests/helpers/agent_db.py).

Each script maps an episode role to the assistant turns a well-behaved policy would write.
The agent tests replay them on ``Episode.step``; the rollout tests replay them as tokens.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from tests.helpers.agent_db import COUNT_SQL, JOIN_SQL


def call(name: str, **arguments: Any) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


RETOOLSQL = {
    "agent": [
        "<scratch_pad>intent: count schools in Fresno; output: one count; candidate: "
        f"{COUNT_SQL}</scratch_pad>\n" + call("sqlite_query", db_id="schools", sql=COUNT_SQL),
        "<scratch_pad>the query returns 2, as expected</scratch_pad>\n"
        "<relevant_tables>schools</relevant_tables>\n<relevant_columns>schools.city</relevant_columns>\n"
        f"<final_answer>```sql\n{COUNT_SQL}\n```</final_answer>",
    ]
}

THINK2SQL = {
    "agent": [
        f"<think>Count the rows of schools whose city is Fresno.</think>\n<answer>```sql\n{COUNT_SQL}\n```</answer>"
    ]
}

TRUSTSQL = {
    "agent": [
        "<think>Which tables exist?</think><action>explore_schema</action>"
        + call("execute_sql_query", db_id="schools", sql="SELECT name FROM sqlite_master WHERE type = 'table'"),
        "<think>Columns of schools.</think><action>explore_schema</action>"
        + call("execute_sql_query", db_id="schools", sql="PRAGMA table_info(schools)"),
        "<think>Only schools.city is needed.</think><action>propose_schema</action>"
        '<schema>{"tables": ["schools"], "columns": {"schools": ["city"]}, "joins": []}</schema>',
        "<think>Try the count.</think><action>generate_sql</action>"
        + call("execute_sql_query", db_id="schools", sql=COUNT_SQL),
        f"<think>2 rows: done.</think><action>confirm_answer</action><answer>```sql\n{COUNT_SQL}\n```</answer>",
    ]
}

LINKED = {
    "tables": ["schools", "satscores"],
    "columns": {"schools": ["id", "city"], "satscores": ["school_id", "avg_math"]},
}
DUALSQL = {
    "linker": [
        "<think>Find where Fresno appears.</think>\n" + call("fts_search", db_id="schools", query="Fresno"),
        "<think>Scores live in satscores; join on school_id.</think>\n```json\n" + json.dumps(LINKED) + "\n```",
    ],
    "generator": [
        "<think>Try the join.</think>\n" + call("execute_sql", db_id="schools", sql=JOIN_SQL),
        f"<think>Works.</think>\n```sql\n{JOIN_SQL}\n```\nDone.",
    ],
}

SCRIPTS = {"retoolsql": RETOOLSQL, "think2sql": THINK2SQL, "trustsql": TRUSTSQL, "dualsql": DUALSQL}


def play(episode: Any, turns: Sequence[str]) -> list[Any]:
    """Feed ``turns`` to ``episode`` until it is done; returns the steps."""
    steps = []
    for text in turns:
        step = episode.step(text)
        steps.append(step)
        if step.done:
            break
    return steps
