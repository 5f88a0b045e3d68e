"""A small real SQLite database for the agent tests: two tables joined by a declared
foreign key, NULLs, a text-stored number and mixed-type cells."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from agents.types import Example

SCHOOLS = [
    # id, name, city, county, enrollment, charter (NULL = unknown), misc (mixed types)
    (1, "Fresno High", "Fresno", "Fresno", 2100, 0, 7),
    (2, "Roosevelt Arts", "Fresno", "Fresno", 850, 1, "seven"),
    (3, "Clovis West", "Clovis", "Fresno", 1900, None, 7.5),
    (4, "Oakland Tech", "Oakland", "Alameda", 1750, 0, None),
    (5, "Berkeley Prep", None, "Alameda", None, 1, "12"),
]
SCORES = [
    # school_id, year, avg_math (NULL and a text-stored number), test_takers
    (1, 2019, 512.5, 300),
    (1, 2020, 498.0, 280),
    (2, 2019, None, 40),
    (2, 2020, "530", 45),
    (3, 2020, 541.0, 260),
    (4, 2020, 505.25, None),
]


def make_db(path: Path) -> Path:
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE schools (
            id INTEGER PRIMARY KEY,
            name TEXT NOT NULL,
            city TEXT,
            county TEXT,
            enrollment INTEGER,
            charter INTEGER,
            misc
        );
        CREATE TABLE satscores (
            school_id INTEGER REFERENCES schools(id),
            year INTEGER,
            avg_math REAL,
            test_takers INTEGER
        );
        """
    )
    conn.executemany("INSERT INTO schools VALUES (?,?,?,?,?,?,?)", SCHOOLS)
    conn.executemany("INSERT INTO satscores VALUES (?,?,?,?)", SCORES)
    conn.commit()
    conn.close()
    return path


@pytest.fixture(scope="session")
def db_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_db(tmp_path_factory.mktemp("agentdb") / "schools.sqlite")


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Profiles and indexes go to a per-session temporary cache, never the user's."""
    monkeypatch.setenv("SQLAGENT_RL_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.fixture
def db(db_path: Path, _cache_dir: None):
    from tools import get_database

    return get_database(db_path)


COUNT_SQL = "SELECT COUNT(*) FROM schools WHERE city = 'Fresno'"
JOIN_SQL = (
    "SELECT MAX(T2.avg_math) FROM schools AS T1 JOIN satscores AS T2 ON T1.id = T2.school_id WHERE T1.city = 'Fresno'"
)


def make_example(
    db_path: Path,
    sql: str = COUNT_SQL,
    question: str = "How many schools are in Fresno?",
    tables: tuple[str, ...] = ("schools",),
    columns: tuple[str, ...] = ("schools.city",),
) -> Example:
    return Example(
        id="q1",
        db_id="schools",
        db_path=str(db_path),
        question=question,
        evidence="Fresno refers to city = 'Fresno'",
        gold_sql=sql,
        difficulty="simple",
        gold_tables=tables,
        gold_columns=columns,
        split="dev",
    )


@pytest.fixture
def example(db_path: Path) -> Example:
    return make_example(db_path)


@pytest.fixture
def join_example(db_path: Path) -> Example:
    return make_example(
        db_path,
        JOIN_SQL,
        "What is the highest average math score of a school in Fresno?",
        ("satscores", "schools"),
        ("satscores.avg_math", "satscores.school_id", "schools.city", "schools.id"),
    )
