"""Schema linking: a linked schema against the gold schema, as sets of names.

A linked schema is what a design's schema-linking step selected (DualSQL's linker, TRUST-SQL's
proposed schema, ReToolSQL's ``<relevant_tables>`` / ``<relevant_columns>``); the gold schema
is what the gold SQL reads (``rex.sql.referenced_schema``: aliases, CTEs and derived tables
resolved to base tables, ``*`` expanded over the database schema). Both become sets of
lower-cased, unquoted table names and ``table.column`` names, so ``"Schools"``, ```schools```
and ``[schools]`` are one table. The rewards of TRUST-SQL and DualSQL
(``training.algorithm.rewards``) and the evaluation's linking metrics (``eval.scoring``,
docs/evaluation.md "Schema linking") read names through the same functions here.

Per question and level (tables, columns): precision, recall and F1 of the linked set against
the gold set, and whether the linked set holds every gold element (C-Recall averages that
over questions: DualSQL §5.2.1, Table 2).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from rex.sql import referenced_schema

SchemaMap = Mapping[str, Sequence[str]]
LEVELS = ("tables", "columns")
"""The two levels every linking figure is given at."""


def clean_name(name: str) -> str:
    """A table or column name as the sets hold it: trimmed, lower-cased, unquoted.

    >>> clean_name(' `Free Meal Count` '), clean_name('[Schools]'), clean_name('"t"')
    ('free meal count', 'schools', 't')
    """
    return name.strip().lower().strip("`\"[]' ")


def _lower(schema: SchemaMap | None) -> dict[str, list[str]]:
    return {t.lower(): [c.lower() for c in cols] for t, cols in (schema or {}).items()}


def linked_sets(
    tables: Iterable[object], columns: Iterable[object], schema: SchemaMap | None = None
) -> tuple[frozenset[str], frozenset[str]]:
    """Linked tables and ``table.column``s, normalised (``clean_name``) against ``schema``.

    ``t.*`` stands for every column of ``t`` and a bare ``*`` for every column of the selected
    tables; an unqualified column goes to the one selected table that has it (dropped when
    none or several do); tables named only through their columns count as selected. Names the
    database does not have are kept: they are linking errors and cost precision. Entries that
    are not strings are ignored.

    >>> schema = {"schools": ["id", "city", "zip"]}
    >>> tables, columns = linked_sets(["Schools"], ["`schools`.`City`", "zip", "s.*"], schema)
    >>> sorted(tables), sorted(columns)
    (['s', 'schools'], ['schools.city', 'schools.zip'])
    """
    lowered = _lower(schema)
    linked_tables = {clean_name(t) for t in tables if isinstance(t, str) and clean_name(t)}
    linked_columns: set[str] = set()
    for raw in columns:
        if not isinstance(raw, str):
            continue
        table, sep, column = _split(raw)
        table, column = clean_name(table), clean_name(column)
        if not sep:
            linked_columns.update(_unqualified(table, linked_tables, lowered))
        elif column == "*":
            linked_columns.update(f"{table}.{c}" for c in lowered.get(table, ()))
            linked_tables.add(table)
        elif table and column:
            linked_columns.add(f"{table}.{column}")
    linked_tables.update(c.split(".", 1)[0] for c in linked_columns)
    return frozenset(t for t in linked_tables if t), frozenset(linked_columns)


def _split(raw: str) -> tuple[str, str, str]:
    """``table.column`` split on the first dot outside quotes (``"a.b".c`` keeps ``a.b``)."""
    raw = raw.strip()
    closers = {"`": "`", '"': '"', "[": "]"}
    if raw[:1] in closers:
        end = raw.find(closers[raw[0]], 1)
        if end > 0 and raw[end + 1 : end + 2] == ".":
            return raw[: end + 1], ".", raw[end + 2 :]
    return raw.partition(".")


def _unqualified(column: str, tables: set[str], schema: SchemaMap) -> set[str]:
    if column == "*":
        return {f"{t}.{c}" for t in tables for c in schema.get(t, ())}
    owners = [t for t in tables if column in schema.get(t, ())]
    return {f"{owners[0]}.{column}"} if len(owners) == 1 else set()


def gold_sets(
    gold_tables: Sequence[str], gold_columns: Sequence[str], gold_sql: str, schema: SchemaMap | None = None
) -> tuple[frozenset[str], frozenset[str]]:
    """Gold tables and ``table.column``s: the given ones (a loader's ``Example.gold_tables`` /
    ``gold_columns``, the tables of the columns added), or, when both are empty, those the
    gold SQL reads (``rex.sql.referenced_schema`` on ``schema``).

    >>> [sorted(s) for s in gold_sets((), (), "SELECT T1.Name FROM Schools AS T1", {"schools": ["name"]})]
    [['schools'], ['schools.name']]
    """
    if gold_tables or gold_columns:
        columns = frozenset(clean_name(c) for c in gold_columns)
        return frozenset(clean_name(t) for t in gold_tables) | {c.split(".", 1)[0] for c in columns}, columns
    ref = referenced_schema(gold_sql, schema)
    return frozenset(ref.tables), frozenset(ref.columns)


def precision_recall_f1(gold: frozenset[str], pred: frozenset[str]) -> tuple[float, float, float]:
    """Set precision, recall and F1; an empty set on both sides is perfect, one empty
    side scores 0 (the rewards' convention).

    >>> precision_recall_f1(frozenset({"a", "b"}), frozenset({"a", "c", "d", "e"}))
    (0.25, 0.5, 0.3333333333333333)
    """
    if not gold and not pred:
        return 1.0, 1.0, 1.0
    common = len(gold & pred)
    precision = common / len(pred) if pred else 0.0
    recall = common / len(gold) if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


@dataclass(frozen=True)
class LinkScore:
    """One question's linking at one level. ``complete``: every gold element is linked
    (what C-Recall counts)."""

    precision: float
    recall: float
    f1: float
    complete: bool

    def to_json(self) -> dict[str, float | int]:
        return {"precision": self.precision, "recall": self.recall, "f1": self.f1, "complete": int(self.complete)}


def link_score(gold: frozenset[str], linked: frozenset[str]) -> LinkScore | None:
    """The linked set scored against the gold set; None when the gold set is empty (a gold
    SQL that names no column, ``SELECT COUNT(*) FROM t``, has nothing to link at that level,
    so the question is left out of that level's averages rather than scored 0 or 1).
    An empty linked set scores 0.

    >>> link_score(frozenset({"t.a", "t.b"}), frozenset({"t.a", "t.b", "t.c"}))
    LinkScore(precision=0.6666666666666666, recall=1.0, f1=0.8, complete=True)
    """
    if not gold:
        return None
    precision, recall, f1 = precision_recall_f1(gold, linked)
    return LinkScore(precision, recall, f1, gold <= linked)
