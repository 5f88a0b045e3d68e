"""Spider's hardness levels (easy / medium / hard / extra) exactly as ``evaluation.py`` gives them.

Spider's ``Evaluator.eval_hardness`` counts three things on the gold SQL, as its own parser
(``process_sql.get_sql``) reads it, and maps them to a level by fixed thresholds:

- component 1: WHERE, GROUP BY, ORDER BY and LIMIT (one each when present), each FROM
  item after the first (joins), each OR and each LIKE (NOT LIKE too) among the conditions
  of ON, WHERE and HAVING;
- component 2: nested queries - each subquery operand of an ON / WHERE / HAVING condition,
  plus one for an INTERSECT / UNION / EXCEPT;
- others: one each for more than one aggregate, more than one selected item, more than
  one WHERE condition, more than one GROUP BY item.

Published per-hardness tables come from that code, so this module reproduces its counts,
quirks included (each shown by tests/rex/test_spider_levels.py on Spider's own gold queries):

1. **A negated condition counts as an aggregate.** ``count_others`` counts aggregates on
   WHERE conditions by their first field, which for a condition is its ``not_op`` flag: each
   ``NOT IN`` / ``NOT LIKE`` / ``NOT BETWEEN`` in WHERE adds one aggregate, and an aggregate
   inside a WHERE condition adds none. (Spider's parser only has the ``x NOT op y`` form;
   ``NOT x = 1`` and ``IS NOT NULL`` do not parse there and are counted here as negated.)
2. **A FROM subquery is not nested.** Only condition operands and set operations are
   nested queries; ``SELECT count(*) FROM (SELECT ...)`` has component 2 = 0, and the
   subquery counts as a FROM item like a table.
3. **HAVING's aggregates are not counted; its connectors and negations are.** The same
   first-field test run over the whole HAVING list (conditions and the ``and`` / ``or``
   strings between them) counts a negated condition and every AND / OR, but not
   ``count(*)`` in ``HAVING count(*) > 1``.
4. **Chained set operations count once.** The parser nests ``A UNION B EXCEPT C`` as A with
   ``union = (B EXCEPT C)``; only A's own set operation is counted, and A's clauses are the
   top-level ones.
5. **An OR after a column-valued comparison vanishes.** When a condition's value is a
   column (``ON T1.a = T2.b``, ``WHERE x = y``), the parser reads the value up to the next
   AND or clause keyword, so the ORs and conditions that follow until then are not seen
   (no OR, LIKE, nested query, negation or condition is counted for them).
6. **Spaced operators** ``! =``, ``> =``, ``< =`` are joined, as its tokenizer joins them.

Aggregates are ``max min count sum avg`` (Spider's five); a selected item or a GROUP BY item
counts when an aggregate is its root, an ORDER BY item when it, or either operand of its
arithmetic, is one. SQL that Spider's parser cannot read (Spider's gold always parses) is
counted by the same rules from sqlglot's reading, a sensible level rather than Spider's
error.
"""

from __future__ import annotations

import re
from typing import Any

import sqlglot
from sqlglot import exp

HARDNESS = ("easy", "medium", "hard", "extra")

AGGREGATES = (exp.Max, exp.Min, exp.Count, exp.Sum, exp.Avg)
"""Spider's ``AGG_OPS`` (other aggregate functions do not parse there)."""

ARITHMETIC = (exp.Add, exp.Sub, exp.Mul, exp.Div)
"""Spider's ``UNIT_OPS``: an ORDER BY item ``a op b`` has two column units."""

_SPACED_OPERATOR = re.compile(r"([!<>])\s+=")


