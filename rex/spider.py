"""Spider's official execution match (``evaluation.py --etype exec``, test-suite evaluator).

Two metrics (registered in ``rex.scorer``):

- ``spider`` reproduces ``evaluation.py`` with its default flags (what published Spider EX
  uses). Before running anything it rewrites the SQL as that script does
  (:func:`official_sql_pair`): in the prediction every ``value`` becomes ``1`` (the script's
  placeholder filling when ``--plug_value`` is off; it is a plain substring replacement, so
  a column ``value_x`` becomes ``1_x`` as well); in both queries ``> =``, ``< =``, ``! =``
  are joined; every ``DISTINCT`` keyword is dropped (``--keep_distinct`` is off), including
  ``count(DISTINCT x)``; ``YEAR(CURDATE())`` becomes ``2020``. Then the results are compared
  (:func:`official_execution_match`).
- ``spider_strict`` is the project's stricter reading: the same comparison on the SQL as
  written (DISTINCT kept, no repair, no ``value`` filling) and without the row-sorting quick
  rejection below. Gold ``SELECT Country FROM airlines`` against ``SELECT DISTINCT Country
  FROM airlines`` is 1 under ``spider`` and 0 under ``spider_strict``.

The comparison (the evaluator's ``result_eq``): the two results must have the same number of
rows and columns; some permutation of the predicted columns must make the rows equal as a
multiset (duplicates count) - or as a list when the gold SQL contains ``order by`` (a
substring test on the lower-cased gold, after the rewrite). Values compare with Python
equality (``1 == 1.0``). Two empty results match. Before searching permutations the
evaluator sorts each row's values by ``str(value) + str(type(value))`` and rejects when the
sorted rows differ (as a list when ordered, else as a set); that text sort places ``1`` and
``1.0`` differently among other values, so a two-column row ``(1, 1.5)`` does not match
``(1.0, 1.5)`` there, and does not under ``spider`` either.

Not reproduced: ``--plug_value`` (trying every gold value in every predicted value slot) and
the test-suite's extra databases (a prediction must match on every ``*.sqlite`` beside the
database); the scorer hands the order rule the whitespace-normalised gold, so a gold with
``ORDER`` and ``BY`` separated by a run of whitespace counts as ordered here.

Spider's hardness levels live in ``rex.spider_levels`` (re-exported here).
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Sequence

from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import SqlglotError
from sqlglot.tokens import TokenType

from rex.spider_levels import HARDNESS, hardness_counts, spider_hardness
from rex.tables import Failure, ResultLike, as_outcome

__all__ = [
    "HARDNESS",
    "hardness_counts",
    "official_execution_match",
    "official_sql_pair",
    "order_matters",
    "remove_distinct",
    "spider_execution_match",
    "spider_hardness",
]

MAX_PERMUTATIONS = 10_000
"""Column permutations tried at most; candidates are pruned to columns holding the same
multiset of values first (the evaluator prunes by sampled rows), so this is rarely reached."""


def order_matters(gold_sql: str) -> bool:
    """Spider's rule: the gold SQL contains ``order by`` (any case).

    >>> order_matters("SELECT a FROM t ORDER BY a"), order_matters("SELECT a FROM t")
    (True, False)
    """
    return "order by" in " ".join(gold_sql.lower().split())


# --------------------------------------------------------------------------- the official rewrite

PLACEHOLDER = "value"
"""The prediction's value placeholder; ``evaluation.py`` replaces it (case-sensitively,
anywhere in the text) by ``PLACEHOLDER_FILL`` before running the prediction."""
PLACEHOLDER_FILL = "1"
_CURRENT_YEAR = re.compile(r"YEAR\s*\(\s*CURDATE\s*\(\s*\)\s*\)\s*", re.IGNORECASE)
EVALUATION_YEAR = "2020"
"""What the evaluator runs ``YEAR(CURDATE())`` as (SQLite has no CURDATE)."""


def official_sql_pair(gold_sql: str, pred_sql: str, keep_distinct: bool = False) -> tuple[str, str]:
    """The (gold, prediction) SQL as ``evaluation.py`` runs them (see the module doc).

    >>> official_sql_pair("SELECT DISTINCT a FROM t WHERE b > = 2", "SELECT a FROM t WHERE b = value")
    ('SELECT  a FROM t WHERE b >= 2', 'SELECT a FROM t WHERE b = 1')
    """
    gold, pred = (
        _join_spaced_operators(gold_sql),
        _join_spaced_operators(pred_sql.replace(PLACEHOLDER, PLACEHOLDER_FILL)),
    )
    if not keep_distinct:
        gold, pred = remove_distinct(gold), remove_distinct(pred)
    return _CURRENT_YEAR.sub(EVALUATION_YEAR, gold), _CURRENT_YEAR.sub(EVALUATION_YEAR, pred)


def _join_spaced_operators(sql: str) -> str:
    """The evaluator's repair of tokenised predictions: exactly one space, anywhere in the text."""
    return sql.replace("> =", ">=").replace("< =", "<=").replace("! =", "!=")


