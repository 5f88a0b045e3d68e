"""The declarative description of one minibird database: tables, columns and their noise.

A domain module describes its schema with these types and supplies a row generator;
the writer (``minibird.writer``) turns that into SQLite, description CSVs and
``tables.json``, and the question generator (``minibird.questions``) reads the same
description to phrase questions and to write noise-aware gold SQL (``CAST`` for numbers
stored as text, the stored spellings of a noisy category, the right date expression).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

Row = tuple[object, ...]
RowMaker = Callable[[random.Random], Mapping[str, Sequence[Row]]]

DATE_FORMATS = {
    "iso": "YYYY-MM-DD",
    "iso_dt": "YYYY-MM-DD HH:MM:SS",
    "dmy": "DD/MM/YYYY",
    "mdy": "MM/DD/YYYY",
    "long": "Month DD, YYYY",
}


@dataclass(frozen=True)
class Column:
    """One column. ``kind`` says how questions may use it:

    ``id`` (primary key), ``fk`` (foreign key), ``name`` (the entity's display name),
    ``cat`` (categorical), ``num`` (numeric measure), ``date``, ``text`` (free text).
    """

    name: str
    sqltype: str
    kind: str
    phrase: str
    description: str
    value_description: str = ""
    pk: bool = False
    fk: tuple[str, str] | None = None
    textnum: bool = False  # a number stored as TEXT: gold SQL must CAST it
    date_format: str = ""  # a key of DATE_FORMATS
    pct: str = ""  # "frac" (0-1) or "100" (0-100)
    variants: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # canonical -> stored spellings
    nullable: bool = False
    abbreviated: bool = False  # the name is an abbreviation explained only in the CSV

    @property
    def noisy(self) -> bool:
        return bool(self.variants)

    @property
    def data_format(self) -> str:
        if self.date_format:
            return "date"
        return {"INTEGER": "integer", "REAL": "real"}.get(self.sqltype, "text")


@dataclass(frozen=True)
class Table:
    """One table with its natural-language nouns (``noun`` singular, ``nouns`` plural)."""

    name: str
    noun: str
    nouns: str
    columns: tuple[Column, ...]
    csv_encoding: str = "utf-8"  # one table is written in cp1252 to exercise tolerant readers

    def column(self, name: str) -> Column:
        for col in self.columns:
            if col.name == name:
                return col
        raise KeyError(f"table {self.name!r} has no column {name!r}")

    def of_kind(self, *kinds: str) -> list[Column]:
        return [c for c in self.columns if c.kind in kinds]

    @property
    def name_column(self) -> Column | None:
        names = self.of_kind("name")
        return names[0] if names else None

    @property
    def primary_key(self) -> list[Column]:
        return [c for c in self.columns if c.pk]


class DomainIntent(Protocol):
    """A question template a domain adds to the generic ones (``questions.Intent`` is one):
    ``make(ctx)`` drafts a question or gives None."""

    @property
    def name(self) -> str: ...

    @property
    def difficulty(self) -> str: ...

    @property
    def make(self) -> Callable[[Any], Any]: ...


@dataclass(frozen=True)
class Domain:
    """One database: its id, split, tables, row generator and domain-specific intents."""

    db_id: str
    split: str
    topic: str
    tables: tuple[Table, ...]
    make_rows: RowMaker
    intents: tuple[DomainIntent, ...] = ()

    def table(self, name: str) -> Table:
        for t in self.tables:
            if t.name == name:
                return t
        raise KeyError(f"database {self.db_id!r} has no table {name!r}")

    def foreign_keys(self) -> list[tuple[Table, Column, Table, Column]]:
        """(child table, fk column, parent table, parent key column) in declaration order."""
        out = []
        for child in self.tables:
            for col in child.columns:
                if col.fk is not None:
                    parent = self.table(col.fk[0])
                    out.append((child, col, parent, parent.column(col.fk[1])))
        return out


def col(name: str, sqltype: str, kind: str, phrase: str, description: str = "", **kw: object) -> Column:
    """Shorthand used by the domain modules; the description defaults to the phrase."""
    return Column(name, sqltype, kind, phrase, description or phrase, **kw)  # type: ignore[arg-type]
