"""Question generation: intents that phrase a question and write its gold SQL.

An intent looks at the domain description (``spec``) and the built database, picks its
parameters from the stored data (so a value it names exists), and returns a ``Draft``:
question, evidence, gold SQL, difficulty. Generic intents apply to every domain (counts,
filters, joins along foreign keys, GROUP BY / HAVING, nested queries, CASE ratios);
domain modules add their own. Gold SQL is noise-aware: numbers stored as text are CAST,
a noisy category matches every stored spelling, non-ISO dates use SUBSTR, fractions
versus 0-100 percentages are scaled. ``generate`` checks every draft by executing it and
keeps only unique questions whose result is non-empty.
"""

from __future__ import annotations

import math
import random
import re
import sqlite3
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from eval.data.minibird.spec import DATE_FORMATS, Column, Domain, Table

MAX_RESULT_ROWS = 40


@dataclass(frozen=True)
class Draft:
    question: str
    evidence: str
    sql: str
    difficulty: str
    intent: str


@dataclass(frozen=True)
class Intent:
    name: str
    difficulty: str
    make: Callable[[Ctx], Draft | None]


def intent(difficulty: str) -> Callable[[Callable[[Ctx], tuple[str, str, str] | None]], Intent]:
    """Decorator: a function returning (question, evidence, sql) becomes an ``Intent``."""

    def wrap(fn: Callable[[Ctx], tuple[str, str, str] | None]) -> Intent:
        def make(ctx: Ctx) -> Draft | None:
            out = fn(ctx)
            if out is None:
                return None
            question, evidence, sql = out
            return Draft(question, evidence, sql, difficulty, fn.__name__)

        return Intent(fn.__name__, difficulty, make)

    return wrap


def lit(value: object) -> str:
    """A SQL literal for a stored value."""
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(value)


