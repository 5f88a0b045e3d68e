"""Reward-trust flags: why an execution match may not mean the prediction is right.

An execution metric compares two results on one database. Some gold results are matched
by wrong SQL on that database (an empty gold result is matched by any query returning
nothing; a one-row ``COUNT(*)`` by an unfiltered count that happens to agree), and some
comparisons hide errors (a set comparison ignores duplicates and row order). Every scored
sample carries the flags that apply (``ExecScore.flags``), read from the gold side and
from the comparison; ``FLAGS`` says what each one means.

The gold-side facts (``GoldFacts``: the top-level ORDER BY, the table the result equals)
are worked out once per gold query and cached with the gold result (``ExecScorer.gold``).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rex.sql import has_top_level_order_by
from rex.tables import Failure, Table
from tools.errors import DataError

if TYPE_CHECKING:
    from tools import Backend

FLAGS: dict[str, str] = {
    "gold_empty": "the gold result has no rows: any query that returns nothing matches it",
    "gold_one_row": "the gold result is one row (often one scalar, e.g. a COUNT): wrong SQL can match by chance",
    "gold_whole_table": "the gold result equals SELECT * of a table: dropping every filter still matches",
    "gold_ordered_as_set": "the gold SQL orders its rows (top-level ORDER BY) but the metric compares sets",
    "set_not_bag": "the prediction equals gold as a set of rows but not as a bag: duplicates differ",
    "suite_rejected": "matched on the original database but not on a test-suite neighbour",
}
"""Every flag, in the order a sample lists them, with what it means."""

SUITE_KEY = "suite_rejected"
"""The ``ExecScore.details`` key a test-suite metric sets to True when a neighbour rejects
a prediction that matched on the original database."""


@dataclass(frozen=True)
class GoldFacts:
    """What the flags need to know of a gold query beyond its result."""

    ordered: bool = False  # top-level ORDER BY (rex.sql.has_top_level_order_by)
    whole_table: str | None = None  # the table whose SELECT * the result equals


def gold_facts(db: Backend, sql: str, result: Table | Failure) -> GoldFacts:
    """The facts of one gold query (run once per cached gold result)."""
    if isinstance(result, Failure):
        return GoldFacts()
    return GoldFacts(ordered=has_top_level_order_by(sql), whole_table=whole_table(db, result))


def whole_table(db: Backend, gold: Table) -> str | None:
    """The table of ``db`` whose ``SELECT *`` equals ``gold`` as a bag of rows, else None.

    Cheap first: only tables with as many columns as gold are counted (row counts cached
    per database content), and only one with as many rows as gold is read. Columns are
    matched by name when gold's names are the table's in another order, else by position.
    An empty gold result is never a whole table (``gold_empty`` says more).
    """
    if not gold.rows:
        return None
    width = len(gold.columns)
    try:
        schema = db.schema()
        for table, columns in schema.items():
            if len(columns) != width or _row_count(db, table) != len(gold.rows):
                continue
            rows = db.query_internal(f"SELECT * FROM {_quote(table)}")
            order = _column_order(gold.columns, columns)
            if Counter(tuple(r[i] for i in order) for r in rows) == Counter(gold.rows):
                return table
    except (DataError, OSError):  # a flag is advice: an unreadable table is no whole-table match
        return None
    return None


_COUNTS: dict[tuple[str, str], int] = {}
_COUNTS_LOCK = threading.Lock()
_COUNTS_MAX = 100_000


def _row_count(db: Backend, table: str) -> int:
    key = (db.content_hash, table)
    with _COUNTS_LOCK:
        if key in _COUNTS:
            return _COUNTS[key]
    count = int(db.query_internal(f"SELECT COUNT(*) FROM {_quote(table)}")[0][0])
    with _COUNTS_LOCK:
        if len(_COUNTS) >= _COUNTS_MAX:
            _COUNTS.clear()
        _COUNTS[key] = count
    return count


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _column_order(gold: Sequence[str], table: Sequence[str]) -> list[int]:
    """Positions of gold's columns in the table's rows (by name when they are a permutation)."""
    names = [c.lower() for c in table]
    wanted = [c.lower() for c in gold]
    if len(set(names)) == len(names) and sorted(wanted) == sorted(names):
        return [names.index(c) for c in wanted]
    return list(range(len(table)))


def trust_flags(
    gold: Table | Failure,
    pred: Table | Failure,
    outcome: str,
    facts: GoldFacts | None,
    order_rule: Callable[[str], bool] | None,
    details: Mapping[str, Any],
) -> list[str]:
    """The flags of one scored sample (see ``FLAGS``). ``facts`` None: the caller has no
    gold SQL or database, so the ORDER BY and whole-table flags are not worked out;
    ``order_rule`` None: the metric compares rows without their order."""
    flags: list[str] = []
    if isinstance(gold, Table):
        if not gold.rows:
            flags.append("gold_empty")
        elif len(gold.rows) == 1:
            flags.append("gold_one_row")
        if facts is not None and facts.whole_table is not None:
            flags.append("gold_whole_table")
        if facts is not None and facts.ordered and order_rule is None and len(gold.rows) > 1:
            flags.append("gold_ordered_as_set")
        if outcome == "match" and isinstance(pred, Table) and Counter(pred.rows) != Counter(gold.rows):
            flags.append("set_not_bag")
    if details.get(SUITE_KEY):
        flags.append(SUITE_KEY)
    return flags


def flagged_positive(exec_score: float, flags: Sequence[str]) -> bool:
    """A positive execution score that carries a flag (``reward/suspect_positive_rate``)."""
    return exec_score > 0 and bool(flags)
