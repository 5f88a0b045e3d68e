"""Small real SQLite files for the tool tests: NULLs, mixed types, text-stored numbers,
dates, a non-UTF-8 cell, declared and undeclared foreign keys, and a BIRD-style
``database_description`` folder."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

SCHOOLS = [
    # id, name, city, enrollment (text-stored number), opened (date text), rate (percent), misc (mixed)
    (1, "Alameda High", "Alameda", "1200", "1998-09-01", 0.85, 7),
    (2, "Berkeley Arts", "Berkeley", "450", "2003-08-15", 0.5, "seven"),
    (3, "Castro Valley", None, "980", "1987-01-20", None, 7.5),
    (4, "Dublin Tech", "Dublin", None, "2010-09-07", 1.0, None),
    (5, "Emery Prep", "Emeryville", "75", None, 0.33, b"\x00\x01"),
    (6, "Fremont North", "Fremont", "2100", "1975-09-02", 0.91, 7),
]


def make_school_db(path: Path, extra_rows: int = 0) -> Path:
    """Write the test database at ``path`` (``extra_rows`` adds rows to ``events``)."""
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE schools (
            id INTEGER PRIMARY KEY,
            name TEXT NOT NULL,
            city TEXT,
            enrollment TEXT,
            opened DATE,
            rate REAL,
            misc
        );
        CREATE TABLE scores (
            score_id INTEGER PRIMARY KEY,
            school_id INTEGER REFERENCES schools(id),
            year INTEGER,
            avg_math REAL
        );
        CREATE TABLE events (
            event_id INTEGER PRIMARY KEY,
            schools_id INTEGER,
            kind TEXT,
            note TEXT
        );
        CREATE INDEX idx_scores_school ON scores(school_id);
        """
    )
    conn.executemany("INSERT INTO schools VALUES (?,?,?,?,?,?,?)", SCHOOLS)
    conn.executemany(
        "INSERT INTO scores(school_id, year, avg_math) VALUES (?,?,?)",
        [(1 + i % 6, 2015 + i % 5, None if i % 7 == 0 else 400 + i) for i in range(40)],
    )
    kinds = ["open day", "sports fair", "science fair", "board meeting"]
    conn.executemany(
        "INSERT INTO events(schools_id, kind, note) VALUES (?,?,?)",
        [(1 + i % 6, kinds[i % 4], f"note {i}") for i in range(30 + extra_rows)],
    )
    # One cell whose bytes are not valid UTF-8.
    conn.execute("INSERT INTO events(schools_id, kind, note) VALUES (2, 'open day', CAST(X'ff41fe' AS TEXT))")
    conn.commit()
    conn.close()
    return path


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own cache root, so caches never leak between tests."""
    root = tmp_path_factory.mktemp("cache")
    monkeypatch.setenv("SQLAGENT_RL_CACHE", str(root))
    return root


@pytest.fixture
def school_db(tmp_path: Path) -> Path:
    return make_school_db(tmp_path / "schools.sqlite")
