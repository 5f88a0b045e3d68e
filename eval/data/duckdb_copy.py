"""Copying a SQLite database into a DuckDB file, value for value.

Each column's DuckDB type follows the values SQLite holds in it (``typeof``), not its
declared type, so every value reads back as the same Python value (``tools.db.duckdb_backend``
converts DuckDB cells to SQLite's): only integers → ``BIGINT``, integers and reals →
``DOUBLE``, only blobs → ``BLOB``, anything holding text (or nothing) → ``VARCHAR`` unless
its declared type says integer / real. Dates stay text, as SQLite stores them, so the
questions' SQL compares them the same way on both engines. A column mixing text with numbers
becomes text (SQLite's loose typing has no DuckDB equivalent); ``copy_sqlite_to_duckdb``
returns such columns so a caller can report them. Primary keys, foreign keys and indexes
are not copied (DuckDB's constraints would refuse rows SQLite accepted).
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from tools.errors import DataError

if TYPE_CHECKING:
    import duckdb

BATCH_ROWS = 5000


def copy_sqlite_to_duckdb(source: str | Path, target: str | Path) -> list[str]:
    """Write the tables of the SQLite file ``source`` into a new DuckDB file ``target``;
    returns ``table.column`` for each column that mixed text with numbers (now text)."""
    import duckdb

    source, target = Path(source), Path(target)
    if target.exists():
        raise DataError(f"{target} exists; copy into a new path (delete the old DuckDB file first)")
    mixed: list[str] = []
    src = sqlite3.connect(f"{source.resolve().as_uri()}?mode=ro", uri=True)
    src.text_factory = lambda data: data.decode("utf-8", errors="replace")
    try:
        with contextlib.closing(duckdb.connect(str(target))) as out:
            tables = [
                name
                for (name,) in src.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' "
                    "ORDER BY rowid"
                )
            ]
            for table in tables:
                columns = _column_types(src, table)
                mixed += [f"{table}.{c}" for c, (_, was_mixed) in columns.items() if was_mixed]
                _copy_table(src, out, table, {c: t for c, (t, _) in columns.items()})
    except BaseException:
        target.unlink(missing_ok=True)
        raise
    finally:
        src.close()
    return mixed


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _column_types(conn: sqlite3.Connection, table: str) -> dict[str, tuple[str, bool]]:
    """``{column: (DuckDB type, mixed text and numbers)}`` from the values stored."""
    out: dict[str, tuple[str, bool]] = {}
    for _, name, declared, *_rest in conn.execute(f"SELECT * FROM pragma_table_info({_literal(table)})"):
        kinds = {
            k
            for (k,) in conn.execute(
                f"SELECT DISTINCT typeof({_quote(name)}) FROM {_quote(table)} WHERE {_quote(name)} IS NOT NULL"
            )
        }
        out[name] = _duck_type(kinds, (declared or "").upper())
    return out


def _duck_type(kinds: set[str], declared: str) -> tuple[str, bool]:
    if kinds == {"integer"}:
        return "BIGINT", False
    if kinds and kinds <= {"integer", "real"}:
        return "DOUBLE", False
    if kinds == {"blob"}:
        return "BLOB", False
    if not kinds:  # no values: SQLite's affinity rules on the declared type
        if "INT" in declared:
            return "BIGINT", False
        if any(word in declared for word in ("REAL", "FLOA", "DOUB")):
            return "DOUBLE", False
        return "VARCHAR", False
    return "VARCHAR", bool(kinds & {"integer", "real"})


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _rows(conn: sqlite3.Connection, table: str, columns: dict[str, str]) -> Iterator[list[tuple]]:
    select = ", ".join(f"CAST({_quote(c)} AS TEXT)" if t == "VARCHAR" else _quote(c) for c, t in columns.items())
    cursor = conn.execute(f"SELECT {select} FROM {_quote(table)}")
    while batch := cursor.fetchmany(BATCH_ROWS):
        yield batch


def _copy_table(src: sqlite3.Connection, out: duckdb.DuckDBPyConnection, table: str, columns: dict[str, str]) -> None:
    import pyarrow as pa

    definition = ", ".join(f"{_quote(c)} {t}" for c, t in columns.items())
    out.execute(f"CREATE TABLE {_quote(table)} ({definition})")
    arrow_types: dict[str, pa.DataType] = {
        "BIGINT": pa.int64(),
        "DOUBLE": pa.float64(),
        "BLOB": pa.binary(),
        "VARCHAR": pa.string(),
    }
    schema = pa.schema([pa.field(f"c{i}", arrow_types[t]) for i, t in enumerate(columns.values())])
    for batch in _rows(src, table, columns):
        arrays = [pa.array([row[i] for row in batch], type=schema.field(i).type) for i in range(len(columns))]
        out.register("sqlite_rows", pa.Table.from_arrays(arrays, schema=schema))
        out.execute(f"INSERT INTO {_quote(table)} SELECT * FROM sqlite_rows")
        out.unregister("sqlite_rows")


def replace_sqlite_files(root: str | Path) -> list[Path]:
    """Replace every ``<db>.sqlite`` under ``root`` with ``<db>.duckdb`` (a BIRD layout
    read the same way, ``eval.data.layout``) and refresh ``MANIFEST.json`` if there is one;
    returns the DuckDB files written."""
    import hashlib
    import json

    root = Path(root)
    written = []
    for source in sorted(root.rglob("*.sqlite")):
        target = source.with_suffix(".duckdb")
        copy_sqlite_to_duckdb(source, target)
        source.unlink()
        written.append(target)
    manifest = root / "MANIFEST.json"
    if manifest.is_file():
        data = json.loads(manifest.read_text(encoding="utf-8"))
        data["format"] = "duckdb"
        data["files"] = {
            p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*"))
            if p.is_file() and p != manifest
        }
        manifest.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return written