def spider_hardness(sql: str) -> str:
    """Spider's difficulty level of ``sql`` (``unknown`` when it does not parse).

    >>> spider_hardness("SELECT count(*) FROM singer")
    'easy'
    >>> spider_hardness("SELECT name, age FROM singer WHERE age > 20 ORDER BY age")
    'medium'
    >>> spider_hardness("SELECT name FROM singer WHERE id NOT IN (SELECT singer_id FROM concert)")
    'hard'
    >>> spider_hardness("SELECT avg(age) FROM singer WHERE id NOT IN (SELECT singer_id FROM concert)")
    'extra'
    >>> spider_hardness("SELECT count(*) FROM (SELECT name FROM singer INTERSECT SELECT name FROM actor)")
    'easy'
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
    """(component 1, component 2, others) as Spider counts them; None if unparsable.

    >>> hardness_counts("SELECT T1.a FROM t1 AS T1 JOIN t2 AS T2 ON T1.x = T2.x OR T1.y = T2.y")
    (1, 0, 0)
    """
    try:
        tree = sqlglot.parse_one(_SPACED_OPERATOR.sub(r"\1=", sql), read="sqlite")
    except sqlglot.errors.SqlglotError:
        return None
    nested = 0
    if isinstance(tree, exp.SetOperation):  # quirk 4: one, however many are chained
        nested = 1
        while isinstance(tree, exp.SetOperation):
            tree = tree.this
    if not isinstance(tree, exp.Select):
        return None
    where, having, group, order = (tree.args.get(k) for k in ("where", "having", "group", "order"))
    joins = tree.args.get("joins") or []
    on = [part for j in joins if j.args.get("on") is not None for part in _condition_list(j.args["on"])]
    where_list = _condition_list(where.this) if where is not None else []
    having_list = _condition_list(having.this) if having is not None else []
    conditions = on + where_list + having_list
    leaves = [c for c in conditions if not isinstance(c, str)]

    has_from = tree.args.get("from_") is not None or tree.args.get("from") is not None
    c1 = sum(x is not None for x in (where, group, order, tree.args.get("limit")))
    c1 += max(int(has_from) + len(joins) - 1, 0)  # quirk 2: a FROM subquery is one more FROM item
    c1 += conditions.count("or")
    c1 += sum(isinstance(_positive(c), exp.Like) for c in leaves)

    nested += sum(_nested_queries(c) for c in leaves)

    group_items = group.expressions if group is not None else []
    aggregates = sum(_is_aggregate(item) for item in tree.expressions)
    aggregates += sum(_negated(c) for c in where_list if not isinstance(c, str))  # quirk 1
    aggregates += sum(_is_aggregate(item) for item in group_items)
    aggregates += sum(_order_aggregates(item.this) for item in (order.expressions if order is not None else []))
    aggregates += sum(isinstance(c, str) or _negated(c) for c in having_list)  # quirk 3
    others = int(aggregates > 1)
    others += len(tree.expressions) > 1
    others += len(where_list) > 1
    others += len(group_items) > 1
    return c1, nested, others


def _condition_list(node: Any) -> list[Any]:
    """Spider's flat condition list ``[cond, "and" | "or", cond, ...]`` in text order, with
    the conditions its parser does not see removed (quirk 5)."""
    flat: list[Any] = []
    _flatten(node, flat)
    kept: list[Any] = [flat[0]]
    i = 1
    while i < len(flat):
        connector, condition = flat[i], flat[i + 1]
        if connector == "or" and _column_valued(kept[-1]):
            # the value read swallows the OR and everything up to the next AND
            while i < len(flat) and flat[i] == "or":
                i += 2
            continue
        kept += [connector, condition]
        i += 2
    return kept


def _flatten(node: Any, out: list[Any]) -> None:
    while isinstance(node, exp.Paren) and isinstance(node.this, exp.Connector):
        node = node.this
    if isinstance(node, exp.Connector):
        _flatten(node.left, out)
        out.append("and" if isinstance(node, exp.And) else "or")
        _flatten(node.right, out)
    else:
        out.append(node)


def _positive(condition: Any) -> Any:
    while isinstance(condition, (exp.Not, exp.Paren)):
        condition = condition.this
    return condition


def _negated(condition: Any) -> bool:
    return isinstance(condition, exp.Not) or bool(_positive(condition).args.get("negate"))


def _column_valued(condition: Any) -> bool:
    """The value Spider's parser reads last (the right operand, BETWEEN's upper bound) is
    neither a number, a string nor a subquery."""
    node = _positive(condition)
    value = node.args.get("high") if isinstance(node, exp.Between) else node.args.get("expression")
    if value is None:  # IN (subquery) / IN (list): read up to its closing parenthesis
        return False
    while isinstance(value, (exp.Paren, exp.Neg)):
        value = value.this
    if isinstance(value, (exp.Literal, exp.Null, exp.Boolean, exp.Subquery, exp.Select)):
        return False
    # sqlglot reads the gold's "double-quoted" strings as quoted columns; Spider as strings
    return not (isinstance(value, exp.Column) and not value.table and value.this.args.get("quoted"))


def _nested_queries(condition: Any) -> int:
    """Subqueries among a condition's operands (not those inside them)."""
    count, stack = 0, list(condition.iter_expressions())
    while stack:
        node = stack.pop()
        if isinstance(node, (exp.Subquery, exp.Select, exp.SetOperation)):
            count += 1
            continue
        stack.extend(node.iter_expressions())
    return count


def _unwrap(node: Any) -> Any:
    while isinstance(node, (exp.Alias, exp.Paren)):
        node = node.this
    return node


def _is_aggregate(node: Any) -> bool:
    return isinstance(_unwrap(node), AGGREGATES)


def _order_aggregates(node: Any) -> int:
    node = _unwrap(node)
    if isinstance(node, ARITHMETIC):
        return _is_aggregate(node.left) + _is_aggregate(node.right)
    return int(_is_aggregate(node))