def remove_distinct(sql: str) -> str:
    """``sql`` without its DISTINCT keywords (in strings, quoted names and comments they
    stay); the text around them is kept as it is. SQL that does not tokenize is returned as is.

    >>> remove_distinct("SELECT DISTINCT a, count(DISTINCT b) FROM t WHERE c = 'distinct'")
    "SELECT  a, count( b) FROM t WHERE c = 'distinct'"
    """
    try:
        tokens = Dialect.get_or_raise("sqlite").tokenize(sql)
    except SqlglotError:
        return sql
    spans = [(t.start, t.end + 1) for t in tokens if t.token_type == TokenType.DISTINCT]
    for start, end in reversed(spans):
        sql = sql[:start] + sql[end:]
    return sql


def spider_execution_match(gold: ResultLike, pred: ResultLike, ordered: bool) -> bool:
    """True when ``pred``'s rows equal ``gold``'s under Spider's rule (see the module doc).

    >>> spider_execution_match((["a", "b"], [(1, "x"), (1, "x")]), (["b", "a"], [("x", 1), ("x", 1)]), False)
    True
    >>> spider_execution_match((["a"], [(1,), (1,)]), (["a"], [(1,)]), False)
    False
    >>> spider_execution_match((["a"], [(1,), (2,)]), (["a"], [(2,), (1,)]), True)
    False
    """
    g, p = as_outcome(gold), as_outcome(pred)
    if isinstance(g, Failure) or isinstance(p, Failure):
        return False
    g_rows, p_rows = [tuple(r) for r in g.rows], [tuple(r) for r in p.rows]
    if not g_rows and not p_rows:
        return True
    if len(g_rows) != len(p_rows):
        return False
    width = len(g_rows[0])
    if len(p_rows[0]) != width:
        return False
    for perm in _candidate_permutations(g_rows, p_rows, width):
        permuted = [tuple(row[j] for j in perm) for row in p_rows]
        if ordered:
            if permuted == g_rows:
                return True
        elif Counter(permuted) == Counter(g_rows):
            return True
    return False


def official_execution_match(gold: ResultLike, pred: ResultLike, ordered: bool) -> bool:
    """:func:`spider_execution_match` after the evaluator's quick rejection (module doc).

    >>> official_execution_match((["a", "b"], [(1, 1.5)]), (["a", "b"], [(1.0, 1.5)]), False)
    False
    >>> spider_execution_match((["a", "b"], [(1, 1.5)]), (["a", "b"], [(1.0, 1.5)]), False)
    True
    """
    g, p = as_outcome(gold), as_outcome(pred)
    if isinstance(g, Failure) or isinstance(p, Failure):
        return False
    g_sorted = [_text_sorted(row) for row in g.rows]
    p_sorted = [_text_sorted(row) for row in p.rows]
    if (g_sorted != p_sorted) if ordered else (set(g_sorted) != set(p_sorted)):
        return False
    return spider_execution_match(g, p, ordered)


def _text_sorted(row: Sequence) -> tuple:
    return tuple(sorted(row, key=lambda v: str(v) + str(type(v))))


def _candidate_permutations(g_rows: Sequence[tuple], p_rows: Sequence[tuple], width: int):
    """Predicted-column orders worth testing: gold column i may take predicted column j only
    if both hold the same multiset of values (necessary for any row match)."""
    g_cols = [Counter(row[i] for row in g_rows) for i in range(width)]
    p_cols = [Counter(row[j] for row in p_rows) for j in range(width)]
    options = [[j for j in range(width) if p_cols[j] == g_cols[i]] for i in range(width)]
    if any(not o for o in options):
        return
    tried = 0
    for perm in itertools.product(*options):
        if len(set(perm)) != width:
            continue
        tried += 1
        if tried > MAX_PERMUTATIONS:
            return
        yield perm
