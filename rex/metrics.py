"""EX, REX and QATCH on result tables (pure functions; no database access here).

Each metric takes ``tools.QueryResult`` / ``tools.ToolError`` values or plain
``(columns, rows)`` pairs (see ``rex.tables.as_outcome``), and always compares the whole
result, never a prefix of its rows.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import linear_sum_assignment
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import maximum_bipartite_matching

from rex.tables import Failure, ResultLike, Row, Table, as_outcome, as_table

OUTCOMES: tuple[str, ...] = (
    "match",
    "mismatch",
    "pred_error",
    "pred_timeout",
    "pred_too_large",
    "gold_error",
    "gold_timeout",
    "gold_too_large",
)
"""The EX outcomes. Only ``match`` scores 1. ``*_too_large``: a result past the result
budget (``tools.QueryLimits.max_result_rows`` / ``max_result_bytes``): a prediction too
large to hold is wrong, a gold result too large cannot be scored (like ``gold_error``)."""

REL_TOL = 1e-6
"""REX numeric tolerance (relative), docs/evaluation.md "Semantics", REX step 1."""
ABS_TOL = 1e-9
"""REX absolute floor, a project choice: ``0.1 + 0.2 - 0.3`` (5.6e-17) equals 0, which a
purely relative tolerance would refuse (nothing is relatively close to 0 but 0)."""


# --------------------------------------------------------------------------- EX


def execution_match(gold: ResultLike, pred: ResultLike, official: bool = False) -> str:
    """BIRD execution accuracy with an outcome (one of ``OUTCOMES``).

    A match means ``set(pred rows) == set(gold rows)``: duplicates and row order are
    ignored, column order matters, values compare with Python equality (so ``1 == 1.0``
    but ``'1' != 1``; no tolerance), and the full results are compared. A gold failure
    is reported before a predicted one, so two errors are ``gold_error`` (or
    ``gold_timeout``, ``gold_too_large``), never a match. Timeouts include VM step-limit
    overruns; ``*_too_large``: the result passed the result budget and was not fetched whole.

    ``official=True`` is the scoring of BIRD's ``evaluation_ex.py`` for
    leaderboard-comparable numbers: any error or timeout (gold's included) is lumped
    with wrong answers, so the outcome is only ``match`` or ``mismatch``. On the same two
    results both modes give the same score; the official script's 0/1 also needs its
    results, the queries run as Python's sqlite3 runs the text as written
    (``rex.bird_ex.official_result``; ``rex.bird_ex.official_ex`` does both steps). Where
    the project's strict EX (``ExecScorer``) and the official EX differ:

    - empty, whitespace-only or comment-only SQL, or no SQL at all: strict ``pred_error``;
      official, it runs as no statement and returns no rows, a match when the gold
      result has no rows;
    - text after the first statement: strict drops trailing ``;`` and comments, so
      ``SELECT 1;;`` runs; official, anything but whitespace or comments after the first
      ``;`` (a second ``;`` included) is an error (``SELECT 1; SELECT 2`` fails in both);
    - whitespace SQLite does not know (a no-break space, a vertical tab): strict
      collapses it to a space and runs the query; official, a syntax error;
    - a result cell that is not valid UTF-8: strict reads it with replacement
      characters; official, an error;
    - a failing gold query: strict ``gold_error`` / ``gold_timeout``, left out of the
      project EX; official, a 0 like any wrong answer;
    - statements other than SELECT / WITH / VALUES: strict refuses them all; official
      runs ``EXPLAIN`` and the read-only metadata PRAGMAs as the script does, but
      refuses writes, ATTACH, transactions and other PRAGMAs (a 0), which the script
      runs on a writable connection;
    - time: each query gets the scorer's timeout (30 s) in both modes; the official
      script gives 30 s to the prediction and the gold query together;
    - memory: a result past the scorer's result budget (1,000,000 rows / 128 MiB by
      default) is ``pred_too_large`` / ``gold_too_large`` strictly and a 0 officially; the
      script fetches it whole.

    >>> execution_match((["a"], [(1,), (1,), (2,)]), (["x"], [(2,), (1.0,)]))
    'match'
    >>> execution_match((["a"], [("1",)]), (["a"], [(1,)]))
    'mismatch'
    """
    g, p = as_outcome(gold), as_outcome(pred)
    if official:
        if isinstance(g, Failure) or isinstance(p, Failure):
            return "mismatch"
        return "match" if set(p.rows) == set(g.rows) else "mismatch"
    if isinstance(g, Failure):
        return _failed("gold", g)
    if isinstance(p, Failure):
        return _failed("pred", p)
    return "match" if set(p.rows) == set(g.rows) else "mismatch"


def _failed(side: str, failure: Failure) -> str:
    return f"{side}_{'timeout' if failure.timeout else 'too_large' if failure.too_large else 'error'}"


def ex_score(outcome: str) -> float:
    """1.0 for ``match``, else 0.0 (EX as a reward)."""
    return 1.0 if outcome == "match" else 0.0


# --------------------------------------------------------------------------- QATCH


@dataclass(frozen=True)
class QatchScores:
    """QATCH cell precision, cell recall, tuple cardinality and their mean, in [0, 1]."""

    cp: float
    cr: float
    tc: float
    mean: float

    def to_json(self) -> dict[str, float]:
        return {"cp": self.cp, "cr": self.cr, "tc": self.tc, "mean": self.mean}


def qatch_scores(gold: ResultLike, pred: ResultLike) -> QatchScores:
    """QATCH as docs/evaluation.md "Semantics" defines it.

    Cells are flattened over rows and columns and de-duplicated (a set, compared with
    Python equality: ``1 == 1.0``, ``'1' != 1``, NULL equals NULL; no tolerance).
    CP = |T∩P| / |P| (precision over predicted cells), CR = |T∩P| / |T| (recall over
    target cells), TC = min(rows) / max(rows) counting duplicate rows. Both results
    without rows → all 1; exactly one without rows → all 0.

    >>> qatch_scores((["a"], [(1,), (2,)]), (["a"], [(1,), (1,), (3,)]))
    QatchScores(cp=0.5, cr=0.5, tc=0.6666666666666666, mean=0.5555555555555555)
    """
    g, p = as_table(gold, "gold"), as_table(pred, "pred")
    if g.empty and p.empty:
        return QatchScores(1.0, 1.0, 1.0, 1.0)
    if g.empty or p.empty:
        return QatchScores(0.0, 0.0, 0.0, 0.0)
    target = {cell for row in g.rows for cell in row}
    predicted = {cell for row in p.rows for cell in row}
    common = len(target & predicted)
    cp = common / len(predicted) if predicted else 0.0
    cr = common / len(target) if target else 0.0
    tc = min(len(g.rows), len(p.rows)) / max(len(g.rows), len(p.rows))
    return QatchScores(cp, cr, tc, (cp + cr + tc) / 3.0)


# --------------------------------------------------------------------------- REX


@dataclass(frozen=True)
class RexResult:
    """REX with its working: ``mapping[i]`` is the sample column paired with gold column
    ``i`` (None when unmatched); ``matched_rows`` the row matches counted in step 4."""

    score: float
    mapping: tuple[int | None, ...]
    matched_rows: int
    mapped_columns: int
    ordered: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "score": self.score,
            "mapping": list(self.mapping),
            "matched_rows": self.matched_rows,
            "mapped_columns": self.mapped_columns,
            "ordered": self.ordered,
        }


def rex_score(gold: ResultLike, pred: ResultLike, ordered: bool) -> float:
    """REX score in [0, 1]; 1 means the results are equivalent. See ``rex_compare``.

    >>> rex_score((["a", "b"], [(1, "x"), (2, "y")]), (["b", "a"], [("y", 2.0), ("x", 1)]), ordered=False)
    1.0
    """
    return rex_compare(gold, pred, ordered).score


def rex_compare(gold: ResultLike, pred: ResultLike, ordered: bool) -> RexResult:
    """REX (robust execution match), exactly the steps docs/evaluation.md "Semantics" gives.

    ``ordered`` is True when the gold SQL has a top-level ORDER BY
    (``rex.sql.has_top_level_order_by``).

    1. Values: NULL is a sentinel equal only to NULL; int and float are numbers and
       compare with ``math.isclose(rel_tol=1e-6, abs_tol=1e-9)`` (the absolute floor is
       a project choice so float noise around 0 still matches); text (numeric-looking
       text included) and blobs compare exactly; a number never equals text.
    2. Columns: a gold and a sample column whose lower-cased names are equal pair first
       — only when that name occurs once among the gold columns and once among the
       sample columns (repeated names, e.g. ``T1.name, T2.name``, are left to content
       matching so a swap is not an error). The rest pair by
       ``scipy.optimize.linear_sum_assignment`` maximising the multiset Jaccard of the
       two columns' values; a pair with similarity 0 stays unmatched. For this
       similarity only, floats that are not whole numbers are rounded to 6 significant
       digits (the row comparison in step 4 uses the exact rule of step 1).
    3. The sample is projected onto the mapped columns in gold order; an unmatched gold
       column is filled with the NULL sentinel (so it matches only gold NULLs, and the
       column factor of step 5 still counts it as unmatched).
    4. Rows: ordered → the number of positions i where projected row i equals gold row
       i; unordered → the size of the multiset intersection (duplicates count, unlike
       EX). The intersection is computed by hashing exact-equal rows first, then a
       maximum bipartite matching (scipy) among the remaining rows whose numbers are
       within tolerance. This gives the same count as the paper's "sort wide results on
       the 1–2 highest-cardinality gold columns, then compare strictly" whenever that
       sort is unambiguous, and the correct count when it is not (ties on the sort key),
       so no width threshold is needed. Pairing exact matches first can only differ
       from a global maximum matching when numbers chain within 1e-6 of each other.
    5. score = matched_rows / max(|G_rows|, |S_rows|) × mapped_gold_cols /
       max(|G_cols|, |S_cols|); both results without rows → 1 (whatever their columns).
    """
    g, s = as_table(gold, "gold"), as_table(pred, "pred")
    if g.empty and s.empty:
        return RexResult(1.0, tuple(range(len(g.columns))), 0, len(g.columns), ordered)
    mapping = _map_columns(g, s)
    projected = [tuple(row[j] if j is not None else None for j in mapping) for row in s.rows]
    if ordered:
        # zip(strict=False): row counts may differ: unmatched rows score 0
        matched = sum(1 for a, b in zip(g.rows, projected, strict=False) if _rows_equal(a, b))
    else:
        matched = _multiset_intersection(g.rows, projected)
    mapped = sum(1 for j in mapping if j is not None)
    width = max(len(g.columns), len(s.columns))
    score = (matched / max(len(g.rows), len(s.rows))) * (mapped / width if width else 0.0)
    return RexResult(score, tuple(mapping), matched, mapped, ordered)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float))


def _cells_equal(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if _is_number(a) and _is_number(b):
        if a == b:
            return True
        try:
            return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=ABS_TOL)
        except OverflowError:  # ints beyond float range
            return False
    if _is_number(a) or _is_number(b):
        return False
    return type(a) is type(b) and a == b


def _rows_equal(a: Row, b: Row) -> bool:
    if a == b:  # Python equality is step 1 without the tolerance (None == None, 1 == 1.0)
        return True
    return len(a) == len(b) and all(_cells_equal(x, y) for x, y in zip(a, b, strict=True))


def _similarity_key(value: Any) -> Any:
    """Hashable key for column similarity: exact, except floats that are not whole
    numbers, which are rounded to 6 significant digits (and to 0 below the absolute
    floor) so values within the tolerance mostly share a key; a rounded whole number
    becomes an int so it meets the ints of the other column."""
    if isinstance(value, float) and math.isfinite(value) and not value.is_integer():
        if abs(value) < ABS_TOL:
            return 0
        rounded = float(f"{value:.6g}")
        return int(rounded) if rounded.is_integer() else rounded
    if isinstance(value, float) and math.isfinite(value):
        return int(value)
    return value


def _map_columns(g: Table, s: Table) -> list[int | None]:
    mapping: list[int | None] = [None] * len(g.columns)
    g_names = Counter(c.lower() for c in g.columns)
    s_index: dict[str, int] = {}
    s_names = Counter(c.lower() for c in s.columns)
    for j, name in enumerate(s.columns):
        s_index[name.lower()] = j
    used: set[int] = set()
    for i, name in enumerate(g.columns):
        key = name.lower()
        if g_names[key] == 1 and s_names.get(key) == 1:
            mapping[i] = s_index[key]
            used.add(s_index[key])
    gold_left = [i for i, j in enumerate(mapping) if j is None]
    sample_left = [j for j in range(len(s.columns)) if j not in used]
    if not gold_left or not sample_left:
        return mapping
    g_bags = [_column_bag(g.rows, i) for i in gold_left]
    s_bags = [_column_bag(s.rows, j) for j in sample_left]
    sim = np.array([[_multiset_jaccard(a, b) for b in s_bags] for a in g_bags])  # [gold_left, sample_left]
    rows, cols = linear_sum_assignment(sim, maximize=True)
    for r, c in zip(rows, cols, strict=True):
        if sim[r, c] > 0:
            mapping[gold_left[r]] = sample_left[c]
    return mapping


def _column_bag(rows: Sequence[Row], index: int) -> Counter:
    return Counter(_similarity_key(row[index]) for row in rows)


def _multiset_jaccard(a: Counter, b: Counter) -> float:
    if len(a) > len(b):
        a, b = b, a
    inter = sum(min(n, b[k]) for k, n in a.items() if k in b)
    union = sum(a.values()) + sum(b.values()) - inter
    return inter / union if union else 0.0


def _multiset_intersection(gold_rows: Sequence[Row], sample_rows: Sequence[Row]) -> int:
    """|G ∩ S| as multisets under the value rule of step 1."""
    gold_bag, sample_bag = Counter(gold_rows), Counter(sample_rows)
    exact = sum((gold_bag & sample_bag).values())
    gold_left, sample_left = gold_bag - sample_bag, sample_bag - gold_bag
    if not gold_left or not sample_left:
        return exact
    return exact + _tolerant_matches(list(gold_left.elements()), list(sample_left.elements()))


def _shape(row: Row) -> tuple:
    """Rows can only match within tolerance if their non-numeric cells are equal."""
    return tuple(_NUMBER if _is_number(v) else (type(v).__name__, v) if v is not None else None for v in row)


_NUMBER = ("<number>",)


def _tolerant_matches(gold_rows: list[Row], sample_rows: list[Row]) -> int:
    groups: dict[tuple, tuple[list[Row], list[Row]]] = defaultdict(lambda: ([], []))
    for row in gold_rows:
        if any(_is_number(v) for v in row):
            groups[_shape(row)][0].append(row)
    for row in sample_rows:
        if any(_is_number(v) for v in row):
            key = _shape(row)
            if key in groups:
                groups[key][1].append(row)
    total = 0
    for key, (gold, sample) in groups.items():
        if gold and sample:
            pivot = key.index(_NUMBER)
            total += _match_group(gold, sample, pivot)
    return total


def _match_group(gold: list[Row], sample: list[Row], pivot: int) -> int:
    """Maximum matching between rows of one shape; candidates come from a window on the
    pivot (first numeric) column, so different results cost O(n log n), not O(n²)."""
    order = sorted(range(len(sample)), key=lambda j: float(sample[j][pivot]))
    keys = [float(sample[j][pivot]) for j in order]
    rows_idx: list[int] = []
    cols_idx: list[int] = []
    for i, row in enumerate(gold):
        for j in _window(keys, order, float(row[pivot])):
            if _rows_equal(row, sample[j]):
                rows_idx.append(i)
                cols_idx.append(j)
    if not rows_idx:
        return 0
    graph = csr_matrix(
        (np.ones(len(rows_idx), dtype=np.int8), (rows_idx, cols_idx)), shape=(len(gold), len(sample))
    )  # [gold, sample]
    matches = maximum_bipartite_matching(graph, perm_type="column")  # [gold]
    return int((matches >= 0).sum())


def _window(keys: list[float], order: list[int], value: float) -> Iterable[int]:
    if not math.isfinite(value):
        lo, hi = bisect.bisect_left(keys, value), bisect.bisect_right(keys, value)
    else:
        half = (REL_TOL * abs(value) + ABS_TOL) / (1.0 - REL_TOL) * (1.0 + 1e-9)
        lo, hi = bisect.bisect_left(keys, value - half), bisect.bisect_right(keys, value + half)
    return (order[k] for k in range(lo, hi))
