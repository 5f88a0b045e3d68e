"""sqlite_peek: column profiles over at most 5,000 rows, read-only ``where``."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tools import get_database
from tools.db.results import ToolError
from tools.explore.peek import PEEK_SCAN_ROWS, char_class, sqlite_peek


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (42, "digits"),
        (3.5, "digits"),
        ("1200", "digits"),
        ("-0.5", "digits"),
        ("Berkeley", "letters"),
        ("open day", "letters"),
        ("A12-B", "mixed"),
        ("1998-09-01", "date-like"),
        ("12/31/2020", "date-like"),
        ("2020-01-02 10:30:00", "date-like"),
        ("85%", "percent-like"),
        ("12.5 %", "percent-like"),
        ("--", "other"),
        (b"\x00", "other"),
    ],
)
def test_char_class(value: object, expected: str) -> None:
    assert char_class(value) == expected


def test_peek_reports_storage_and_formats(school_db: Path) -> None:
    out = sqlite_peek(get_database(school_db), "SCHOOLS", ["enrollment", "Opened", "misc", "rate", "city"], limit=3)
    assert not isinstance(out, ToolError)
    assert out["table"] == "schools" and out["rows_scanned"] == 6 and out["table_rows"] == 6 and not out["scan_capped"]
    cols = out["columns"]
    enrollment = cols["enrollment"]
    assert enrollment["declared_type"] == "TEXT" and enrollment["nulls"] == 1 and enrollment["distinct"] == 5
    assert (enrollment["min"], enrollment["max"]) == ("1200", "980")  # text order, as SQL compares
    assert enrollment["numbers_stored_as_text"] == {"min": 75, "max": 2100}
    assert enrollment["char_classes"] == {"digits": 5}
    assert cols["opened"]["char_classes"] == {"date-like": 5}
    assert cols["misc"]["storage"] == {"integer": 2, "text": 1, "real": 1, "blob": 1}
    assert cols["misc"]["top_values"][0] == [7, 2]
    assert cols["rate"]["min"] == 0.33 and cols["rate"]["max"] == 1.0
    assert cols["city"]["nulls"] == 1 and len(cols["city"]["samples"]) == 3


def test_peek_all_columns_prefixes_and_where(school_db: Path) -> None:
    db = get_database(school_db)
    out = sqlite_peek(db, "events", [], limit=2)
    assert not isinstance(out, ToolError)
    assert list(out["columns"]) == ["event_id", "schools_id", "kind", "note"]
    assert out["columns"]["kind"]["common_prefixes"][0] == ["ope", 9]
    assert out["columns"]["kind"]["top_values"] == [["open day", 9], ["sports fair", 8]]
    filtered = sqlite_peek(db, "events", ["kind"], where="kind LIKE '%fair'")
    assert not isinstance(filtered, ToolError)
    assert filtered["rows_scanned"] == 15 and filtered["columns"]["kind"]["distinct"] == 2


def test_peek_scans_at_most_5000_rows(tmp_path: Path) -> None:
    path = tmp_path / "many.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (v INTEGER)")
    conn.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(PEEK_SCAN_ROWS + 700)])
    conn.commit()
    conn.close()
    out = sqlite_peek(get_database(path), "t", ["v"])
    assert not isinstance(out, ToolError)
    assert out["rows_scanned"] == PEEK_SCAN_ROWS and out["scan_capped"] and out["table_rows"] == PEEK_SCAN_ROWS + 700
    assert out["columns"]["v"]["distinct"] == PEEK_SCAN_ROWS


def test_peek_errors_and_hostile_where(school_db: Path) -> None:
    db = get_database(school_db)
    before = school_db.read_bytes()
    err = sqlite_peek(db, "school", ["name"])
    assert isinstance(err, ToolError) and err.kind == "no_such_table" and "'schools'" in (err.suggestion or "")
    err = sqlite_peek(db, "schools", ["nmae"])
    assert isinstance(err, ToolError) and err.kind == "no_such_column" and "'name'" in (err.suggestion or "")
    for where in (
        "1); DELETE FROM schools; --",
        "id IN (SELECT load_extension('x'))",
        "1) UNION SELECT sql FROM sqlite_master --",
    ):
        out = sqlite_peek(db, "schools", ["name"], where=where)
        if isinstance(out, ToolError):
            assert out.kind in {"syntax", "forbidden", "too_many_statements"}, out
    assert school_db.read_bytes() == before
