"""The schools world of the local-engine tests: a small SQLite database, four questions with
gold SQL, tables and columns, and a scripted policy that writes each design's turns
(multi-turn text with tool calls) so that rewards vary within groups."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from agents.types import Example
from tests.helpers.tiny_model import tiny_tokenizer
from training.rollout import GenerationOutput


def make_db(path: Path) -> Path:
    """Two tables, a foreign key, NULLs, a text-stored number and mixed-type cells."""
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE schools (id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT,
                              enrollment INTEGER, misc);
        CREATE TABLE satscores (school_id INTEGER REFERENCES schools(id), year INTEGER,
                                avg_math REAL);
        """
    )
    conn.executemany(
        "INSERT INTO schools VALUES (?,?,?,?,?)",
        [
            (1, "Fresno High", "Fresno", 2100, 7),
            (2, "Roosevelt Arts", "Fresno", 850, "seven"),
            (3, "Clovis West", "Clovis", 1900, 7.5),
            (4, "Oakland Tech", None, None, None),
        ],
    )
    conn.executemany(
        "INSERT INTO satscores VALUES (?,?,?)", [(1, 2019, 512.5), (2, 2019, None), (2, 2020, "530"), (3, 2020, 541.0)]
    )
    conn.commit()
    conn.close()
    return path


QUESTIONS = [
    (
        "How many schools are in Fresno?",
        "SELECT COUNT(*) FROM schools WHERE city = 'Fresno'",
        ("schools",),
        ("schools.city",),
    ),
    (
        "Which school has the largest enrollment?",
        "SELECT name FROM schools ORDER BY enrollment DESC LIMIT 1",
        ("schools",),
        ("schools.enrollment", "schools.name"),
    ),
    (
        "List the years with SAT scores for Fresno High.",
        "SELECT year FROM satscores WHERE school_id = 1",
        ("satscores",),
        ("satscores.school_id", "satscores.year"),
    ),
    (
        "What is the name of school 3?",
        "SELECT name FROM schools WHERE id = 3",
        ("schools",),
        ("schools.id", "schools.name"),
    ),
]
WRONG_SQL = "SELECT name FROM schools WHERE id = 4"


def school_examples(db: Path) -> list[Example]:
    """``QUESTIONS`` on the database at ``db`` (``make_db``), ids q0..q3."""
    return [
        Example(
            id=f"q{i}",
            db_id="schools",
            db_path=str(db),
            question=q,
            gold_sql=sql,
            difficulty="simple",
            gold_tables=t,
            gold_columns=c,
            split="train",
        )
        for i, (q, sql, t, c) in enumerate(QUESTIONS)
    ]


def school_rows(copies: int = 1) -> list[dict[str, Any]]:
    """``QUESTIONS`` as JSONL data rows (``data=jsonl``), repeated ``copies`` times, ids q0, q1, ..."""
    return [
        {"id": f"q{i}", "db_id": "schools", "question": q, "sql": sql, "difficulty": "simple"}
        for i, (q, sql, _, _) in enumerate(QUESTIONS * copies)
    ]


# ----------------------------------------------------------------------------- scripted policy


def call(name: str, **arguments: Any) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def schema_json(ex: Example, good: bool) -> str:
    if not good:
        return json.dumps({"tables": ["satscores"], "columns": {"satscores": ["year"]}, "joins": []})
    columns: dict[str, list[str]] = {}
    for item in ex.gold_columns:
        table, column = item.split(".")
        columns.setdefault(table, []).append(column)
    return json.dumps({"tables": list(ex.gold_tables), "columns": columns, "joins": []})


def turn_text(recipe: str, role: str, turn: int, ex: Example, good: bool) -> str:
    """What a scripted policy writes: good turns answer with the gold SQL."""
    sql = ex.gold_sql if good else WRONG_SQL
    plan = "plan A" if good else "plan B"
    if recipe == "think2sql":
        return f"<think>{plan}</think>\n<answer>```sql\n{sql}\n```</answer>"
    if recipe == "retoolsql":
        if turn == 0:
            return f"<scratch_pad>{plan}: check</scratch_pad>" + call("sqlite_query", db_id="schools", sql=sql)
        return (
            f"<scratch_pad>{plan}: verified</scratch_pad><relevant_tables>{', '.join(ex.gold_tables)}"
            f"</relevant_tables><relevant_columns>{', '.join(ex.gold_columns)}</relevant_columns>"
            f"<final_answer>```sql\n{sql}\n```</final_answer>"
        )
    if recipe == "trustsql":
        if turn == 0:
            return f"<think>{plan}</think><action>explore_schema</action>" + call(
                "execute_sql_query", db_id="schools", sql="SELECT name FROM sqlite_master"
            )
        if turn == 1:
            return f"<think>{plan}</think><action>propose_schema</action><schema>{schema_json(ex, good)}</schema>"
        if turn == 2:  # the phase order: confirm only after a generate turn
            return f"<think>{plan}</think><action>generate_sql</action>" + call(
                "execute_sql_query", db_id="schools", sql=sql
            )
        return f"<think>{plan}</think><action>confirm_answer</action><answer>```sql\n{sql}\n```</answer>"
    if role == "linker":
        return f"<think>{plan}</think>\n```json\n{schema_json(ex, good)}\n```"
    return f"<think>{plan}</think>\n```sql\n{sql}\n```"


class ScriptedPolicy:
    """A GenerateFn writing each recipe's turns. The first turn of each episode draws
    good/bad from torch's RNG (so resume must restore it) unless ``always_good``; later
    turns read the choice back from the conversation."""

    def __init__(
        self, recipe: str, examples: list[Example], always_good: bool | Callable[[Example, int], bool] = False
    ):
        self.recipe, self.tok = recipe, tiny_tokenizer()
        self.by_question = {ex.question: ex for ex in examples}
        self.always_good = always_good
        self.first_turns: dict[tuple[str, str], int] = {}

    def __call__(self, prompts: list[list[int]], params: Any) -> list[GenerationOutput]:
        return [self._one(self.tok.decode(p)) for p in prompts]

    def _one(self, text: str) -> GenerationOutput:
        ex = next(e for q, e in self.by_question.items() if q in text)
        role = "generator" if "SQL generator of a text-to-SQL" in text else "linker"
        turn = text.count("<|im_start|>assistant") - 1
        if "plan A" in text.split("<|im_start|>assistant", 1)[-1] and turn > 0:
            good = True
        elif "plan B" in text.split("<|im_start|>assistant", 1)[-1] and turn > 0:
            good = False
        elif callable(self.always_good):
            k = self.first_turns.get((ex.id, role), 0)
            self.first_turns[(ex.id, role)] = k + 1
            good = self.always_good(ex, k)
        elif self.always_good:
            good = True
        else:
            good = bool(torch.randint(0, 2, (1,)).item())
        ids = self.tok.encode(turn_text(self.recipe, role, turn, ex, good), add_special_tokens=False)
        return GenerationOutput(token_ids=ids + [self.tok.eos_token_id], logprobs=None, finish_reason="stop")
