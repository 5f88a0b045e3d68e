"""What a neighbour database is made of: the original's schema, keys and values.

``read_plan(path, gold_sqls)`` reads, through one read-only connection, each table's DDL
and columns, its primary key and foreign keys (declared, plus the column equalities the
gold queries join on), a sample of its rows, each column's observed values, and the
literals the gold queries compare each column with (sqlglot). Nothing here writes.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlglot import exp

from rex.test_suite.mutations import parse

SAMPLE_ROWS = 2000
"""Rows read per table (the first ones): the source of whole rows to resample."""
DOMAIN_VALUES = 200
"""Distinct values kept per column (the most frequent of a column's first 50,000 rows)."""
COMPARED = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Like, exp.ILike, exp.In, exp.Between)


@dataclass
class TablePlan:
    """One table: its DDL, columns, keys, sampled rows and each column's value pool."""

    name: str
    ddl: str
    columns: list[str]
    primary: list[str]
    integer_key: str | None  # the INTEGER PRIMARY KEY column (rowid alias), if any
    foreign: dict[str, tuple[str, str]] = field(default_factory=dict)  # column -> (parent table, parent column)
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    values: dict[str, list[Any]] = field(default_factory=dict)
    literals: dict[str, list[Any]] = field(default_factory=dict)
    nullable: set[str] = field(default_factory=set)


@dataclass
class Plan:
    """Every table in an order where parents come before the tables that refer to them,
    and the rest of the schema (indexes, views, triggers) to create after the rows."""

    tables: list[TablePlan]
    extra_ddl: list[str]

    def schema(self) -> dict[str, list[str]]:
        return {t.name: list(t.columns) for t in self.tables}


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def read_plan(path: str | Path, gold_sqls: Iterable[str] = ()) -> Plan:
    """The plan of the database at ``path`` (opened read-only) and its gold queries."""
    conn = sqlite3.connect(f"file:{Path(path).resolve()}?mode=ro", uri=True)
    conn.text_factory = lambda b: b.decode("utf-8", "replace")
    try:
        master = conn.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL "
            "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY rowid"
        ).fetchall()
        tables = [_table(conn, name, ddl) for kind, name, ddl in master if kind == "table"]
        extra = [ddl for kind, _, ddl in master if kind in ("index", "view", "trigger")]
    finally:
        conn.close()
    golds = [t for t in (parse(s) for s in gold_sqls) if t is not None]
    _add_join_keys(tables, golds)
    _add_literals(tables, golds)
    return Plan(_parents_first(tables), extra)


def _table(conn: sqlite3.Connection, name: str, ddl: str) -> TablePlan:
    info = conn.execute(f'SELECT name, type, "notnull", pk FROM pragma_table_info({_text(name)})').fetchall()
    columns = [row[0] for row in info]
    keyed = sorted((row for row in info if row[3]), key=lambda row: row[3])
    primary = [row[0] for row in keyed]
    integer_key = keyed[0][0] if len(keyed) == 1 and str(keyed[0][1]).upper() == "INTEGER" else None
    plan = TablePlan(name, ddl, columns, primary, integer_key)
    for row in conn.execute(f'SELECT "table", "from", "to" FROM pragma_foreign_key_list({_text(name)})'):
        parent, child_col, parent_col = row
        plan.foreign[child_col] = (parent, parent_col or "")
    plan.rows = conn.execute(f"SELECT * FROM {quote(name)} LIMIT {SAMPLE_ROWS}").fetchall()
    for i, column in enumerate(columns):
        top = conn.execute(
            f"SELECT v FROM (SELECT {quote(column)} AS v FROM {quote(name)} LIMIT 50000) "
            f"GROUP BY v ORDER BY COUNT(*) DESC, v LIMIT {DOMAIN_VALUES}"
        ).fetchall()
        plan.values[column] = [v for (v,) in top if v is not None]
        if not info[i][2] and (len(top) > len(plan.values[column]) or not plan.rows):
            plan.nullable.add(column)
    return plan


