"""Spider's own rules: its official execution match and its hardness levels.

Execution match (the test-suite evaluator's ``result_eq``, Zhong et al. 2020, which Spider's
``evaluation.py --etype exec`` uses): the two results must have the same number of rows and
columns; some permutation of the predicted columns must make the rows equal as a multiset
(duplicates count) - or as a list when the gold query says ``order by`` (the evaluator
tests the substring ``'order by'`` in the lower-cased gold SQL, and so does this module).
Values compare with Python equality (``1 == 1.0``), like the evaluator. Two empty results
match. Unlike BIRD's EX (a set of rows, column order fixed), duplicates and row order can
make a difference here, and a column permutation cannot.

Hardness (Spider's ``Evaluator.eval_hardness``): counts of components of the gold SQL -
component 1 (WHERE, GROUP BY, ORDER BY, LIMIT, each extra FROM table, OR, LIKE), component
2 (nested queries: subqueries and INTERSECT / UNION / EXCEPT), others (more than one
aggregate, more than one selected column, more than one WHERE condition, more than one
GROUP BY column) - mapped to easy / medium / hard / extra by Spider's thresholds. The
counts are taken from a sqlglot parse of the top-level query, as Spider's parser takes them
from its own SQL dict.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence
from typing import Any

from rex.tables import Failure, ResultLike, as_outcome

MAX_PERMUTATIONS = 10_000
"""Column permutations tried at most (the evaluator also bounds its search); candidates are
pruned to columns holding the same multiset of values first, so this is rarely reached."""


def order_matters(gold_sql: str) -> bool:
    """Spider's rule: the gold SQL contains ``order by`` (any case).

    >>> order_matters("SELECT a FROM t ORDER BY a"), order_matters("SELECT a FROM t")
    (True, False)
    """
    return "order by" in " ".join(gold_sql.lower().split())


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


# --------------------------------------------------------------------------- hardness

HARDNESS = ("easy", "medium", "hard", "extra")


def spider_hardness(sql: str) -> str:
    """Spider's difficulty level of ``sql`` (``unknown`` when it does not parse).

    >>> spider_hardness("SELECT count(*) FROM singer")
    'easy'
    >>> spider_hardness("SELECT name, age FROM singer WHERE age > 20 ORDER BY age")
    'medium'
    >>> spider_hardness("SELECT name FROM singer WHERE id NOT IN (SELECT singer_id FROM concert)")
    'hard'
    >>> spider_hardness("SELECT a FROM t1 JOIN t2 ON t1.x = t2.x WHERE b = 1 OR c LIKE '%x%' GROUP BY a "
    ...                 "HAVING count(*) > 1 ORDER BY a LIMIT 1")
    'extra'
    """
    counts = hardness_counts(sql)
    if counts is None:
        return "unknown"
    c1, c2, others = counts
    if c1 <= 1 and others == 0 and c2 == 0:
        return "easy"
    if (others <= 2 and c1 <= 1 and c2 == 0) or (c1 <= 2 and others < 2 and c2 == 0):
        return "medium"
    if (
        (others > 2 and c1 <= 2 and c2 == 0)
        or (2 < c1 <= 3 and others <= 2 and c2 == 0)
        or (c1 <= 1 and others == 0 and c2 <= 1)
    ):
        return "hard"
    return "extra"


def hardness_counts(sql: str) -> tuple[int, int, int] | None:
    """(component 1, component 2, others) as Spider counts them; None if unparsable."""
    import sqlglot
    from sqlglot import exp

    try:
        tree = sqlglot.parse_one(sql, read="sqlite")
    except (sqlglot.errors.ParseError, sqlglot.errors.TokenError):
        return None
    if tree is None:
        return None
    nested = 0
    while isinstance(tree, exp.SetOperation):  # INTERSECT / UNION / EXCEPT: the right side is nested
        nested += 1
        tree = tree.this
    if not isinstance(tree, exp.Select):
        return None
    where, having, group, order = (tree.args.get(k) for k in ("where", "having", "group", "order"))
    joins = tree.args.get("joins") or []
    conditions = [c for c in (where, having, *[j.args.get("on") for j in joins]) if c is not None]
    top = [n for c in conditions for n in _own_nodes(c)]
    c1 = sum(x is not None for x in (where, group, order, tree.args.get("limit")))
    c1 += len(joins)
    c1 += sum(isinstance(n, exp.Or) for n in top)
    c1 += sum(isinstance(n, exp.Like) for n in top)
    from_ = tree.args.get("from_") or tree.args.get("from")
    sources = [from_.this] if from_ is not None else []
    sources += [j.this for j in joins]
    nested += sum(isinstance(s, exp.Subquery) for s in sources)
    nested += sum(
        isinstance(n, (exp.Subquery, exp.Select)) and n is not c for c in conditions for n in _own_nodes(c, stop=False)
    )
    others = 0
    agg_parts = [
        *tree.expressions,
        *([where] if where else []),
        *([group] if group else []),
        *([order] if order else []),
        *([having] if having else []),
    ]
    aggs = sum(isinstance(n, exp.AggFunc) for part in agg_parts for n in _own_nodes(part))
    others += aggs > 1
    others += len(tree.expressions) > 1
    others += _where_conditions(where) > 1
    others += len(group.expressions) > 1 if group is not None else 0
    return c1, nested, others


def _own_nodes(node: Any, stop: bool = True):
    """Nodes of ``node`` outside nested queries (``stop``), or the nested queries' roots too."""
    from sqlglot import exp

    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        for child in current.iter_expressions():
            if isinstance(child, (exp.Subquery, exp.Select)) and child is not node:
                if not stop:
                    yield child
                continue
            stack.append(child)


def _where_conditions(where: Any) -> int:
    """Conditions joined by AND / OR at the top of a WHERE clause (Spider's ``where[::2]``)."""
    from sqlglot import exp

    if where is None:
        return 0
    count, stack = 0, [where.this]
    while stack:
        node = stack.pop()
        if isinstance(node, (exp.And, exp.Or)):
            stack.extend([node.left, node.right])
        elif isinstance(node, exp.Paren):
            stack.append(node.this)
        else:
            count += 1
    return count
