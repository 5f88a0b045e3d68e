"""Database profiles: tables, columns, keys, inferred foreign keys, per-column statistics
and BIRD column descriptions (DualSQL's profiler, ReToolSQL's M-Schema statistics).

A profile is computed once per database content (and description files) and cached on
disk as JSON under ``cache_root()/profiles``, with its manifest (``tools.cache``: a damaged
file is rebuilt with a warning); values inside are JSON-safe (blobs become a short
description), so a cached profile equals a fresh one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from tools.cache import cache_root, load_checked, writing_cache_file
from tools.db.results import json_cell
from tools.schema.descriptions import descriptions_hash, read_descriptions
from tools.schema.profile_sql import (
    STATS_PER_COLUMN,
    declared_foreign_keys,
    dialect_of,
    examples_sql,
    stats_sql,
    table_info_sql,
)
from tools.spelling import quote_identifier


class Database(Protocol):
    """What profiling reads of a database (any ``tools.db.backend.Backend``): its id,
    content hash and file, and read-only internal queries; a ``dialect`` attribute, where
    present, picks the statistics' SQL (``tools.schema.profile_sql``)."""

    @property
    def db_id(self) -> str: ...

    @property
    def content_hash(self) -> str: ...

    @property
    def path(self) -> Path: ...

    def query_internal(self, sql: str, params: Iterable[Any] = ()) -> list[tuple[Any, ...]]: ...

    def schema(self) -> dict[str, list[str]]: ...


PROFILE_VERSION = 2
TOP_K = 5
EXAMPLES = 3
MIN_FK_OVERLAP = 0.9
PROFILE_VALUE_CHARS = 120  # long texts (post bodies, abstracts) are cut in the profile


@dataclass(frozen=True)
class ForeignKey:
    """``table.column`` refers to ``ref_table.ref_column``. ``inferred`` keys were not
    declared: they come from names, compatible types and ``overlap`` (the share of the
    column's distinct values found in the referenced column)."""

    table: str
    column: str
    ref_table: str
    ref_column: str
    inferred: bool = False
    overlap: float | None = None

    def __str__(self) -> str:
        return f"{self.table}.{self.column}={self.ref_table}.{self.ref_column}"


@dataclass(frozen=True)
class ColumnProfile:
    """One column: declaration, BIRD description and statistics over all rows.

    ``numeric_text`` marks text-stored numbers (then ``min``/``avg``/``max`` are numeric,
    not lexicographic). ``storage`` counts values per SQLite storage class.
    """

    name: str
    declared_type: str
    primary_key: bool = False
    not_null: bool = False
    description: str = ""
    full_name: str = ""
    data_format: str = ""
    value_description: str = ""
    nulls: int = 0
    non_null: int = 0
    distinct: int = 0
    min: Any = None
    max: Any = None
    avg: float | None = None
    numeric_text: bool = False
    storage: Mapping[str, int] = field(default_factory=dict)
    top_values: tuple[tuple[Any, int], ...] = ()
    examples: tuple[Any, ...] = ()


@dataclass(frozen=True)
class TableProfile:
    name: str
    row_count: int
    columns: tuple[ColumnProfile, ...]
    primary_key: tuple[str, ...] = ()
    description: str = ""

    def column(self, name: str) -> ColumnProfile | None:
        lowered = name.lower()
        return next((c for c in self.columns if c.name.lower() == lowered), None)


