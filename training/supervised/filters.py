"""Trace filters: execution + format (every trace), and the leak filter (privileged traces).

A privileged teacher sees the gold SQL as guidance; a trace that *reasons from* that
guidance teaches the student to cite an answer it will never be shown. The leak filter
reads the trace's reasoning — every assistant turn with its tool-call and final-answer
blocks removed, i.e. what comes before the final answer — and drops the trace when it

- ``gold_sql``: contains the gold SQL (whitespace and case folded);
- ``close_variant``: contains a SQL statement whose sqlglot normal form equals the gold's,
  or whose normalised text is at least ``similarity`` alike (difflib ratio);
- ``guidance``: mentions the guidance itself (its header or phrases like "reference SQL").

Tool calls and the answer may of course carry the SQL (ReToolSQL verifies its candidate
with a ``sqlite_query`` call before answering): those are actions, not reasoning.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from typing import Any

GUIDANCE_HEADER = "Reference solution (privileged guidance)"
GUIDANCE_PHRASES = (
    "reference solution",
    "privileged guidance",
    "reference sql",
    "reference query",
    "gold sql",
    "given sql",
    "provided sql",
    "provided query",
    "the guidance",
)
_ACTION_BLOCKS = re.compile(r"<tool_call>.*?(?:</tool_call>|$)|<schema>.*?(?:</schema>|$)", re.S | re.I)
_ANSWER_START = re.compile(r"<final_answer>|<answer>|```(?:sql|json)", re.I)
_SQL_SPAN = re.compile(r"\b(?:select|with)\b[^;]*?(?=;|\n\s*\n|```|</|$)", re.S | re.I)


def guidance_text(gold_sql: str) -> str:
    """What the privileged teacher is told, appended to the agent's own user message."""
    return (
        f"\n\n{GUIDANCE_HEADER}: a correct SQL query for this question is\n```sql\n{gold_sql.strip()}\n```\n"
        "Solve the task exactly as instructed above, in the required format, reasoning from the question, "
        "the schema and the tool results; never mention this reference."
    )


def reasoning_text(turns: Sequence[str]) -> str:
    """Assistant text before the final answer: tool calls and proposed schemas cut from
    every turn, the last turn read up to where its answer starts."""
    out = []
    for i, text in enumerate(turns):
        if i == len(turns) - 1:
            start = _ANSWER_START.search(text)
            text = text[: start.start()] if start else text
        out.append(_ACTION_BLOCKS.sub(" ", text))
    return "\n".join(out)


def _fold(text: str) -> str:
    return " ".join(text.lower().replace(";", " ").split())


def sqlglot_normal(sql: str) -> str | None:
    """sqlglot's normal form with table aliases and column qualifiers removed (``s.name``
    and ``name`` are the same leak); trailing prose words are dropped until it parses."""
    import sqlglot
    from sqlglot import exp

    words = sql.split()
    for cut in range(0, min(6, len(words))):
        text = " ".join(words[: len(words) - cut]).rstrip(".,:")
        try:
            parsed = sqlglot.parse_one(text, read="sqlite")
        except Exception:  # noqa: BLE001 - sqlglot raises several error types on prose
            continue
        if parsed is None:
            continue
        for column in parsed.find_all(exp.Column):
            column.set("table", None)
        for table in parsed.find_all(exp.Table):
            table.set("alias", None)
        return _fold(parsed.sql(dialect="sqlite", normalize=True, comments=False))
    return None


def leak_reason(turns: Sequence[str], gold_sql: str, similarity: float = 0.9) -> str | None:
    """Why this trace leaks the guidance, or None."""
    reasoning = reasoning_text(turns)
    folded = _fold(reasoning)
    gold = _fold(gold_sql)
    if gold and gold in folded:
        return "gold_sql"
    gold_normal = sqlglot_normal(gold_sql) or gold
    for span in _SQL_SPAN.findall(reasoning):
        normal = sqlglot_normal(span) or _fold(span)
        if normal == gold_normal or difflib.SequenceMatcher(None, normal, gold_normal).ratio() >= similarity:
            return "close_variant"
    if any(p in folded for p in GUIDANCE_PHRASES):
        return "guidance"
    return None


def quality_reason(trace: dict[str, Any]) -> str | None:
    """Why a trace fails the execution + format filter, or None."""
    if trace.get("failed"):
        return "request_failed"
    for episode in trace["episodes"]:
        if episode["end_reason"] != "answer":
            return f"ended_by_{episode['end_reason']}"
        if not all(t["format_ok"] for t in episode["turns"]):
            return "format"
    if not trace.get("correct"):
        return "wrong_result"
    return None
