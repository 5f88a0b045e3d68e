"""Near-miss rewritings of a gold query (sqlglot AST): what a test suite must tell apart.

``mutants(sql, schema)`` returns the query with one small change each: a predicate dropped,
a comparison or connective changed, a number moved by one, a column swapped for another of
its table, an aggregate changed, a join made outer, a DISTINCT inside an aggregate dropped,
and ORDER BY / LIMIT changed where they decide which rows come back. Changes that no
database can tell apart under EX's set comparison are not made (a top-level DISTINCT
dropped, an ORDER BY dropped or reversed without a LIMIT). Used to choose the neighbour
databases (``rex.test_suite.build``) and to measure them (``benchmarks/bench_test_suite.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import sqlglot
from sqlglot import exp

DIALECT = "sqlite"
COMPARISONS: dict[type[exp.Expr], tuple[type[exp.Expr], ...]] = {
    exp.GT: (exp.GTE, exp.LT),
    exp.GTE: (exp.GT, exp.LTE),
    exp.LT: (exp.LTE, exp.GT),
    exp.LTE: (exp.LT, exp.GTE),
    exp.EQ: (exp.NEQ,),
    exp.NEQ: (exp.EQ,),
}
AGGREGATES: dict[type[exp.Expr], tuple[type[exp.Expr], ...]] = {
    exp.Max: (exp.Min,),
    exp.Min: (exp.Max,),
    exp.Sum: (exp.Avg,),
    exp.Avg: (exp.Sum,),
}
SWAPS_PER_COLUMN = 2


@dataclass(frozen=True)
class Mutant:
    """One rewriting: what changed (``kind``) and the SQL."""

    kind: str
    sql: str


Edit = Callable[[exp.Expr], "exp.Expr | None"]
"""Changes one node of a copied tree in place or returns its replacement (None: no change)."""


def parse(sql: str) -> exp.Expr | None:
    """One SELECT statement as a sqlglot tree, or None when it does not parse as one."""
    try:
        trees = [t for t in sqlglot.parse(sql, read=DIALECT) if t is not None]
    except sqlglot.errors.SqlglotError:
        return None
    if len(trees) != 1 or not isinstance(trees[0], exp.Query):
        return None
    return trees[0]


def mutants(sql: str, schema: Mapping[str, Sequence[str]] | None = None) -> list[Mutant]:
    """The distinct rewritings of ``sql`` (none when it does not parse), each differing from
    it in one place; ``schema`` (``{table: [column, ...]}``) enables column swaps."""
    tree = parse(sql)
    if tree is None:
        return []
    original = tree.sql(dialect=DIALECT)
    seen = {original}
    out: list[Mutant] = []
    for kind, index, edit in _edits(tree, _lower(schema or {})):
        copy = tree.copy()
        node = _nth(copy, index)
        replacement = edit(node)
        if replacement is not None and replacement is not node:
            if node is copy:
                copy = replacement
            else:
                node.replace(replacement)
        try:
            text = copy.sql(dialect=DIALECT)
        except sqlglot.errors.SqlglotError:
            continue
        if text not in seen:
            seen.add(text)
            out.append(Mutant(kind, text))
    return out


def _lower(schema: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    return {t.lower(): list(cols) for t, cols in schema.items()}


def _nth(tree: exp.Expr, index: int) -> exp.Expr:
    for i, node in enumerate(tree.walk()):
        if i == index:
            return node
    raise IndexError(index)


def _edits(tree: exp.Expr, schema: dict[str, list[str]]) -> Iterator[tuple[str, int, Edit]]:
    aliases = _aliases(tree)
    for index, node in enumerate(tree.walk()):
        yield from ((kind, index, edit) for kind, edit in _node_edits(node, schema, aliases))


def _node_edits(node: exp.Expr, schema: dict[str, list[str]], aliases: dict[str, str]) -> Iterator[tuple[str, Edit]]:
    if isinstance(node, (exp.Where, exp.Having)):
        yield f"drop {node.key}", _drop
    if isinstance(node, exp.Connector) and isinstance(node.parent, (exp.Where, exp.Having, exp.Connector, exp.Paren)):
        yield "drop predicate", _side("expression")
        yield "drop predicate", _side("this")
        yield "change connective", _binary(exp.Or if isinstance(node, exp.And) else exp.And)
    for target in COMPARISONS.get(type(node), ()):
        yield "change comparison", _binary(target)
    if isinstance(node, exp.Not):
        yield "drop NOT", lambda n: n.this.copy()
    if isinstance(node, exp.Literal) and not node.is_string and _number(node.this) is not None:
        for delta in (1, -1):
            yield "change number", _shifted(delta)
    for target in AGGREGATES.get(type(node), ()):
        yield "change aggregate", _unary(target)
    if isinstance(node, exp.Count):
        if isinstance(node.this, exp.Distinct):
            yield "drop DISTINCT", lambda n: exp.Count(this=n.this.expressions[0].copy())
        elif isinstance(node.this, exp.Column):
            yield "add DISTINCT", lambda n: exp.Count(this=exp.Distinct(expressions=[n.this.copy()]))
    if isinstance(node, exp.Join) and node.args.get("on") is not None and not node.side and node.kind != "CROSS":
        if not _filtered_on(node):
            yield "outer join", _left_join
    if isinstance(node, exp.Select) and node.args.get("limit") is not None:
        yield from _limit_edits(node)
    if isinstance(node, exp.Column) and schema:
        for other in _swaps(node, schema, aliases):
            yield "swap column", _renamed(other)


def _limit_edits(node: exp.Select) -> Iterator[tuple[str, Edit]]:
    yield "drop LIMIT", lambda n: _unset(n, "limit")
    if node.args.get("order") is not None:
        yield "drop ORDER BY", lambda n: _unset(n, "order")
        yield "reverse ORDER BY", _reverse_order


def _side(arg: str) -> Edit:
    return lambda n: n.args[arg].copy()


def _binary(kind: type[exp.Expr]) -> Edit:
    return lambda n: kind(this=n.this.copy(), expression=n.expression.copy())


def _unary(kind: type[exp.Expr]) -> Edit:
    return lambda n: kind(this=n.this.copy())


def _shifted(delta: int) -> Edit:
    return lambda n: exp.Literal.number(_shift(n.this, delta))


def _renamed(column: str) -> Edit:
    return lambda n: exp.column(column, table=n.text("table") or None)


def _filtered_on(join: exp.Join) -> bool:
    """Whether the WHERE of the join's query compares a column of the joined table: then
    the rows an outer join would add (NULLs there) are filtered out, and LEFT JOIN is the
    same query."""
    select = join.parent
    where = select.args.get("where") if isinstance(select, exp.Select) else None
    if where is None:
        return False
    alias = (join.this.alias_or_name or "").lower()
    compared = (
        c for cmp in where.find_all(*COMPARISONS, exp.Like, exp.In, exp.Between) for c in cmp.find_all(exp.Column)
    )
    return any(c.table.lower() == alias for c in compared)


def _drop(node: exp.Expr) -> exp.Expr:
    node.pop()
    return node


def _unset(node: exp.Expr, arg: str) -> exp.Expr:
    node.set(arg, None)
    return node


def _left_join(node: exp.Expr) -> exp.Expr:
    node.set("kind", None)
    node.set("side", "LEFT")
    return node


def _reverse_order(node: exp.Expr) -> exp.Expr:
    for ordered in node.args["order"].expressions:
        ordered.set("desc", not ordered.args.get("desc"))
    return node


def _number(text: str) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def _shift(text: str, delta: int) -> str:
    return str(int(text) + delta) if text.lstrip("-").isdigit() else repr(float(text) + delta)


def _aliases(tree: exp.Expr) -> dict[str, str]:
    """Table alias (and name) -> table name, lower-cased, over the whole query."""
    out: dict[str, str] = {}
    for table in tree.find_all(exp.Table):
        out[table.name.lower()] = table.name.lower()
        if table.alias:
            out[table.alias.lower()] = table.name.lower()
    return out


def _swaps(column: exp.Column, schema: dict[str, list[str]], aliases: dict[str, str]) -> list[str]:
    """Up to ``SWAPS_PER_COLUMN`` other columns of ``column``'s table (its neighbours in
    declaration order), when the table is known."""
    if isinstance(column.parent, exp.Ordered) or not column.name:
        return []
    if column.table:
        tables = [aliases.get(column.table.lower(), "")]
    else:
        tables = [t for t in dict.fromkeys(aliases.values()) if column.name.lower() in _lowered(schema.get(t, []))]
    if len(tables) != 1 or tables[0] not in schema:
        return []
    columns = schema[tables[0]]
    names = _lowered(columns)
    if column.name.lower() not in names:
        return []
    at = names.index(column.name.lower())
    others = [columns[i] for i in (at + 1, at - 1, at + 2, at - 2) if 0 <= i < len(columns) and i != at]
    return others[:SWAPS_PER_COLUMN]


def _lowered(columns: Sequence[str]) -> list[str]:
    return [c.lower() for c in columns]