@dataclass(frozen=True)
class DatabaseProfile:
    """Everything the schema serialisers and the ``get_profile`` tool need."""

    db_id: str
    content_hash: str
    tables: tuple[TableProfile, ...]
    foreign_keys: tuple[ForeignKey, ...] = ()

    def table(self, name: str) -> TableProfile | None:
        lowered = name.lower()
        return next((t for t in self.tables if t.name.lower() == lowered), None)

    def column(self, table: str, column: str) -> ColumnProfile | None:
        found = self.table(table)
        return found.column(column) if found else None

    @property
    def declared_foreign_keys(self) -> tuple[ForeignKey, ...]:
        return tuple(fk for fk in self.foreign_keys if not fk.inferred)

    @property
    def inferred_foreign_keys(self) -> tuple[ForeignKey, ...]:
        return tuple(fk for fk in self.foreign_keys if fk.inferred)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DatabaseProfile:
        tables = tuple(
            TableProfile(
                name=t["name"],
                row_count=t["row_count"],
                primary_key=tuple(t["primary_key"]),
                description=t.get("description", ""),
                columns=tuple(_column_from_json(c) for c in t["columns"]),
            )
            for t in data["tables"]
        )
        fks = tuple(ForeignKey(**fk) for fk in data["foreign_keys"])
        return cls(db_id=data["db_id"], content_hash=data["content_hash"], tables=tables, foreign_keys=fks)


def _column_from_json(data: Mapping[str, Any]) -> ColumnProfile:
    values = dict(data)
    values["top_values"] = tuple((v, n) for v, n in values.get("top_values", ()))
    values["examples"] = tuple(values.get("examples", ()))
    return ColumnProfile(**values)


# --------------------------------------------------------------------------- caching


def load_or_build_profile(db: Database) -> DatabaseProfile:
    """The cached profile of ``db`` (built and saved when missing, stale or damaged)."""
    path = profile_cache_path(db)
    cached = load_checked(path, _read_profile)  # a damaged file: warned about, removed, rebuilt below
    if cached is not None:
        return cached
    profile = build_profile(db)
    data = json.dumps(profile.to_json(), ensure_ascii=False).encode("utf-8")
    with writing_cache_file(path, len(data)) as tmp:
        tmp.write_bytes(data)
    return profile


def _read_profile(path: Path) -> DatabaseProfile:
    return DatabaseProfile.from_json(json.loads(path.read_text(encoding="utf-8")))


def profile_cache_path(db: Database) -> Path:
    """Keyed by the database content hash, the description files and the format version."""
    key = hashlib.sha256(f"{PROFILE_VERSION}:{db.content_hash}:{descriptions_hash(db.path)}".encode()).hexdigest()[:32]
    folder = cache_root() / "profiles"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{db.db_id}-{key}.json"


# --------------------------------------------------------------------------- building


def build_profile(db: Database) -> DatabaseProfile:
    """Compute the profile from the database (one statistics scan per table, one
    top-values query per column, one overlap query per foreign-key candidate)."""
    descriptions = read_descriptions(db.path.parent / "database_description")
    tables = tuple(_profile_table(db, name, descriptions.get(name.lower(), {})) for name in db.schema())
    declared = _declared_foreign_keys(db, tables)
    inferred = infer_foreign_keys(db, tables, declared)
    return DatabaseProfile(db.db_id, db.content_hash, tables, tuple(declared) + tuple(inferred))


def _profile_table(db: Database, table: str, described: Mapping[str, Mapping[str, str]]) -> TableProfile:
    info = db.query_internal(table_info_sql(dialect_of(db)), (table,))
    columns_typed = [(row[0], row[1] or "") for row in info]
    stats = db.query_internal(stats_sql(table, columns_typed, dialect_of(db)))[0] if info else (0,)
    row_count = int(stats[0] or 0)
    columns = []
    for i, (name, declared, not_null, pk) in enumerate(info):
        chunk = stats[1 + i * STATS_PER_COLUMN : 1 + (i + 1) * STATS_PER_COLUMN]
        columns.append(
            _profile_column(db, table, name, declared, bool(not_null), bool(pk), row_count, chunk, described)
        )
    pk_cols = tuple(row[0] for row in sorted((r for r in info if r[3]), key=lambda r: r[3]))
    return TableProfile(table, row_count, tuple(columns), pk_cols)


