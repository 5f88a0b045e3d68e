"""A small real SQLite database with NULLs, mixed-type cells, duplicates and a
1,200-row table, shared by the rex tests."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

PEOPLE = [
    (1, "Ann", 30, 1.5, "Oslo", "1"),
    (2, "Bob", 25, None, "Rome", 1),
    (3, "Cid", None, 2.25, "Oslo", "01"),
    (4, "Dee", 41, 3.0, None, 2),
    (5, "Eve", 25, 0.1, "Rome", None),
    (6, "Fay", 35, None, "Oslo", "x"),
]


def build_test_db(path: Path) -> Path:
    """people: 6 rows with NULLs and a ``code`` column of no affinity holding both text
    '1' and integer 1; big: 1,200 rows, 6 columns (NULL every 5th ``c``)."""
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT, age INTEGER, score REAL, city TEXT, code)")
    con.executemany("INSERT INTO people VALUES (?, ?, ?, ?, ?, ?)", PEOPLE)
    con.execute("CREATE TABLE big (id INTEGER, grp INTEGER, val REAL, a TEXT, b INTEGER, c TEXT)")
    con.executemany(
        "INSERT INTO big VALUES (?, ?, ?, ?, ?, ?)",
        [(i, i % 7, i * 0.5, f"a{i % 13}", i % 3, None if i % 5 == 0 else f"c{i}") for i in range(1, 1201)],
    )
    con.commit()
    con.close()
    return path


@pytest.fixture(scope="session")
def test_db_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_test_db(tmp_path_factory.mktemp("rexdb") / "people.sqlite")


@pytest.fixture(scope="session")
def test_db(test_db_path: Path):
    from tools import get_database

    return get_database(test_db_path)
