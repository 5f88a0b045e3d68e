"""Writing one minibird database in BIRD layout, byte-identically on every run.

SQLite files are written with a fixed page size, rows inserted in a fixed order, then
VACUUMed (which rewrites every page in order); no timestamps are stored anywhere. JSON is
written with sorted keys where order carries no meaning and a fixed indent.
"""

from __future__ import annotations

import csv
import io
import json
import sqlite3
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from eval.data.minibird.spec import Column, Domain, Table

CSV_HEADER = ("original_column_name", "column_name", "column_description", "data_format", "value_description")


def create_table_sql(table: Table) -> str:
    """CREATE TABLE with column types, the primary key and foreign keys."""
    parts = [f"    {c.name} {c.sqltype}" for c in table.columns]
    pk = table.primary_key
    if pk:
        parts.append(f"    PRIMARY KEY ({', '.join(c.name for c in pk)})")
    for c in table.columns:
        if c.fk is not None:
            parts.append(f"    FOREIGN KEY ({c.name}) REFERENCES {c.fk[0]} ({c.fk[1]})")
    return f"CREATE TABLE {table.name} (\n" + ",\n".join(parts) + "\n)"


def write_sqlite(domain: Domain, rows: Mapping[str, Sequence[tuple]], path: Path) -> None:
    """Create ``path`` from scratch: schema, rows in order, then VACUUM for a canonical layout."""
    if path.exists():
        path.unlink()
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA page_size = 4096")
        conn.execute("PRAGMA journal_mode = DELETE")
        conn.execute("BEGIN")
        for table in domain.tables:
            conn.execute(create_table_sql(table))
            data = rows[table.name]
            width = len(table.columns)
            bad = [r for r in data if len(r) != width]
            if bad:
                raise ValueError(
                    f"{domain.db_id}.{table.name}: row {bad[0]!r} has {len(bad[0])} values, expected {width}"
                )
            conn.executemany(f"INSERT INTO {table.name} VALUES ({', '.join('?' * width)})", data)
        conn.execute("COMMIT")
        conn.execute("VACUUM")
    finally:
        conn.close()


def description_csv(table: Table) -> bytes:
    """BIRD's database_description/<table>.csv, encoded in the table's ``csv_encoding``."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\r\n")
    writer.writerow(CSV_HEADER)
    for c in table.columns:
        writer.writerow((c.name, c.phrase, c.description, c.data_format, c.value_description))
    return buf.getvalue().encode(table.csv_encoding)


def write_descriptions(domain: Domain, db_dir: Path) -> None:
    folder = db_dir / "database_description"
    folder.mkdir(parents=True, exist_ok=True)
    for table in domain.tables:
        (folder / f"{table.name}.csv").write_bytes(description_csv(table))


def _column_type(c: Column) -> str:
    if c.date_format:
        return "time"
    return "number" if c.sqltype in ("INTEGER", "REAL") else "text"


def tables_json_entry(domain: Domain) -> dict[str, Any]:
    """One database in Spider/BIRD ``tables.json`` format.

    ``column_names`` repeat the stored names (underscores as spaces), as BIRD does for
    columns without a readable name: abbreviations are explained only in the CSVs.
    """
    col_orig: list[list[Any]] = [[-1, "*"]]
    col_names: list[list[Any]] = [[-1, "*"]]
    col_types = ["text"]
    index: dict[tuple[str, str], int] = {}
    for t_idx, table in enumerate(domain.tables):
        for c in table.columns:
            index[(table.name, c.name)] = len(col_orig)
            col_orig.append([t_idx, c.name])
            col_names.append([t_idx, c.name.replace("_", " ")])
            col_types.append(_column_type(c))
    primary = [index[(t.name, c.name)] for t in domain.tables for c in t.primary_key]
    foreign = [
        [index[(child.name, fk.name)], index[(parent.name, pk.name)]] for child, fk, parent, pk in domain.foreign_keys()
    ]
    return {
        "db_id": domain.db_id,
        "table_names_original": [t.name for t in domain.tables],
        "table_names": [t.name.replace("_", " ") for t in domain.tables],
        "column_names_original": col_orig,
        "column_names": col_names,
        "column_types": col_types,
        "primary_keys": primary,
        "foreign_keys": foreign,
    }


def write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
