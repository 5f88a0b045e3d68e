"""Hand-built episodes on a small real SQLite database (NULLs, mixed types) for the
reward tests. Nothing here runs a model: trajectories are made from EpisodeResults."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from agents.types import EpisodeResult, Example, SchemaSelection, Trajectory, TurnRecord

GOLD_SQL = "SELECT s.name FROM students AS s JOIN clubs AS c ON s.club_id = c.id WHERE c.title = 'Chess'"
GOLD_TABLES = ("clubs", "students")
GOLD_COLUMNS = ("clubs.id", "clubs.title", "students.club_id", "students.name")


def build_school_db(path: Path) -> Path:
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE students (id INTEGER PRIMARY KEY, name TEXT, grade REAL, club_id INTEGER, note)")
    con.execute("CREATE TABLE clubs (id INTEGER PRIMARY KEY, title TEXT, budget REAL)")
    con.executemany(
        "INSERT INTO students VALUES (?, ?, ?, ?, ?)",
        [
            (1, "Ann", 9.5, 1, "x"),
            (2, "Bob", None, 1, 7),
            (3, "Cid", 7.0, 2, None),
            (4, "Dee", 8.25, None, "7"),
            (5, "Eve", 6.0, 1, None),
        ],
    )
    con.executemany("INSERT INTO clubs VALUES (?, ?, ?)", [(1, "Chess", 100.0), (2, "Drama", None), (3, "Go", 5)])
    con.commit()
    con.close()
    return path


@pytest.fixture(scope="session")
def school_db(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from tools import get_database

    return get_database(build_school_db(tmp_path_factory.mktemp("rewards") / "school.sqlite"))


def example(gold_sql: str = GOLD_SQL, with_refs: bool = True, **kw: Any) -> Example:
    refs = {"gold_tables": GOLD_TABLES, "gold_columns": GOLD_COLUMNS} if with_refs and gold_sql == GOLD_SQL else {}
    return Example(
        id="q1", db_id="school", db_path="", question="Who plays chess?", gold_sql=gold_sql, **{**refs, **kw}
    )


def turn(
    index: int, phase: str, ok: bool = True, text: str = "", tool: str | None = None, outcome: str | None = None
) -> TurnRecord:
    return TurnRecord(
        index=index,
        phase=phase,
        text_chars=len(text),
        format_ok=ok,
        format_reason="" if ok else "bad turn",
        tool_name=tool,
        tool_outcome=outcome,
        text=text,
    )


def trajectory(
    final_sql: str | None,
    turns: Sequence[TurnRecord],
    schema: SchemaSelection | None = None,
    end_reason: str = "answer",
    role: str = "agent",
    policy_tokens: int = 100,
    observation_tokens: int = 50,
) -> Trajectory:
    result = EpisodeResult(role=role, final_sql=final_sql, schema=schema, turns=list(turns), end_reason=end_reason)  # type: ignore[arg-type]
    mask = [1] * policy_tokens + [0] * observation_tokens  # [resp_len]
    return Trajectory(
        example_id="q1",
        role=role,
        prompt_ids=[1, 2, 3],
        response_ids=[7] * len(mask),
        response_mask=mask,
        turn_index=[0] * len(mask),
        result=result,
    )