class Ctx:
    """What an intent may use: the domain, a connection to the built database, an rng."""

    def __init__(self, domain: Domain, conn: sqlite3.Connection, rng: random.Random) -> None:
        self.domain, self.conn, self.rng = domain, conn, rng
        self._hints: list[str] = []

    # -- data access
    def rows(self, sql: str) -> list[tuple]:
        return self.conn.execute(sql).fetchall()

    def one(self, sql: str) -> object:
        row = self.conn.execute(sql).fetchone()
        return row[0] if row else None

    def choice(self, seq: Sequence):
        if not seq:
            return None
        return seq[self.rng.randrange(len(seq))]

    def tables_with(self, *kinds: str) -> list[Table]:
        return [t for t in self.domain.tables if all(t.of_kind(k) for k in kinds)]

    def pick_col(self, table: Table, *kinds: str, exclude_pct: bool = True) -> Column | None:
        cols = [c for c in table.of_kind(*kinds) if not (exclude_pct and c.pct)]
        return self.choice(cols)

    def cat_values(self, table: Table, column: Column) -> list[str]:
        """Canonical values of a categorical column (variants folded), sorted."""
        if column.noisy:
            return sorted(column.variants)
        values = self.rows(f"SELECT DISTINCT {column.name} FROM {table.name} WHERE {column.name} IS NOT NULL")
        return sorted(v[0] for v in values)

    def spellings(self, table: Table, column: Column, canonical: str) -> list[str]:
        """Every stored spelling of ``canonical`` (itself and its variants) present in the data."""
        wanted = [canonical, *column.variants.get(canonical, ())]
        present = {
            r[0]
            for r in self.rows(
                f"SELECT DISTINCT {column.name} FROM {table.name} "
                f"WHERE {column.name} IN ({', '.join(lit(w) for w in wanted)})"
            )
        }
        return sorted(w for w in wanted if w in present)

    # -- SQL fragments
    @staticmethod
    def ref(column: Column, alias: str = "") -> str:
        return f"{alias}.{column.name}" if alias else column.name

    def num(self, column: Column, alias: str = "") -> str:
        ref = self.ref(column, alias)
        if column.textnum:
            self.hint(f"{column.name} is stored as text; cast it to a number", 0.7)
            return f"CAST({ref} AS REAL)"
        return ref

    def cat_cond(self, table: Table, column: Column, canonical: str, alias: str = "") -> tuple[str, str]:
        """(SQL condition, question mention) for ``column = canonical``, noise-aware."""
        ref = self.ref(column, alias)
        mention = self.mention(canonical)
        if column.noisy:
            stored = self.spellings(table, column, canonical)
            cond = (
                f"{ref} = {lit(stored[0])}" if len(stored) == 1 else f"{ref} IN ({', '.join(lit(s) for s in stored)})"
            )
            self.hint(f"{mention} is stored as {' or '.join(lit(s) for s in stored)} in {column.name}", 0.5)
        else:
            cond = f"{ref} = {lit(canonical)}"
            self.hint(f"{mention} refers to {column.name} = {lit(canonical)}", 0.6)
        return cond, mention

    def year(self, column: Column, alias: str = "") -> str:
        ref = self.ref(column, alias)
        if column.date_format in ("iso", "iso_dt"):
            return f"STRFTIME('%Y', {ref})"
        self.hint(f"{column.name} is stored as text in the format {DATE_FORMATS[column.date_format]}", 1.0)
        return f"SUBSTR({ref}, -4)"

    def join(self, child_alias: str, fk: Column, parent_alias: str, pk: Column) -> str:
        left, right = f"{child_alias}.{fk.name}", f"{parent_alias}.{pk.name}"
        if fk.sqltype != pk.sqltype:  # the INTEGER-vs-TEXT key: compare as integers
            self.hint(f"{left} is stored as {fk.sqltype.lower()} while {right} is {pk.sqltype.lower()}", 0.7)
            return f"CAST({left} AS INTEGER) = {right}"
        return f"{left} = {right}"

    # -- language
    def mention(self, value: object) -> str:
        """How a question names a stored value: often in another case or spelling than
        stored (accents dropped, hyphens as spaces), so value search matters."""
        text = str(value)
        if not text.isascii() and self.rng.random() < 0.5:
            text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
        if "-" in text and self.rng.random() < 0.5:
            text = text.replace("-", " ")
        r = self.rng.random()
        if r < 0.35:
            return text.lower()
        if r < 0.45 and len(text) <= 12:
            return text.upper()
        if r < 0.6:
            return text.title()
        return text

    def hint(self, text: str, p: float) -> None:
        if self.rng.random() < p and text not in self._hints:
            self._hints.append(text)

    def col_hint(self, column: Column) -> None:
        if column.abbreviated:
            self.hint(f"{column.phrase} refers to {column.name}", 0.8)
        elif column.phrase.replace(" ", "_") != column.name:
            self.hint(f"{column.phrase} refers to {column.name}", 0.4)
        if column.pct == "frac":
            self.hint(f"{column.name} is stored as a fraction between 0 and 1", 0.7)
        elif column.pct == "100":
            self.hint(f"{column.name} is stored as a percentage between 0 and 100", 0.7)

    def take_evidence(self) -> str:
        out = "; ".join(self._hints)
        self._hints = []
        return out

    def say(self, templates: Sequence[str], **fields: object) -> str:
        text = self.choice(templates).format(**fields)
        text = re.sub(r"\b([Aa]) ([aeiouAEIOU])", r"\1n \2", text)  # "a amount" -> "an amount"
        return text[0].upper() + text[1:]

    def top_is_unique(self, scores_sql: str) -> bool:
        """True when the first two rows of an ordered score query differ (no tie at the top)."""
        rows = self.rows(scores_sql + " LIMIT 2")
        return len(rows) == 1 or (len(rows) == 2 and rows[0][0] != rows[1][0])

    def fks(self) -> list[tuple[Table, Column, Table, Column]]:
        return self.domain.foreign_keys()

    def round_threshold(self, table: Table, column: Column) -> float | int | None:
        """A round number inside the column's range, for 'greater than k' questions."""
        expr = self.num(column)
        values = [
            r[0] for r in self.rows(f"SELECT {expr} FROM {table.name} WHERE {column.name} IS NOT NULL ORDER BY 1")
        ]
        if len(values) < 4:
            return None
        raw = values[int(len(values) * self.rng.uniform(0.55, 0.95))]
        spread = float(values[-1]) - float(values[0])
        magnitude = 10 ** max(0, int(math.log10(spread / 10)) if spread >= 10 else 0)
        return int(raw // magnitude * magnitude)


# ----------------------------------------------------------------------------- simple


@intent("simple")
def count_all(ctx: Ctx):
    t = ctx.choice(ctx.domain.tables)
    q = ctx.say(
        [
            "How many {n} are there?",
            "What is the total number of {n}?",
            "How many {n} does the database list?",
            "Count the {n}.",
            "Give the number of {n} in the database.",
        ],
        n=t.nouns,
    )
    return q, ctx.take_evidence(), f"SELECT COUNT(*) FROM {t.name}"


@intent("simple")
def count_cat(ctx: Ctx):
    t = ctx.choice(ctx.tables_with("cat"))
    c = ctx.pick_col(t, "cat")
    if t is None or c is None:
        return None
    value = ctx.choice(ctx.cat_values(t, c))
    cond, m = ctx.cat_cond(t, c, value)
    ctx.col_hint(c)
    q = ctx.say(
        [
            "How many {n} have {p} {v}?",
            "How many {n} are there whose {p} is {v}?",
            "Count the {n} with {p} '{v}'.",
            "What is the number of {n} where the {p} is {v}?",
            "How many {n} with a {p} of {v} are recorded?",
        ],
        n=t.nouns,
        p=c.phrase,
        v=m,
    )
    return q, ctx.take_evidence(), f"SELECT COUNT(*) FROM {t.name} WHERE {cond}"


@intent("simple")
def list_names_cat(ctx: Ctx):
    t = ctx.choice(ctx.tables_with("name", "cat"))
    if t is None:
        return None
    c = ctx.pick_col(t, "cat")
    if c is None:
        return None
    value = ctx.choice(ctx.cat_values(t, c))
    cond, m = ctx.cat_cond(t, c, value)
    name = t.name_column
    ctx.col_hint(c)
    q = ctx.say(
        [
            "List the {np} of {n} whose {p} is {v}.",
            "Which {n} have {p} {v}? Give their {np}.",
            "Name the {n} with {p} {v}.",
            "What are the {np} of the {n} where {p} is {v}?",
        ],
        n=t.nouns,
        p=c.phrase,
        v=m,
        np=plural(name.phrase),
    )
    return q, ctx.take_evidence(), f"SELECT {name.name} FROM {t.name} WHERE {cond}"


@intent("simple")
def max_min_num(ctx: Ctx):
    t = ctx.choice(ctx.tables_with("num"))
    c = ctx.pick_col(t, "num") if t else None
    if c is None:
        return None
    high = ctx.rng.random() < 0.5
    fn, word = (
        ("MAX", ctx.choice(["highest", "largest", "maximum"]))
        if high
        else ("MIN", ctx.choice(["lowest", "smallest", "minimum"]))
    )
    ctx.col_hint(c)
    q = ctx.say(
        [
            "What is the {w} {p} among all {n}?",
            "What is the {w} {p} of any {s}?",
            "Find the {w} {p} recorded for the {n}.",
        ],
        w=word,
        p=c.phrase,
        n=t.nouns,
        s=t.noun,
    )
    return q, ctx.take_evidence(), f"SELECT {fn}({ctx.num(c)}) FROM {t.name}"


@intent("simple")
def avg_num(ctx: Ctx):
    t = ctx.choice(ctx.tables_with("num"))
    c = ctx.pick_col(t, "num") if t else None
    if c is None:
        return None
    ctx.col_hint(c)
    cats = [x for x in t.of_kind("cat")]
    if cats and ctx.rng.random() < 0.6:
        cat = ctx.choice(cats)
        cond, m = ctx.cat_cond(t, cat, ctx.choice(ctx.cat_values(t, cat)))
        q = ctx.say(
            [
                "What is the average {p} of {n} whose {cp} is {v}?",
                "For {n} with {cp} {v}, what is the average {p}?",
                "Give the mean {p} of the {n} where {cp} is {v}.",
            ],
            p=c.phrase,
            n=t.nouns,
            cp=cat.phrase,
            v=m,
        )
        return q, ctx.take_evidence(), f"SELECT AVG({ctx.num(c)}) FROM {t.name} WHERE {cond}"
    q = ctx.say(
        [
            "What is the average {p} of the {n}?",
            "Calculate the average {p} across all {n}.",
            "On average, what is the {p} of a {s}?",
        ],
        p=c.phrase,
        n=t.nouns,
        s=t.noun,
    )
    return q, ctx.take_evidence(), f"SELECT AVG({ctx.num(c)}) FROM {t.name}"


@intent("simple")
def top_name_by_num(ctx: Ctx):
    t = ctx.choice(ctx.tables_with("name", "num"))
    c = ctx.pick_col(t, "num") if t else None
    if c is None:
        return None
    high = ctx.rng.random() < 0.6
    order = "DESC" if high else "ASC"
    expr = ctx.num(c)
    if not ctx.top_is_unique(f"SELECT {expr} FROM {t.name} WHERE {c.name} IS NOT NULL ORDER BY {expr} {order}"):
        return None
    ctx.col_hint(c)
    word = ctx.choice(["highest", "largest", "greatest"]) if high else ctx.choice(["lowest", "smallest"])
    q = ctx.say(
        [
            "Which {s} has the {w} {p}?",
            "Name the {s} with the {w} {p}.",
            "What is the {np} of the {s} with the {w} {p}?",
        ],
        s=t.noun,
        w=word,
        p=c.phrase,
        np=t.name_column.phrase,
    )
    sql = f"SELECT {t.name_column.name} FROM {t.name} WHERE {c.name} IS NOT NULL ORDER BY {expr} {order} LIMIT 1"
    return q, ctx.take_evidence(), sql


@intent("simple")
def lookup_attr(ctx: Ctx):
    t = ctx.choice(ctx.tables_with("name"))
    if t is None:
        return None
    name = t.name_column
    attrs = [c for c in t.columns if c.kind in ("cat", "num", "date", "text") and not c.pct]
    c = ctx.choice(attrs)
    if c is None:
        return None
    unique_names = ctx.rows(
        f"SELECT {name.name} FROM {t.name} WHERE {c.name} IS NOT NULL "
        f"GROUP BY {name.name} HAVING COUNT(*) = 1 ORDER BY {name.name}"
    )
    value = ctx.choice(unique_names)
    if value is None:
        return None
    m = ctx.mention(value[0])
    ctx.hint(f"{m} refers to {name.name} = {lit(value[0])}", 0.6)
    ctx.col_hint(c)
    q = ctx.say(
        [
            "What is the {p} of {v}?",
            "Give the {p} of the {s} named {v}.",
            "Tell me the {p} of {s} {v}.",
            "What {p} does {v} have?",
        ],
        p=c.phrase,
        v=m,
        s=t.noun,
    )
    return q, ctx.take_evidence(), f"SELECT {c.name} FROM {t.name} WHERE {name.name} = {lit(value[0])}"


@intent("simple")
def count_num_gt(ctx: Ctx):
    t = ctx.choice(ctx.tables_with("num"))
    c = ctx.pick_col(t, "num") if t else None
    if c is None:
        return None
    k = ctx.round_threshold(t, c)
    if k is None:
        return None
    ctx.col_hint(c)
    word, op = ctx.choice([("more than", ">"), ("greater than", ">"), ("at least", ">="), ("over", ">")])
    q = ctx.say(
        ["How many {n} have a {p} {w} {k}?", "Count the {n} whose {p} is {w} {k}.", "How many {n} have {p} {w} {k}?"],
        n=t.nouns,
        p=c.phrase,
        w=word,
        k=k,
    )
    return q, ctx.take_evidence(), f"SELECT COUNT(*) FROM {t.name} WHERE {ctx.num(c)} {op} {k}"


@intent("simple")
def distinct_cat(ctx: Ctx):
    t = ctx.choice(ctx.tables_with("cat"))
    cols = [c for c in t.of_kind("cat") if not c.noisy and not c.pct] if t else []
    c = ctx.choice(cols)
    if c is None:
        return None
    ctx.col_hint(c)
    q = ctx.say(
        [
            "List the distinct {p} values of the {n}.",
            "What different {p}s appear among the {n}?",
            "Which {p}s do the {n} have? List each once.",
        ],
        p=c.phrase,
        n=t.nouns,
    )
    return q, ctx.take_evidence(), f"SELECT DISTINCT {c.name} FROM {t.name} WHERE {c.name} IS NOT NULL"


@intent("simple")
def count_year(ctx: Ctx):
    t = ctx.choice(ctx.tables_with("date"))
    c = ctx.pick_col(t, "date") if t else None
    if c is None or c.date_format not in ("iso", "iso_dt"):
        return None
    year = ctx.choice(
        [
            r[0]
            for r in ctx.rows(
                f"SELECT DISTINCT STRFTIME('%Y', {c.name}) FROM {t.name} WHERE {c.name} IS NOT NULL ORDER BY 1"
            )
        ]
    )
    if year is None:
        return None
    ctx.col_hint(c)
    q = ctx.say(
        [
            "How many {n} have a {p} in {y}?",
            "Count the {n} whose {p} falls in {y}.",
            "How many {n} had their {p} in the year {y}?",
        ],
        n=t.nouns,
        p=c.phrase,
        y=year,
    )
    return q, ctx.take_evidence(), f"SELECT COUNT(*) FROM {t.name} WHERE {ctx.year(c)} = {lit(year)}"


@intent("simple")
def count_null(ctx: Ctx):
    cands = [(t, c) for t in ctx.domain.tables for c in t.columns if c.nullable]
    pick = ctx.choice(cands)
    if pick is None:
        return None
    t, c = pick
    ctx.col_hint(c)
    if ctx.rng.random() < 0.5:
        q = ctx.say(
            ["How many {n} have no {p} recorded?", "Count the {n} whose {p} is missing.", "How many {n} lack a {p}?"],
            n=t.nouns,
            p=c.phrase,
        )
        return q, ctx.take_evidence(), f"SELECT COUNT(*) FROM {t.name} WHERE {c.name} IS NULL"
    q = ctx.say(["How many {n} have a recorded {p}?", "Count the {n} with a known {p}."], n=t.nouns, p=c.phrase)
    return q, ctx.take_evidence(), f"SELECT COUNT({c.name}) FROM {t.name}"


@intent("simple")
def list_names_num_gt(ctx: Ctx):
    t = ctx.choice(ctx.tables_with("name", "num"))
    c = ctx.pick_col(t, "num") if t else None
    if c is None:
        return None
    expr = ctx.num(c)
    top = ctx.rows(f"SELECT {expr} FROM {t.name} WHERE {c.name} IS NOT NULL ORDER BY {expr} DESC LIMIT 12")
    if len(top) < 3:
        return None
    k = top[ctx.rng.randrange(2, len(top))][0]
    k = int(k) if float(k).is_integer() else round(float(k), 1)
    ctx.col_hint(c)
    q = ctx.say(
        [
            "List the {nps} of {n} with a {p} above {k}.",
            "Which {n} have a {p} greater than {k}?",
            "Name every {s} whose {p} exceeds {k}.",
        ],
        nps=plural(t.name_column.phrase),
        n=t.nouns,
        p=c.phrase,
        k=k,
        s=t.noun,
    )
    return q, ctx.take_evidence(), f"SELECT {t.name_column.name} FROM {t.name} WHERE {expr} > {k}"


# --------------------------------------------------------------------------- moderate


def _fk_with(ctx: Ctx, child_kinds: tuple[str, ...] = (), parent_name: bool = True):
    cands = [
        fk
        for fk in ctx.fks()
        if (not parent_name or fk[2].name_column is not None) and all(fk[0].of_kind(k) for k in child_kinds)
    ]
    return ctx.choice(cands)


def plural(noun: str) -> str:
    if noun.endswith(("s", "sh", "ch", "x")):
        return noun + "es"
    if noun.endswith("y") and noun[-2:-1] not in "aeiou":
        return noun[:-1] + "ies"
    return noun + "s"


def additive(column: Column) -> bool:
    """Whether summing the column means something (not for years)."""
    return not any(part in column.name for part in ("year", "yr", "founded"))


def role(fk: Column) -> str:
    """How a question names the parent a foreign key points to: "home team", "clinic"."""
    for suffix in (" id", " code"):
        if fk.phrase.endswith(suffix):
            return fk.phrase[: -len(suffix)]
    return fk.phrase


def _parent_value(ctx: Ctx, child: Table, fk: Column, parent: Table, pk: Column) -> str | None:
    """A parent display name that is unique and has at least one child row."""
    name = parent.name_column
    if name is None:  # _fk_with(parent_name=True) only offers parents that have one
        return None
    on = ctx.join("T1", fk, "T2", pk)
    rows = ctx.rows(
        f"SELECT T2.{name.name} FROM {child.name} AS T1 INNER JOIN {parent.name} AS T2 ON {on} "
        f"GROUP BY T2.{name.name} HAVING COUNT(DISTINCT T2.{pk.name}) = 1 ORDER BY T2.{name.name}"
    )
    ctx.take_evidence()  # the join hint above was for a probe query, not the question
    pick = ctx.choice(rows)
    return pick[0] if pick else None


@intent("moderate")
def join_count_parent(ctx: Ctx):
    fk = _fk_with(ctx)
    if fk is None:
        return None
    child, fkc, parent, pk = fk
    value = _parent_value(ctx, *fk)
    if value is None:
        return None
    m = ctx.mention(value)
    name = parent.name_column
    q = ctx.say(
        [
            "How many {cn} have {r} {v}?",
            "For the {r} {v}, how many {cn} are there?",
            "Count the {cn} whose {r} is {v}.",
            "How many {cn} list {v} as their {r}?",
        ],
        cn=child.nouns,
        r=role(fkc),
        v=m,
    )
    ctx.hint(f"{m} refers to {name.name} = {lit(value)}", 0.6)
    sql = (
        f"SELECT COUNT(*) FROM {child.name} AS T1 INNER JOIN {parent.name} AS T2 ON {ctx.join('T1', fkc, 'T2', pk)} "
        f"WHERE T2.{name.name} = {lit(value)}"
    )
    return q, ctx.take_evidence(), sql


@intent("moderate")
def join_child_names(ctx: Ctx):
    fk = _fk_with(ctx, ("name",))
    if fk is None:
        return None
    child, fkc, parent, pk = fk
    value = _parent_value(ctx, *fk)
    if value is None:
        return None
    m = ctx.mention(value)
    ctx.hint(f"{m} refers to {parent.name_column.name} = {lit(value)}", 0.6)
    q = ctx.say(
        [
            "List the {nps} of the {cn} whose {r} is {v}.",
            "Which {cn} have {r} {v}?",
            "Give the {np} of every {cs} with {r} {v}.",
        ],
        nps=plural(child.name_column.phrase),
        np=child.name_column.phrase,
        cn=child.nouns,
        cs=child.noun,
        r=role(fkc),
        v=m,
    )
    sql = (
        f"SELECT T1.{child.name_column.name} FROM {child.name} AS T1 INNER JOIN {parent.name} AS T2 ON "
        f"{ctx.join('T1', fkc, 'T2', pk)} WHERE T2.{parent.name_column.name} = {lit(value)}"
    )
    return q, ctx.take_evidence(), sql


@intent("moderate")
def group_top_cat(ctx: Ctx):
    t = ctx.choice(ctx.tables_with("cat"))
    cols = [c for c in t.of_kind("cat") if not c.noisy] if t else []
    c = ctx.choice(cols)
    if c is None:
        return None
    if not ctx.top_is_unique(
        f"SELECT COUNT(*) FROM {t.name} WHERE {c.name} IS NOT NULL GROUP BY {c.name} ORDER BY COUNT(*) DESC"
    ):
        return None
    most = ctx.rng.random() < 0.75
    order = "DESC" if most else "ASC"
    if not most and not ctx.top_is_unique(
        f"SELECT COUNT(*) FROM {t.name} WHERE {c.name} IS NOT NULL GROUP BY {c.name} ORDER BY COUNT(*) ASC"
    ):
        return None
    word = "most" if most else "fewest"
    ctx.col_hint(c)
    q = ctx.say(
        [
            "Which {p} has the {w} {n}?",
            "What is the {p} shared by the {w} {n}?",
            "Among the {n}, which {p} occurs the {w} times?",
        ],
        p=c.phrase,
        w=word,
        n=t.nouns,
    )
    if "times" in q:
        q = q.replace("fewest times", "least often").replace("most times", "most often")
    sql = (
        f"SELECT {c.name} FROM {t.name} WHERE {c.name} IS NOT NULL GROUP BY {c.name} ORDER BY COUNT(*) {order} LIMIT 1"
    )
    return q, ctx.take_evidence(), sql


@intent("moderate")
def join_avg_for_parent(ctx: Ctx):
    fk = _fk_with(ctx, ("num",))
    if fk is None:
        return None
    child, fkc, parent, pk = fk
    c = ctx.pick_col(child, "num")
    if c is None:
        return None
    value = _parent_value(ctx, *fk)
    if value is None:
        return None
    m = ctx.mention(value)
    ctx.hint(f"{m} refers to {parent.name_column.name} = {lit(value)}", 0.6)
    ctx.col_hint(c)
    fn, word = ctx.choice(
        [("AVG", "average"), ("SUM", "total"), ("MAX", "highest")]
        if additive(c)
        else [("MAX", "latest"), ("MIN", "earliest")]
    )
    q = ctx.say(
        ["What is the {w} {p} of the {cn} whose {r} is {v}?", "For the {r} {v}, what is the {w} {p} across its {cn}?"],
        w=word,
        p=c.phrase,
        cn=child.nouns,
        r=role(fkc),
        v=m,
    )
    sql = (
        f"SELECT {fn}({ctx.num(c, 'T1')}) FROM {child.name} AS T1 INNER JOIN {parent.name} AS T2 ON "
        f"{ctx.join('T1', fkc, 'T2', pk)} WHERE T2.{parent.name_column.name} = {lit(value)}"
    )
    return q, ctx.take_evidence(), sql


@intent("moderate")
def parent_of_top_child(ctx: Ctx):
    fk = _fk_with(ctx, ("num",))
    if fk is None:
        return None
    child, fkc, parent, pk = fk
    c = ctx.pick_col(child, "num")
    if c is None:
        return None
    expr = ctx.num(c, "T1")
    on = ctx.join("T1", fkc, "T2", pk)
    if not ctx.top_is_unique(
        f"SELECT {expr} FROM {child.name} AS T1 INNER JOIN {parent.name} AS T2 ON {on} "
        f"WHERE T1.{c.name} IS NOT NULL ORDER BY {expr} DESC"
    ):
        ctx.take_evidence()
        return None
    ctx.col_hint(c)
    q = ctx.say(
        [
            "What is the {r} of the {cs} with the highest {p}?",
            "Name the {r} of the {cs} that has the largest {p}.",
            "The {cs} with the greatest {p} has which {r}?",
        ],
        r=role(fkc),
        cs=child.noun,
        p=c.phrase,
    )
    sql = (
        f"SELECT T2.{parent.name_column.name} FROM {child.name} AS T1 INNER JOIN {parent.name} AS T2 ON {on} "
        f"WHERE T1.{c.name} IS NOT NULL ORDER BY {expr} DESC LIMIT 1"
    )
    return q, ctx.take_evidence(), sql


@intent("moderate")
def count_year_cat(ctx: Ctx):
    t = ctx.choice(ctx.tables_with("date", "cat"))
    if t is None:
        return None
    d, c = ctx.pick_col(t, "date"), ctx.pick_col(t, "cat")
    if d is None or c is None:
        return None
    year_expr = ctx.year(d)
    year = ctx.choice(
        [r[0] for r in ctx.rows(f"SELECT DISTINCT {year_expr} FROM {t.name} WHERE {d.name} IS NOT NULL ORDER BY 1")]
    )
    cond, m = ctx.cat_cond(t, c, ctx.choice(ctx.cat_values(t, c)))
    ctx.col_hint(d)
    ctx.col_hint(c)
    q = ctx.say(
        ["How many {n} with {cp} {v} have a {dp} in {y}?", "Count the {n} whose {dp} is in {y} and whose {cp} is {v}."],
        n=t.nouns,
        cp=c.phrase,
        v=m,
        dp=d.phrase,
        y=year,
    )
    return q, ctx.take_evidence(), f"SELECT COUNT(*) FROM {t.name} WHERE {year_expr} = {lit(year)} AND {cond}"


@intent("moderate")
def sum_num_cat(ctx: Ctx):
    t = ctx.choice(ctx.tables_with("num", "cat"))
    if t is None:
        return None
    c, cat = ctx.pick_col(t, "num"), ctx.pick_col(t, "cat")
    if c is None or cat is None or not additive(c):
        return None
    cond, m = ctx.cat_cond(t, cat, ctx.choice(ctx.cat_values(t, cat)))
    ctx.col_hint(c)
    q = ctx.say(
        ["What is the total {p} of the {n} with {cp} {v}?", "Sum the {p} over all {n} whose {cp} is {v}."],
        p=c.phrase,
        n=t.nouns,
        cp=cat.phrase,
        v=m,
    )
    return q, ctx.take_evidence(), f"SELECT SUM({ctx.num(c)}) FROM {t.name} WHERE {cond}"


@intent("moderate")
def count_parents_with_child_cat(ctx: Ctx):
    fk = _fk_with(ctx, ("cat",), parent_name=False)
    if fk is None:
        return None
    child, fkc, parent, pk = fk
    cat = ctx.pick_col(child, "cat")
    if cat is None:
        return None
    cond, m = ctx.cat_cond(child, cat, ctx.choice(ctx.cat_values(child, cat)), alias="T1")
    q = ctx.say(
        [
            "How many different {rs} appear on {cn} with {cp} {v}?",
            "Count the distinct {rs} of the {cn} whose {cp} is {v}.",
        ],
        rs=plural(role(fkc)),
        cn=child.nouns,
        cp=cat.phrase,
        v=m,
    )
    sql = (
        f"SELECT COUNT(DISTINCT T2.{pk.name}) FROM {child.name} AS T1 INNER JOIN {parent.name} AS T2 ON "
        f"{ctx.join('T1', fkc, 'T2', pk)} WHERE {cond}"
    )
    return q, ctx.take_evidence(), sql


@intent("moderate")
def pct_threshold(ctx: Ctx):
    cands = [(t, c) for t in ctx.domain.tables for c in t.columns if c.pct]
    pick = ctx.choice(cands)
    if pick is None:
        return None
    t, c = pick
    k = ctx.choice([10, 20, 25, 30, 40, 50, 60, 75, 80, 90])
    bound = f"{k / 100}" if c.pct == "frac" else f"{k}"
    ctx.col_hint(c)
    word, op = ctx.choice([("above", ">"), ("below", "<"), ("at least", ">=")])
    q = ctx.say(
        ["How many {n} have a {p} {w} {k}%?", "Count the {n} whose {p} is {w} {k} percent."],
        n=t.nouns,
        p=c.phrase,
        w=word,
        k=k,
    )
    return q, ctx.take_evidence(), f"SELECT COUNT(*) FROM {t.name} WHERE {c.name} {op} {bound}"


@intent("moderate")
def year_with_most(ctx: Ctx):
    t = ctx.choice(ctx.tables_with("date"))
    d = ctx.pick_col(t, "date") if t else None
    if d is None:
        return None
    expr = ctx.year(d)
    if not ctx.top_is_unique(
        f"SELECT COUNT(*) FROM {t.name} WHERE {d.name} IS NOT NULL GROUP BY {expr} ORDER BY COUNT(*) DESC"
    ):
        ctx.take_evidence()
        return None
    q = ctx.say(
        [
            "In which year were the most {n} recorded by {p}?",
            "Which year has the largest number of {n}, judged by {p}?",
        ],
        n=t.nouns,
        p=d.phrase,
    )
    sql = f"SELECT {expr} FROM {t.name} WHERE {d.name} IS NOT NULL GROUP BY {expr} ORDER BY COUNT(*) DESC LIMIT 1"
    return q, ctx.take_evidence(), sql


# ------------------------------------------------------------------------ challenging


@intent("challenging")
def pct_of_cat(ctx: Ctx):
    t = ctx.choice(ctx.tables_with("cat"))
    c = ctx.pick_col(t, "cat") if t else None
    if c is None:
        return None
    cond, m = ctx.cat_cond(t, c, ctx.choice(ctx.cat_values(t, c)))
    ctx.hint(f"percentage = DIVIDE(COUNT({c.name} = {m}), COUNT(*)) * 100", 0.6)
    q = ctx.say(
        [
            "What percentage of {n} have {p} {v}?",
            "Among all {n}, what is the percentage whose {p} is {v}?",
            "Calculate the share, in percent, of {n} with a {p} of {v}.",
        ],
        n=t.nouns,
        p=c.phrase,
        v=m,
    )
    sql = f"SELECT CAST(SUM(CASE WHEN {cond} THEN 1 ELSE 0 END) AS REAL) * 100 / COUNT(*) FROM {t.name}"
    return q, ctx.take_evidence(), sql


@intent("challenging")
def having_parent(ctx: Ctx):
    fk = _fk_with(ctx)
    if fk is None:
        return None
    child, fkc, parent, pk = fk
    on = ctx.join("T1", fkc, "T2", pk)
    counts = [
        r[0]
        for r in ctx.rows(
            f"SELECT COUNT(*) FROM {child.name} AS T1 INNER JOIN {parent.name} AS T2 ON {on} "
            f"GROUP BY T2.{pk.name} ORDER BY 1 DESC LIMIT 15"
        )
    ]
    if len(counts) < 3:
        ctx.take_evidence()
        return None
    k = counts[ctx.rng.randrange(1, len(counts))]
    if k == counts[0]:
        ctx.take_evidence()
        return None
    if role(fkc) == parent.noun:
        templates = ["List the {nps} of {pn} with more than {k} {cn}.", "Which {pn} have over {k} {cn}?"]
    else:
        templates = [
            "List the {nps} of {pn} that are the {r} of more than {k} {cn}.",
            "Which {pn} appear as {r} on over {k} {cn}?",
        ]
    q = ctx.say(templates, nps=plural(parent.name_column.phrase), pn=parent.nouns, k=k, cn=child.nouns, r=role(fkc))
    sql = (
        f"SELECT T2.{parent.name_column.name} FROM {child.name} AS T1 INNER JOIN {parent.name} AS T2 ON {on} "
        f"GROUP BY T2.{pk.name} HAVING COUNT(*) > {k}"
    )
    return q, ctx.take_evidence(), sql


@intent("challenging")
def above_avg(ctx: Ctx):
    t = ctx.choice(ctx.tables_with("name", "num", "cat"))
    if t is None:
        return None
    c, cat = ctx.pick_col(t, "num"), ctx.pick_col(t, "cat")
    if c is None or cat is None:
        return None
    cond, m = ctx.cat_cond(t, cat, ctx.choice(ctx.cat_values(t, cat)))
    expr = ctx.num(c)
    ctx.col_hint(c)
    q = ctx.say(
        [
            "Among the {n} with {cp} {v}, which have a {p} above the average {p} of all {n}?",
            "List the {nps} of {n} whose {cp} is {v} and whose {p} is higher than the overall average.",
        ],
        n=t.nouns,
        cp=cat.phrase,
        v=m,
        p=c.phrase,
        nps=plural(t.name_column.phrase),
    )
    sql = f"SELECT {t.name_column.name} FROM {t.name} WHERE {cond} AND {expr} > (SELECT AVG({expr}) FROM {t.name})"
    return q, ctx.take_evidence(), sql


@intent("challenging")
def ratio_cats(ctx: Ctx):
    t = ctx.choice(ctx.tables_with("cat"))
    c = ctx.pick_col(t, "cat") if t else None
    if c is None:
        return None
    values = ctx.cat_values(t, c)
    if len(values) < 2:
        return None
    a, b = ctx.rng.sample(values, 2)
    ca, ma = ctx.cat_cond(t, c, a)
    cb, mb = ctx.cat_cond(t, c, b)
    ctx.hint(f"ratio = DIVIDE(COUNT({c.name} = {ma}), COUNT({c.name} = {mb}))", 0.6)
    q = ctx.say(
        [
            "What is the ratio of {n} with {p} {a} to those with {p} {b}?",
            "How many times more {n} have {p} {a} than {p} {b}?",
        ],
        n=t.nouns,
        p=c.phrase,
        a=ma,
        b=mb,
    )
    sql = (
        f"SELECT CAST(SUM(CASE WHEN {ca} THEN 1 ELSE 0 END) AS REAL) / SUM(CASE WHEN {cb} THEN 1 ELSE 0 END) "
        f"FROM {t.name}"
    )
    return q, ctx.take_evidence(), sql


@intent("challenging")
def parent_top_avg(ctx: Ctx):
    fk = _fk_with(ctx, ("num",))
    if fk is None:
        return None
    child, fkc, parent, pk = fk
    c = ctx.pick_col(child, "num")
    if c is None:
        return None
    expr = ctx.num(c, "T1")
    on = ctx.join("T1", fkc, "T2", pk)
    if not ctx.top_is_unique(
        f"SELECT AVG({expr}) FROM {child.name} AS T1 INNER JOIN {parent.name} AS T2 ON {on} "
        f"GROUP BY T2.{pk.name} ORDER BY AVG({expr}) DESC"
    ):
        ctx.take_evidence()
        return None
    ctx.col_hint(c)
    q = ctx.say(
        [
            "Which {r} has the highest average {p} among its {cn}?",
            "Name the {r} whose {cn} have the greatest average {p}.",
        ],
        r=role(fkc),
        p=c.phrase,
        cn=child.nouns,
    )
    sql = (
        f"SELECT T2.{parent.name_column.name} FROM {child.name} AS T1 INNER JOIN {parent.name} AS T2 ON {on} "
        f"GROUP BY T2.{pk.name} ORDER BY AVG({expr}) DESC LIMIT 1"
    )
    return q, ctx.take_evidence(), sql


@intent("challenging")
def case_buckets(ctx: Ctx):
    t = ctx.choice(ctx.tables_with("num"))
    c = ctx.pick_col(t, "num") if t else None
    if c is None:
        return None
    k = ctx.round_threshold(t, c)
    if k is None:
        return None
    expr = ctx.num(c)
    ctx.col_hint(c)
    q = ctx.say(
        [
            "How many {n} have a {p} above {k}, and how many have {k} or less?",
            "Split the {n} by {p}: count those over {k} and those at or under {k}.",
        ],
        n=t.nouns,
        p=c.phrase,
        k=k,
    )
    sql = (
        f"SELECT SUM(CASE WHEN {expr} > {k} THEN 1 ELSE 0 END), SUM(CASE WHEN {expr} <= {k} THEN 1 ELSE 0 END) "
        f"FROM {t.name}"
    )
    return q, ctx.take_evidence(), sql


GENERIC_INTENTS: tuple[Intent, ...] = (
    count_all,
    count_cat,
    list_names_cat,
    max_min_num,
    avg_num,
    top_name_by_num,
    lookup_attr,
    count_num_gt,
    distinct_cat,
    count_year,
    count_null,
    list_names_num_gt,
    join_count_parent,
    join_child_names,
    group_top_cat,
    join_avg_for_parent,
    parent_of_top_child,
    count_year_cat,
    sum_num_cat,
    count_parents_with_child_cat,
    pct_threshold,
    year_with_most,
    pct_of_cat,
    having_parent,
    above_avg,
    ratio_cats,
    parent_top_avg,
    case_buckets,
)


# ------------------------------------------------------------------------- generation

MIX = (("simple", 0.56), ("moderate", 0.29), ("challenging", 0.15))
"""BIRD dev's proportions (860 / 443 / 231 of 1,534), rounded."""


class GenerationError(RuntimeError):
    """The generator could not produce the questions it promised (a bug in minibird)."""


def quotas(n: int) -> list[tuple[str, int]]:
    counts = [(d, int(round(n * share))) for d, share in MIX[1:]]
    return [("simple", n - sum(c for _, c in counts)), *counts]


def result_ok(conn: sqlite3.Connection, sql: str) -> bool:
    """True when the SQL returns 1..MAX_RESULT_ROWS rows with at least one non-NULL cell.

    An SQL error is a generator bug, not a bad draw, so it raises.
    """
    try:
        rows = conn.execute(sql).fetchmany(MAX_RESULT_ROWS + 1)
    except sqlite3.Error as err:
        raise GenerationError(f"generated gold SQL fails: {sql!r}: {err}") from err
    return 0 < len(rows) <= MAX_RESULT_ROWS and any(v is not None for row in rows for v in row)


def generate(domain: Domain, conn: sqlite3.Connection, n: int, rng: random.Random) -> list[Draft]:
    """``n`` checked, unique questions in BIRD's difficulty mix, in a seeded shuffled order."""
    ctx = Ctx(domain, conn, rng)
    intents = (*GENERIC_INTENTS, *domain.intents)
    out: list[Draft] = []
    seen_q: set[str] = set()
    seen_sql: set[str] = set()
    for difficulty, quota in quotas(n):
        pool = [i for i in intents if i.difficulty == difficulty]
        cap = max(2, -(-quota * 5 // (2 * len(pool))))  # no intent takes more than ~2.5x its fair share
        taken = {i.name: 0 for i in pool}
        got = attempts = 0
        while got < quota:
            attempts += 1
            if attempts > 200 * quota + 500:
                raise GenerationError(
                    f"{domain.db_id}: only {got} of {quota} {difficulty} questions after {attempts} attempts; "
                    f"intents: {taken}"
                )
            chosen = pool[rng.randrange(len(pool))]
            if taken[chosen.name] >= cap:
                continue
            ctx.take_evidence()
            draft = chosen.make(ctx)
            if draft is None or draft.question in seen_q or draft.sql in seen_sql:
                continue
            if not result_ok(conn, draft.sql):
                continue
            seen_q.add(draft.question)
            seen_sql.add(draft.sql)
            taken[chosen.name] += 1
            out.append(draft)
            got += 1
    rng.shuffle(out)
    return out
