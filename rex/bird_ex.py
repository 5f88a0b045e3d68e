"""BIRD's official EX, reproduced exactly: the 0/1 its ``evaluation_ex.py`` gives a prediction.

The official script opens the database with Python's sqlite3, runs the predicted SQL as
written (``cursor.execute(sql)`` then ``fetchall()``), then the gold SQL the same way, and
scores 1 when ``set(pred rows) == set(gold rows)``; any exception scores 0. Running the
text as written has consequences the project's own (strict) EX does not share: an empty,
whitespace-only or comment-only prediction returns no rows (a match when the gold result
has none), and ``SELECT 1;;`` is an error ("You can only execute one statement at a
time"). ``rex.metrics.execution_match`` lists every difference between the two modes.

``official_result`` is what that loop sees for one query, ``official_ex`` its 0/1. Both
reuse the project's result of the same text when running it as written cannot change it
(one statement, SQLite's own whitespace, no cell decoded leniently), so a second run is
rare.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from rex.metrics import execution_match
from rex.sql import normalize_sql
from rex.tables import Failure, as_outcome

if TYPE_CHECKING:
    from rex.scorer import ExecScorer
    from tools import Backend, QueryResult, ToolError

SQLITE_SPACE = " \t\n\f\r"
"""The whitespace of SQLite's tokenizer and of the check Python's sqlite3 makes after the
first statement; any other character that Python calls whitespace (a no-break space, a
vertical tab) is a syntax error there."""


def official_result(
    scorer: ExecScorer, db: Backend, sql: str | None, executed: QueryResult | ToolError | None = None
) -> QueryResult | ToolError:
    """``sql`` run on ``db`` as BIRD's evaluation script runs it (under ``scorer``'s time limit).

    ``sql`` None (no SQL in the answer) runs as the empty text, which is what a predictions
    file holds for it (``''``; the official loader turns a non-string entry into ``' '``).
    ``executed``: the project's result of the same text (``ExecScorer.execute``, or the
    cached ``ExecScorer.gold(...).result``), returned as it is when running the text as
    written gives the same rows or the same failure.
    """
    from tools import execute
    from tools.db.limits import READONLY_PRAGMAS

    text = sql if isinstance(sql, str) else ""
    if executed is not None and _same_as_written(text, executed):
        return executed
    # The script's connection runs PRAGMAs too; the read-only ones give the same rows here.
    limits = dataclasses.replace(scorer.limits, allowed_pragmas=READONLY_PRAGMAS)
    return execute(db, text, limits, as_written=True)


def official_ex(
    scorer: ExecScorer,
    db: Backend,
    gold_sql: str,
    pred_sql: str | None,
    gold: QueryResult | ToolError | None = None,
    pred: QueryResult | ToolError | None = None,
) -> int:
    """1 or 0, exactly as BIRD's ``evaluation_ex.py`` scores ``pred_sql`` against ``gold_sql``.
    ``gold`` / ``pred``: the project's results of the same texts, reused where they can be."""
    official_gold = official_result(scorer, db, gold_sql, gold)
    official_pred = official_result(scorer, db, pred_sql, pred)
    return int(execution_match(official_gold, official_pred, official=True) == "match")


def _same_as_written(sql: str, executed: Any) -> bool:
    """Whether ``executed`` (the project's run of ``normalize_sql(sql)``) is also what running
    ``sql`` as written gives: a result, a timeout or a result past the budget of text that
    is one statement with at most one ``;``, at its end, and only SQLite whitespace, and no
    text cell with a replacement character (that cell may have been decoded leniently)."""
    outcome = as_outcome(executed)
    if isinstance(outcome, Failure):
        # e.g. "the SQL is empty", which runs as written; errors are quick to run again
        if not (outcome.timeout or outcome.too_large):
            return False
    elif any(isinstance(value, str) and "\ufffd" in value for row in outcome.rows for value in row):
        return False
    body = sql.rstrip(SQLITE_SPACE)
    body = body[:-1] if body.endswith(";") else body
    return (
        ";" not in body
        and "\x00" not in sql
        and all(char in SQLITE_SPACE for char in sql if char.isspace())
        and bool(normalize_sql(sql))
    )