def _text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _parents_first(tables: list[TablePlan]) -> list[TablePlan]:
    by_name = {t.name.lower(): t for t in tables}
    done: dict[str, TablePlan] = {}

    def visit(table: TablePlan, path: tuple[str, ...]) -> None:
        key = table.name.lower()
        if key in done or key in path:
            return
        for parent, _ in table.foreign.values():
            if parent.lower() in by_name:
                visit(by_name[parent.lower()], (*path, key))
        done[key] = table

    for t in tables:
        visit(t, ())
    for t in done.values():  # a reference into a cycle or a missing table cannot be kept: it is dropped
        order = list(done)
        t.foreign = {
            c: (p, pc)
            for c, (p, pc) in t.foreign.items()
            if p.lower() in by_name and order.index(p.lower()) < order.index(t.name.lower())
        }
    for t in done.values():  # a reference with no named parent column points at the parent's key
        for c, (p, pc) in list(t.foreign.items()):
            parent = by_name[p.lower()]
            if not pc and len(parent.primary) == 1:
                t.foreign[c] = (parent.name, parent.primary[0])
            elif not pc:
                del t.foreign[c]
    return list(done.values())


# ----------------------------------------------------------------------------- gold queries


def _columns_of(column: exp.Column, tree: exp.Expr, tables: Sequence[TablePlan]) -> list[tuple[TablePlan, str]]:
    """The (table, column) a column reference names: by its alias, else every table the
    query reads that has a column of that name."""
    aliases: dict[str, str] = {}
    for table in tree.find_all(exp.Table):
        aliases[table.name.lower()] = table.name.lower()
        if table.alias:
            aliases[table.alias.lower()] = table.name.lower()
    wanted = {aliases.get(column.table.lower())} if column.table else set(aliases.values())
    out = []
    for t in tables:
        if t.name.lower() in wanted:
            out += [(t, c) for c in t.columns if c.lower() == column.name.lower()]
    return out


def _add_join_keys(tables: list[TablePlan], golds: list[exp.Expr]) -> None:
    """A join on ``child.x = parent.key`` the schema does not declare (BIRD often omits
    them) is kept consistent like a declared foreign key."""
    for tree in golds:
        for eq in tree.find_all(exp.EQ):
            left, right = (_bare_column(side) for side in (eq.this, eq.expression))
            if left is None or right is None:
                continue
            for a, ca in _columns_of(left, tree, tables)[:1]:
                for b, cb in _columns_of(right, tree, tables)[:1]:
                    if a is b:
                        continue
                    if b.primary == [cb] and ca not in a.foreign and ca not in a.primary:
                        a.foreign[ca] = (b.name, cb)
                    elif a.primary == [ca] and cb not in b.foreign and cb not in b.primary:
                        b.foreign[cb] = (a.name, ca)


def _bare_column(node: exp.Expr) -> exp.Column | None:
    while isinstance(node, (exp.Cast, exp.Paren)):
        node = node.this
    return node if isinstance(node, exp.Column) else None


def _add_literals(tables: list[TablePlan], golds: list[exp.Expr]) -> None:
    """Each literal a gold query compares a column with directly, on that column; numbers
    also one above and one below (so ``>`` and ``>=`` differ on some row). A column a gold
    query tests with ``IS [NOT] NULL`` may be NULL in the neighbours (unless the DDL says
    NOT NULL: then ``INSERT OR IGNORE`` drops the row)."""
    for tree in golds:
        for test in tree.find_all(exp.Is):  # ``x IS [NOT] NULL``: NULL is a value the query cares about
            column = _bare_column(test.this)
            for table, name in _columns_of(column, tree, tables) if column is not None else ():
                if name not in table.primary:
                    table.nullable.add(name)
        for node in tree.find_all(*COMPARED):
            column = _bare_column(node.this)
            if column is None:
                continue
            for literal in node.find_all(exp.Literal):
                for table, name in _columns_of(column, tree, tables):
                    pool = table.literals.setdefault(name, [])
                    for value in _values_of(literal):
                        if value not in pool:
                            pool.append(value)


def _values_of(literal: exp.Literal) -> list[Any]:
    if literal.is_string:
        text = str(literal.this)
        return [text.strip("%")] if "%" in text else [text]
    try:
        number: float = float(literal.this)
    except ValueError:
        return []
    if number.is_integer() and "." not in str(literal.this):
        return [int(number), int(number) + 1, int(number) - 1]
    return [number, number + 0.01, number - 0.01]
