"""Schema serialisers for prompts: M-Schema (designs/retoolsql/README.md), plain DDL and a compact list.

Each takes a ``DatabaseProfile`` and an optional restriction: ``tables`` (names) and/or
``columns`` (``"table.column"``), case-insensitive. A table named in ``tables`` and in no
``columns`` entry keeps all its columns; a table named only through ``columns`` keeps
just those columns. Names that do not exist are ignored (the restriction often comes from
model output, which must never raise). Foreign keys are listed when both ends are shown.

DDL and the compact list print names as SQL needs them (``tools.spelling.needs_quotes``:
keywords such as BIRD's ``order`` table and odd names in double quotes, plain names bare),
so a name can be pasted into a query; M-Schema prints names verbatim, as its notation has it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tools.schema.profile import ColumnProfile, DatabaseProfile, ForeignKey, TableProfile
from tools.spelling import quote_identifier

MAX_VALUE_CHARS = 40
CATEGORICAL_MAX_DISTINCT = 20

Selection = list[tuple[TableProfile, list[ColumnProfile]]]


def select(
    profile: DatabaseProfile, tables: Iterable[str] | None = None, columns: Iterable[str] | None = None
) -> Selection:
    """The tables and columns to show, in declaration order."""
    if tables is None and columns is None:
        return [(t, list(t.columns)) for t in profile.tables]
    wanted_tables = {t.lower() for t in tables or ()}
    wanted_columns: dict[str, set[str]] = {}
    for name in columns or ():
        table_name, _, column = str(name).partition(".")
        if column:
            wanted_columns.setdefault(table_name.strip().lower(), set()).add(column.strip().lower())
    out: Selection = []
    for table in profile.tables:
        key = table.name.lower()
        if key in wanted_columns:
            picked = [c for c in table.columns if c.name.lower() in wanted_columns[key]]
            if picked:
                out.append((table, picked))
            elif key in wanted_tables:
                out.append((table, list(table.columns)))
        elif key in wanted_tables:
            out.append((table, list(table.columns)))
    return out


def _shown_foreign_keys(profile: DatabaseProfile, selection: Selection, inferred: bool = True) -> list[ForeignKey]:
    shown = {(t.name.lower(), c.name.lower()) for t, cols in selection for c in cols}
    return [
        fk
        for fk in profile.foreign_keys
        if (inferred or not fk.inferred)
        and (fk.table.lower(), fk.column.lower()) in shown
        and (fk.ref_table.lower(), fk.ref_column.lower()) in shown
    ]


# --------------------------------------------------------------------------- M-Schema


def m_schema(
    profile: DatabaseProfile, tables: Iterable[str] | None = None, columns: Iterable[str] | None = None
) -> str:
    """M-Schema: a ``[DB_ID]`` header, a ``[Schema]`` block with one ``# Table:`` section
    per table (comment, row and column counts) and one bracketed line per column (type,
    meaning, key/nullability flags, Nulls / Non-null / Distinct, Min / Avg / Max, top
    values for categorical columns, examples), then a ``[Foreign keys]`` block. Names are
    verbatim (``# Table: order``), as the notation has them."""
    selection = select(profile, tables, columns)
    lines = [f"[DB_ID] {profile.db_id}", "[Schema]"]
    for table, cols in selection:
        comment = f", {table.description}" if table.description else ""
        lines.append(f"# Table: {table.name}{comment} ({table.row_count} rows, {len(table.columns)} columns)")
        lines.append("[")
        lines.extend(f"({_m_column(c)})," for c in cols)
        lines.append("]")
    fks = _shown_foreign_keys(profile, selection)
    if fks:
        lines.append("[Foreign keys]")
        lines.extend(f"{fk}{' (inferred)' if fk.inferred else ''}" for fk in fks)
    return "\n".join(lines)


def _m_column(col: ColumnProfile) -> str:
    parts = [f"{col.name}:{col.declared_type or 'ANY'}"]
    meaning = _meaning(col)
    if meaning:
        parts.append(f"Meaning: {meaning}")
    if col.primary_key:
        parts.append("Primary Key")
    if col.not_null:
        parts.append("Not Null")
    if col.numeric_text:
        parts.append("Numbers stored as text")
    parts.append(f"Nulls: {col.nulls}, Non-null: {col.non_null}, Distinct: {col.distinct}")
    if col.non_null:
        stats = [f"Min: {_v(col.min)}"]
        if col.avg is not None:
            stats.append(f"Avg: {_number(col.avg)}")
        stats.append(f"Max: {_v(col.max)}")
        parts.append(", ".join(stats))
    if col.top_values and col.distinct <= CATEGORICAL_MAX_DISTINCT and col.distinct < col.non_null:
        parts.append("Top values: [" + ", ".join(f"{_v(v)} ({n})" for v, n in col.top_values) + "]")
    if col.examples:
        parts.append("Examples: [" + ", ".join(_v(v) for v in col.examples) + "]")
    return ", ".join(parts)


def _meaning(col: ColumnProfile) -> str:
    pieces = []
    if col.full_name and col.full_name.lower() != col.name.lower():
        pieces.append(col.full_name)
    if col.description and col.description.lower() not in {p.lower() for p in pieces} | {col.name.lower()}:
        pieces.append(col.description)
    if col.value_description:
        pieces.append(f"values: {col.value_description}")
    if col.data_format and col.data_format.lower() not in (col.declared_type or "").lower():
        pieces.append(f"format: {col.data_format}")
    return "; ".join(pieces)


def _v(value: Any) -> str:
    if isinstance(value, float):
        return _number(value)
    text = str(value)
    return text if len(text) <= MAX_VALUE_CHARS else text[: MAX_VALUE_CHARS - 1] + "…"


def _number(value: float) -> str:
    """Floats keep a decimal point (``1.0``, not ``1``) so REAL columns read as REAL."""
    if not isinstance(value, float):
        return str(value)
    text = f"{value:.6g}"
    return text if any(ch in text for ch in ".en") else text + ".0"


# --------------------------------------------------------------------------- DDL


def _quote(name: str) -> str:  # schema text is read by the model: quote only names that need it
    return quote_identifier(name, only_if_needed=True)


def _quoted_key(fk: ForeignKey) -> str:
    return f"{_quote(fk.table)}.{_quote(fk.column)}={_quote(fk.ref_table)}.{_quote(fk.ref_column)}"


def ddl_schema(
    profile: DatabaseProfile,
    tables: Iterable[str] | None = None,
    columns: Iterable[str] | None = None,
    comments: bool = False,
) -> str:
    """``CREATE TABLE`` statements rebuilt from the profile (declared keys only);
    ``comments=True`` adds each column's description as a ``--`` comment."""
    selection = select(profile, tables, columns)
    fks = _shown_foreign_keys(profile, selection, inferred=False)
    return "\n\n".join(_ddl_table(t, cols, [fk for fk in fks if fk.table == t.name], comments) for t, cols in selection)


def _ddl_table(table: TableProfile, cols: list[ColumnProfile], fks: list[ForeignKey], comments: bool) -> str:
    single_pk = len(table.primary_key) == 1
    shown = {c.name for c in cols}
    body = []
    for col in cols:
        line = f"  {_quote(col.name)}"
        if col.declared_type:
            line += f" {col.declared_type}"
        if single_pk and col.primary_key:
            line += " PRIMARY KEY"
        if col.not_null:
            line += " NOT NULL"
        body.append((line, _meaning(col) if comments else ""))
    if len(table.primary_key) > 1 and set(table.primary_key) <= shown:
        body.append((f"  PRIMARY KEY ({', '.join(_quote(c) for c in table.primary_key)})", ""))
    for fk in fks:
        body.append(
            (f"  FOREIGN KEY ({_quote(fk.column)}) REFERENCES {_quote(fk.ref_table)}({_quote(fk.ref_column)})", "")
        )
    rendered = []
    for i, (line, note) in enumerate(body):
        comma = "," if i < len(body) - 1 else ""
        rendered.append(f"{line}{comma}" + (f" -- {note}" if note else ""))
    return f"CREATE TABLE {_quote(table.name)} (\n" + "\n".join(rendered) + "\n);"


# --------------------------------------------------------------------------- compact


def compact_schema(
    profile: DatabaseProfile, tables: Iterable[str] | None = None, columns: Iterable[str] | None = None
) -> str:
    """One line per table, ``table(col1, col2, …)``, then one line of foreign keys."""
    selection = select(profile, tables, columns)
    lines = [f"{_quote(t.name)}({', '.join(_quote(c.name) for c in cols)})" for t, cols in selection]
    fks = _shown_foreign_keys(profile, selection)
    if fks:
        lines.append(
            "Foreign keys: " + ", ".join(f"{_quoted_key(fk)}{' (inferred)' if fk.inferred else ''}" for fk in fks)
        )
    return "\n".join(lines)
