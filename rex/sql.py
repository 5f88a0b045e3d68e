"""Reading SQL with sqlglot (SQLite dialect): referenced schema, ORDER BY, guards, extraction.

Every function here takes untrusted text (model output or gold SQL of uneven quality) and
never raises on it: unparseable SQL gives a result that says so (``SqlReference.parsed``
is False with an ``error``), predicates answer False, and ``extract_sql`` answers None.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import cast

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.qualify import qualify
from sqlglot.optimizer.scope import Scope, traverse_scope

DIALECT = "sqlite"

MAX_SELECTS = 256
"""``referenced_schema`` refuses queries with more SELECTs than this: sqlglot's scope
analysis is quadratic in them (3,000 UNIONs take seconds), and no real query has so many."""

SchemaMap = Mapping[str, Sequence[str]]
"""``{table: [column, ...]}`` as ``tools.Database.schema()`` returns it (any case)."""


@dataclass(frozen=True)
class SqlReference:
    """The tables and columns one SQL text references, lower-cased and sorted.

    ``columns`` are ``"table.column"`` strings naming base tables (aliases, CTEs and
    derived tables are resolved to the base table they read). ``unresolved`` holds column
    names that no table in scope has (typos, or SQLite's double-quoted string literals
    such as ``WHERE name = "Bob"``); they are not in ``columns``. ``parsed`` is False
    when sqlglot could not read the text; ``error`` then says why.
    """

    tables: tuple[str, ...]
    columns: tuple[str, ...]
    parsed: bool
    error: str | None = None
    unresolved: tuple[str, ...] = ()


# --------------------------------------------------------------------------- text


_TOKEN = re.compile(
    r"""
    (?P<quoted>'(?:[^']|'')*'?|"(?:[^"]|"")*"?|`(?:[^`]|``)*`?|\[[^\]]*\]?)
    |(?P<comment>--[^\n]*|/\*.*?(?:\*/|\Z))
    |(?P<space>\s+)
    |(?P<code>[^\s'"`\[\-/]+|[-/])
    """,
    re.DOTALL | re.VERBOSE,
)


def _scan(sql: str) -> Iterable[tuple[str, str]]:
    """Split SQL text into ("quoted" | "comment" | "space" | "code", text) pieces.

    A small regex scanner rather than sqlglot's tokenizer, because normalisation must
    keep the text of literals and identifiers byte-for-byte and must work on text that
    does not parse. Quotes are '…', "…", `…` (doubled to escape) and […]; unterminated
    quotes and comments run to the end of the text.
    """
    for match in _TOKEN.finditer(sql):
        yield match.lastgroup or "code", match.group()


def normalize_sql(sql: str) -> str:
    """Strip comments and trailing semicolons; collapse whitespace outside quotes.

    Literals and quoted identifiers are kept exactly, so the normalised text executes to
    the same result; it is the key of the gold-result cache and of self-consistency.

    >>> normalize_sql("SELECT  a -- the a\\n FROM t /* x */ WHERE b = 'a  b';;  ")
    "SELECT a FROM t WHERE b = 'a  b'"
    """
    if not isinstance(sql, str):
        return ""
    if _SPECIAL.search(sql) is None:  # no quotes or comments: whitespace is all there is
        text = " ".join(sql.split())
    else:
        text = _collapse(sql)
    while text.endswith(";"):  # what precedes a trailing ";" outside quotes is code or a gap
        text = text[:-1].rstrip(" ")
    return text


_SPECIAL = re.compile(r"['\"`\[]|--|/\*")
_QUOTED_OR_GAP = re.compile(
    r"(?P<quoted>'(?:[^']|'')*'?|\"(?:[^\"]|\"\")*\"?|`(?:[^`]|``)*`?|\[[^\]]*\]?)"
    r"|(?:--[^\n]*|/\*.*?(?:\*/|\Z)|\s)+",
    re.DOTALL,
)


def _collapse(sql: str) -> str:
    """Comments and whitespace runs outside quotes become one space; ends trimmed."""
    pieces: list[str] = []
    pos = 0
    last_gap_end = -1
    for match in _QUOTED_OR_GAP.finditer(sql):
        pieces.append(sql[pos : match.start()])
        if match.lastgroup == "quoted":
            pieces.append(match.group())
        else:
            pieces.append(" ")
            last_gap_end = match.end()
        pos = match.end()
    pieces.append(sql[pos:])
    if last_gap_end == len(sql):
        pieces[-2:] = [""]  # a trailing gap (the last piece is then empty)
    text = "".join(pieces)
    return text[1:] if text.startswith(" ") else text  # a leading space is always a gap


def _strip_fence(text: str) -> str:
    """The body of the last ``` fenced block in ``text``, or ``text`` itself."""
    blocks = _FENCE.findall(text)
    if blocks:
        return blocks[-1]
    unclosed = _FENCE_OPEN.search(text)  # generation stopped before the closing fence
    if unclosed:
        return text[unclosed.end() :]
    return text


_FENCE = re.compile(r"```[ \t]*(?:sql|sqlite|SQL|SQLite)?[ \t]*\n?(.*?)```", re.DOTALL)
_FENCE_OPEN = re.compile(r"```[ \t]*(?:sql|sqlite|SQL|SQLite)?[ \t]*\n?")
_TAGS = ("final_answer", "answer")
_BARE_START = re.compile(
    r"(?m)^[ \t]*(?:SELECT|select|(?:WITH|with)\s+(?:RECURSIVE\s+|recursive\s+)?[\w\"`\[\]]+[^\n;]*?\b(?:AS|as)\s*\()"
)
"""A line that starts a query: SELECT / select (not the English "Select …"), or a WITH
clause shaped like a CTE (``WITH name AS (``)."""
_TAG = re.compile(r"</?[A-Za-z_][\w-]*>")


def _tag_body(text: str, tag: str) -> str | None:
    """Body of the last ``<tag>…</tag>``; an unclosed last tag runs to the end (stop
    strings are often cut from the generated text)."""
    opener = f"<{tag}>"
    start = text.rfind(opener)
    if start < 0:
        return None
    body_start = start + len(opener)
    end = text.find(f"</{tag}>", body_start)
    return text[body_start:] if end < 0 else text[body_start:end]


def _clean(sql: str) -> str | None:
    sql = sql.strip()
    while sql.endswith(";"):
        sql = sql[:-1].rstrip()
    return sql or None


def extract_sql(text: str) -> str | None:
    """The SQL a model answered with, or None when the text holds none.

    Order: the last ``<final_answer>`` body, else the last ``<answer>`` body (either may
    wrap a ```sql fence; an unclosed tag runs to the end), else the last ```sql (or
    plain ```) fence, else bare SQL: from the first line starting with SELECT / select
    or a CTE's ``WITH name AS (`` to the first semicolon or markup tag outside quotes.
    Surrounding whitespace and trailing semicolons are removed; comments are kept
    (``normalize_sql`` strips them).

    >>> extract_sql("<think>hm</think><answer>```sql\\nSELECT 1;\\n```</answer>")
    'SELECT 1'
    >>> extract_sql("no sql here") is None
    True
    """
    if not isinstance(text, str) or not text.strip():
        return None
    for tag in _TAGS:
        body = _tag_body(text, tag)
        if body is not None:
            return _clean(_strip_fence(body))
    blocks = _FENCE.findall(text)
    if blocks:
        return _clean(blocks[-1])
    unclosed = _FENCE_OPEN.search(text)
    if unclosed and _BARE_START.search(text, unclosed.end()):
        return _clean(text[unclosed.end() :])
    match = _BARE_START.search(text)
    if match is None:
        return None
    return _clean(_first_statement(text[match.start() :]))


def _first_statement(sql: str) -> str:
    """Text up to the first semicolon or markup tag (``</think>``) outside quotes and
    comments."""
    masked = "".join(
        piece if kind in ("code", "space") else "\0" * len(piece) for kind, piece in _scan(sql)
    )  # same length as sql; quoted text and comments hidden
    ends = [m.start() for m in (re.search(";", masked), _TAG.search(masked)) if m]
    return sql[: min(ends)] if ends else sql


# --------------------------------------------------------------------------- parsing


def _parse(sql: str) -> tuple[list[exp.Expression], str | None]:
    """All statements of ``sql`` (empty statements dropped), or an error message."""
    if not isinstance(sql, str) or not sql.strip():
        return [], "empty SQL"
    try:
        statements = sqlglot.parse(sql, read=DIALECT)  # list[Expression | None]
    except SqlglotError as err:
        return [], f"sqlglot could not parse the SQL: {_first_line(err)}"
    except Exception as err:  # sqlglot bugs on adversarial text must not reach a reward
        return [], f"sqlglot failed on the SQL ({type(err).__name__}): {_first_line(err)}"
    kept = [cast(exp.Expression, s) for s in statements if s is not None]
    if not kept:
        return [], "empty SQL"
    return kept, None


def _first_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [""])[0][:300]


def is_select_only(sql: str) -> bool:
    """True iff ``sql`` is exactly one read-only query (SELECT / WITH … SELECT / set op).

    >>> is_select_only("WITH a AS (SELECT 1) SELECT * FROM a")
    True
    >>> is_select_only("SELECT 1; DROP TABLE t")
    False
    """
    statements, error = _parse(sql)
    if error or len(statements) != 1:
        return False
    root = statements[0]
    if not isinstance(root, exp.Query):
        return False
    forbidden = (exp.Insert, exp.Update, exp.Delete, exp.Create, exp.Drop, exp.Alter, exp.Command)
    return not any(isinstance(node, forbidden) for node in root.walk())


def has_top_level_order_by(sql: str) -> bool:
    """True iff the outermost query of ``sql`` has an ORDER BY (REX then compares rows in
    order). ORDER BY inside subqueries, CTEs or window specs does not count. Text that
    does not parse falls back to a scan for ``ORDER BY`` outside parentheses.

    >>> has_top_level_order_by("SELECT a FROM (SELECT a FROM t ORDER BY a)")
    False
    >>> has_top_level_order_by("SELECT a FROM t UNION SELECT b FROM u ORDER BY 1")
    True
    """
    if not isinstance(sql, str) or _ORDER_WORD.search(sql) is None:
        return False  # fast path: most queries never say ORDER (no parse needed)
    statements, error = _parse(sql)
    if error:
        return _order_by_at_depth_zero(sql)
    root = statements[-1]
    return isinstance(root, exp.Query) and root.args.get("order") is not None


_ORDER_WORD = re.compile(r"order", re.IGNORECASE)


def _order_by_at_depth_zero(sql: str) -> bool:
    depth, code = 0, []
    for kind, piece in _scan(sql):
        if kind == "quoted":
            code.append(" " if depth else "'' ")
            continue
        if kind != "code":
            code.append(" ")
            continue
        for ch in piece:
            depth += ch == "("
            if depth == 0:
                code.append(ch)
            depth = max(0, depth - (ch == ")"))
    return re.search(r"\bORDER\s+BY\b", "".join(code), re.IGNORECASE) is not None


# --------------------------------------------------------------------------- references


def _lower_schema(schema: SchemaMap | None) -> dict[str, dict[str, str]]:
    """``{table: {column: type}}`` lower-cased, as sqlglot's MappingSchema wants it."""
    if not schema:
        return {}
    return {str(table).lower(): {str(col).lower(): "TEXT" for col in columns} for table, columns in schema.items()}


def _qualified(root: exp.Expression, schema: dict[str, dict[str, str]]) -> exp.Expression:
    """Qualify tables/columns and expand ``*``; on sqlglot errors fall back to less help
    (no schema, then the raw tree) and let ``_Resolver`` do the rest."""
    attempts: list[dict[str, object] | None] = [dict(schema), None] if schema else [None]
    for attempt in attempts:
        try:
            return qualify(
                root.copy(),
                schema=attempt or None,
                dialect=DIALECT,
                validate_qualify_columns=False,
                quote_identifiers=False,
                identify=False,
                expand_stars=True,
            )
        except Exception:  # OptimizeError and sqlglot bugs: try the next, simpler pass
            continue
    return root.copy()


class _Resolver:
    """Walks sqlglot scopes and maps every column to the base table it reads."""

    def __init__(self, schema: dict[str, dict[str, str]]) -> None:
        self.schema = schema
        self.tables: set[str] = set()
        self.columns: set[str] = set()
        self.unresolved: set[str] = set()

    def visit(self, root: exp.Expression) -> None:
        for scope in traverse_scope(root):
            self._visit_scope(scope)

    def _table_sources(self, scope: Scope | None) -> dict[str, str]:
        """alias -> base table name, this scope first, then enclosing scopes
        (correlated subqueries read outer aliases)."""
        found: dict[str, str] = {}
        while scope is not None:
            for alias, source in scope.sources.items():
                if isinstance(source, exp.Table) and alias.lower() not in found:
                    found[alias.lower()] = source.name.lower()
            scope = scope.parent
        return found

    def _visit_scope(self, scope: Scope) -> None:
        local = {alias.lower(): src.name.lower() for alias, src in scope.sources.items() if isinstance(src, exp.Table)}
        self.tables.update(t for t in local.values() if t)
        visible = self._table_sources(scope)
        derived = {a.lower() for a, s in scope.sources.items() if not isinstance(s, exp.Table)}
        for column in scope.columns:
            self._resolve(column, local, visible, derived, scope)
        self._expand_leftover_stars(scope, local, derived)

    def _resolve(
        self,
        column: exp.Column,
        local: dict[str, str],
        visible: dict[str, str],
        derived: set[str],
        scope: Scope,
    ) -> None:
        name = column.name.lower()
        if not name or isinstance(column.this, exp.Star):
            qualifier = column.table.lower()
            if qualifier in visible:
                self._add_all(visible[qualifier])
            return
        qualifier = column.table.lower()
        if qualifier:
            if qualifier in visible:
                self.columns.add(f"{visible[qualifier]}.{name}")
            elif qualifier not in derived and qualifier not in self._derived_anywhere(scope):
                self.columns.add(f"{qualifier}.{name}")  # a table the query never declared
            return
        owners = sorted({t for t in local.values() if name in self.schema.get(t, {})})
        single = set(local.values())
        if not owners and len(single) == 1 and next(iter(single)) not in self.schema:
            owners = list(single)  # no schema for that table: the scope's only table
        if len(owners) == 1:
            self.columns.add(f"{owners[0]}.{name}")
        elif not derived and not _is_alias_reference(column, name, scope):
            self.unresolved.add(name)

    @staticmethod
    def _derived_anywhere(scope: Scope | None) -> set[str]:
        names: set[str] = set()
        while scope is not None:
            names.update(a.lower() for a, s in scope.sources.items() if not isinstance(s, exp.Table))
            scope = scope.parent
        return names

    def _expand_leftover_stars(self, scope: Scope, local: dict[str, str], derived: set[str]) -> None:
        """``SELECT *`` that qualify could not expand (its fallback path)."""
        if not isinstance(scope.expression, exp.Select):
            return
        for projection in scope.expression.expressions:
            if isinstance(projection, exp.Star):
                for table in set(local.values()):
                    self._add_all(table)

    def _add_all(self, table: str) -> None:
        for col in self.schema.get(table, {}):
            self.columns.add(f"{table}.{col}")


def _is_alias_reference(column: exp.Column, name: str, scope: Scope) -> bool:
    """``ORDER BY cnt`` / ``GROUP BY``/``HAVING`` naming a projection alias, not a column."""
    if column.find_ancestor(exp.Order, exp.Group, exp.Having) is None:
        return False
    selects = getattr(scope.expression, "selects", None) or []
    return any(isinstance(s, exp.Expression) and s.alias_or_name.lower() == name for s in selects)


def referenced_schema(sql: str, schema: SchemaMap | None = None) -> SqlReference:
    """The base tables and ``table.column``s that ``sql`` reads, lower-cased.

    ``schema`` (``{table: [column, ...]}``, any case) lets ``*`` expand to every column
    of the tables it covers and resolves unqualified columns to the one table in scope
    that has them; without it, an unqualified column resolves only when its scope reads
    one table. Aliases, CTEs and derived tables resolve to the base tables they read;
    ``COUNT(*)`` references no column. Never raises.

    >>> ref = referenced_schema("SELECT T1.a FROM t AS T1 JOIN u ON T1.id = u.id",
    ...                         {"t": ["id", "a"], "u": ["id"]})
    >>> ref.tables, ref.columns
    (('t', 'u'), ('t.a', 't.id', 'u.id'))
    """
    statements, error = _parse(sql)
    if error:
        return SqlReference(tables=(), columns=(), parsed=False, error=error)
    selects = sum(1 for st in statements for _ in st.find_all(exp.Select))
    if selects > MAX_SELECTS:
        return SqlReference(
            tables=(),
            columns=(),
            parsed=False,
            error=f"query too complex to analyse ({selects} SELECTs; the limit is {MAX_SELECTS})",
        )
    lowered = _lower_schema(schema)
    resolver = _Resolver(lowered)
    try:
        for statement in statements:
            resolver.visit(_qualified(statement, lowered))
    except Exception as err:  # scope traversal on adversarial trees: report, never raise
        return SqlReference(
            tables=(),
            columns=(),
            parsed=False,
            error=f"could not resolve the query's references ({type(err).__name__}): {_first_line(err)}",
        )
    return SqlReference(
        tables=tuple(sorted(resolver.tables)),
        columns=tuple(sorted(resolver.columns)),
        parsed=True,
        error=None,
        unresolved=tuple(sorted(resolver.unresolved)),
    )