def _profile_column(
    db: Database,
    table: str,
    name: str,
    declared: str,
    not_null: bool,
    pk: bool,
    row_count: int,
    stats: tuple[Any, ...],
    described: Mapping[str, Mapping[str, str]],
) -> ColumnProfile:
    non_null, distinct, lo, hi, numbers, numeric_texts, texts, blobs, avg, num_lo, num_hi = stats
    numbers, numeric_texts, texts, blobs = (int(x or 0) for x in (numbers, numeric_texts, texts, blobs))
    numeric_text = numeric_texts > 0 and numbers + numeric_texts == non_null
    all_numeric = non_null > 0 and numbers + numeric_texts == non_null
    if numeric_text:
        lo, hi = _tidy_number(num_lo), _tidy_number(num_hi)
    desc = described.get(name.strip().lower(), {})
    return ColumnProfile(
        name=name,
        declared_type=declared or "",
        primary_key=pk,
        not_null=not_null,
        description=desc.get("column_description", ""),
        full_name=desc.get("column_name", ""),
        data_format=desc.get("data_format", ""),
        value_description=desc.get("value_description", ""),
        nulls=row_count - int(non_null),
        non_null=int(non_null),
        distinct=int(distinct),
        min=_short(lo),
        max=_short(hi),
        avg=float(avg) if all_numeric and avg is not None else None,
        numeric_text=numeric_text,
        storage={k: v for k, v in (("number", numbers), ("text", texts), ("blob", blobs)) if v},
        top_values=_top_values(db, table, name),
        examples=_examples(db, table, name),
    )


def _short(value: Any) -> Any:
    """A JSON-safe value, long texts cut (a profile must stay small for prompts and cache)."""
    value = json_cell(value)
    if isinstance(value, str) and len(value) > PROFILE_VALUE_CHARS:
        return value[: PROFILE_VALUE_CHARS - 1] + "…"
    return value


def _tidy_number(value: Any) -> Any:
    """3.0 -> 3 so text-stored integers print as integers."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    return value


def _top_values(db: Database, table: str, column: str) -> tuple[tuple[Any, int], ...]:
    c = quote_identifier(column)
    rows = db.query_internal(
        f"SELECT {c}, COUNT(*) AS n FROM {quote_identifier(table)} WHERE {c} IS NOT NULL "
        f"GROUP BY {c} ORDER BY n DESC, {c} LIMIT {TOP_K}"
    )
    return tuple((_short(v), int(n)) for v, n in rows)


def _examples(db: Database, table: str, column: str) -> tuple[Any, ...]:
    rows = db.query_internal(examples_sql(table, column, EXAMPLES, dialect_of(db)))
    return tuple(_short(v) for (v,) in rows)


# --------------------------------------------------------------------------- keys


def _declared_foreign_keys(db: Database, tables: Iterable[TableProfile]) -> list[ForeignKey]:
    by_lower = {t.name.lower(): t for t in tables}
    out: list[ForeignKey] = []
    for table in tables:
        for ref_table, column, ref_column in declared_foreign_keys(db, table.name, dialect_of(db)):
            target = by_lower.get(str(ref_table).lower())
            if ref_column is None and target is not None and len(target.primary_key) == 1:
                ref_column = target.primary_key[0]  # REFERENCES t  means t's primary key
            ref_name = target.name if target else ref_table
            out.append(ForeignKey(table.name, column, ref_name, ref_column or "", inferred=False))
    return out


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _singular(word: str) -> str:
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith("s") and not word.endswith("ss") and len(word) > 3:
        return word[:-1]
    return word


def _affinity(declared: str) -> str:
    """SQLite's type affinity rules, reduced to what join compatibility needs."""
    t = declared.upper()
    if "INT" in t:
        return "number"
    if any(k in t for k in ("CHAR", "CLOB", "TEXT")):
        return "text"
    if any(k in t for k in ("REAL", "FLOA", "DOUB", "NUM", "DEC")):
        return "number"
    return "any"


def _names_match(column: str, ref_table: str, ref_column: str) -> bool:
    """``school_id`` ~ ``schools.school_id``; ``schools_id``/``school_id`` ~ ``schools.id``;
    ``school`` ~ ``schools.id`` is not enough (too loose); a bare ``id`` never matches."""
    col, ref_col = _norm(column), _norm(ref_column)
    table, single = _norm(ref_table), _norm(_singular(ref_table.lower()))
    if col in ("id", ""):
        return False
    if col == ref_col and ref_col not in ("id", "name", "code"):
        return True
    return col in {table + ref_col, single + ref_col, table + "id", single + "id"} and ref_col in (
        "id",
        "code",
        "no",
        "number",
        "key",
    )


def _types_compatible(a: str, b: str) -> bool:
    fa, fb = _affinity(a), _affinity(b)
    return fa == fb or "any" in (fa, fb)


def infer_foreign_keys(
    db: Database, tables: tuple[TableProfile, ...], declared: Iterable[ForeignKey]
) -> list[ForeignKey]:
    """Foreign keys the schema does not declare, found by name, type and value overlap.

    A candidate ``A.x -> B.y`` needs: ``B.y`` is ``B``'s single-column primary key or a
    unique column, the names match (see ``_names_match``), compatible declared types, and
    at least ``MIN_FK_OVERLAP`` of ``A.x``'s distinct values present in ``B.y``.
    """
    declared = list(declared)
    taken = {(fk.table.lower(), fk.column.lower()) for fk in declared}
    links = {_link(fk) for fk in declared}
    targets = [(t, c) for t in tables for c in t.columns if _is_key(t, c)]
    found: list[ForeignKey] = []
    for table in tables:
        for col in table.columns:
            if (table.name.lower(), col.name.lower()) in taken or col.non_null == 0:
                continue
            best = _best_target(db, table, col, targets)
            # Two key columns with one name (a.code, b.code) match both ways: keep one.
            if best is not None and _link(best) not in links:
                found.append(best)
                links.add(_link(best))
    return found


def _link(fk: ForeignKey) -> frozenset[tuple[str, str]]:
    return frozenset({(fk.table.lower(), fk.column.lower()), (fk.ref_table.lower(), fk.ref_column.lower())})


def _is_key(table: TableProfile, column: ColumnProfile) -> bool:
    if table.primary_key == (column.name,):
        return True
    return column.non_null > 0 and column.distinct == column.non_null == table.row_count


def _best_target(
    db: Database, table: TableProfile, col: ColumnProfile, targets: list[tuple[TableProfile, ColumnProfile]]
) -> ForeignKey | None:
    best: ForeignKey | None = None
    for ref_table, ref_col in targets:
        if ref_table.name == table.name or not _names_match(col.name, ref_table.name, ref_col.name):
            continue
        if not _types_compatible(col.declared_type, ref_col.declared_type):
            continue
        overlap = _overlap(db, table.name, col.name, ref_table.name, ref_col.name, col.distinct)
        if overlap >= MIN_FK_OVERLAP and (best is None or (best.overlap or 0) < overlap):
            best = ForeignKey(
                table.name, col.name, ref_table.name, ref_col.name, inferred=True, overlap=round(overlap, 4)
            )
    return best


def _overlap(db: Database, table: str, column: str, ref_table: str, ref_column: str, distinct: int) -> float:
    if distinct == 0:
        return 0.0
    (hits,) = db.query_internal(
        f"SELECT COUNT(DISTINCT {quote_identifier(column)}) FROM {quote_identifier(table)} "
        f"WHERE {quote_identifier(column)} IN "
        f"(SELECT {quote_identifier(ref_column)} FROM {quote_identifier(ref_table)})"
    )[0]
    return int(hits or 0) / distinct


# --------------------------------------------------------------------------- BIRD descriptions
