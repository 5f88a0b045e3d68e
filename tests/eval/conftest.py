"""Small dataset fixtures in BIRD, Spider and JSONL layouts, made by the tests.

The databases are real SQLite files with NULLs and mixed types (an INTEGER column holding
a text value, numbers stored as text), so loading exercises the real schema reader.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from eval.data import minibird


def make_music_db(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT, age INTEGER, country TEXT);
        CREATE TABLE concert (concert_id INTEGER PRIMARY KEY, singer_id TEXT, year TEXT, venue TEXT,
                              FOREIGN KEY (singer_id) REFERENCES singer (singer_id));
        INSERT INTO singer VALUES (1, 'Ana Silva', 31, 'Brazil'), (2, 'Lars Olsen', NULL, 'Sweden'),
                                  (3, 'Mei Chen', 'unknown', NULL), (4, 'José García', 45, 'Spain');
        INSERT INTO concert VALUES (1, '1', '2019', 'Arena'), (2, '1', '2021', NULL), (3, '4', '2020', 'Dome');
        """
    )
    conn.commit()
    conn.close()
    return path


def make_shop_db(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE item (item_id INTEGER PRIMARY KEY, label TEXT, price TEXT);
        INSERT INTO item VALUES (1, 'pen', '1.50'), (2, 'ink', NULL), (3, 'pad', '3');
        """
    )
    conn.commit()
    conn.close()
    return path


BIRD_DEV = [
    {
        "question_id": 10,
        "db_id": "music",
        "question": "How many singers are there?",
        "evidence": "",
        "SQL": "SELECT COUNT(*) FROM singer",
        "difficulty": "simple",
    },
    {
        "question_id": 11,
        "db_id": "music",
        "question": "Name the singers from Spain.",
        "evidence": "Spain refers to country = 'Spain'",
        "SQL": "SELECT name FROM singer WHERE country = 'Spain'",
        "difficulty": "simple",
    },
    {
        "question_id": 12,
        "db_id": "music",
        "question": "Which singers performed in 2021?",
        "evidence": "",
        "SQL": "SELECT DISTINCT T1.name FROM singer AS T1 "
        "JOIN concert AS T2 ON T1.singer_id = CAST(T2.singer_id AS INTEGER) "
        "WHERE T2.year = '2021'",
        "difficulty": "moderate",
    },
    {
        "question_id": 13,
        "db_id": "shop",
        "question": "List every item.",
        "evidence": "",
        "SQL": "SELECT * FROM item",
        "difficulty": "simple",
    },
]


def write_bird(
    root: Path,
    split: str = "dev",
    records: list | None = None,
    questions_name: str | None = None,
    dbs: tuple[str, ...] = ("music", "shop"),
) -> Path:
    """root/<split>/{<split>.json, <split>_tables.json, <split>_databases/<db>/<db>.sqlite}."""
    folder = root / split
    folder.mkdir(parents=True, exist_ok=True)
    (folder / (questions_name or f"{split}.json")).write_text(json.dumps(BIRD_DEV if records is None else records))
    (folder / f"{split}_tables.json").write_text("[]")
    makers = {"music": make_music_db, "shop": make_shop_db}
    for db in dbs:
        makers[db](folder / f"{split}_databases" / db / f"{db}.sqlite")
        desc = folder / f"{split}_databases" / db / "database_description"
        desc.mkdir(exist_ok=True)
        (desc / "x.csv").write_text(
            "original_column_name,column_name,column_description,data_format,value_description\n"
        )
    return folder


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test here caches (profiles, gold references) under a temporary root, never in
    the user's ``~/.cache``; the root is shared by the session so caching still happens."""
    root = tmp_path_factory.getbasetemp() / "cache"
    monkeypatch.setenv("SQLAGENT_RL_CACHE", str(root))
    return root


@pytest.fixture
def bird_root(tmp_path: Path) -> Path:
    write_bird(tmp_path / "bird")
    return tmp_path / "bird"


@pytest.fixture(scope="session")
def minibird_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One minibird build shared by the tests of this session."""
    return minibird.build(tmp_path_factory.mktemp("minibird") / "a")


# ----------------------------------------------------------------------------- eval.run cases
# Questions and a predictions file that between them give every outcome (match, mismatch,
# pred_error, pred_timeout, gold_error, missing), shared by the eval.evaluate and eval.run tests.

INFINITE = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT MAX(x) FROM c"

OUTCOME_RECORDS = [
    {
        "question_id": 10,
        "db_id": "music",
        "question": "How many singers?",
        "evidence": "",
        "SQL": "SELECT COUNT(*) FROM singer",
        "difficulty": "simple",
    },
    {
        "question_id": 11,
        "db_id": "music",
        "question": "Singers from Spain?",
        "evidence": "",
        "SQL": "SELECT name FROM singer WHERE country = 'Spain'",
        "difficulty": "simple",
    },
    {
        "question_id": 12,
        "db_id": "music",
        "question": "Venues by year?",
        "evidence": "",
        "SQL": "SELECT year, venue FROM concert ORDER BY year",
        "difficulty": "moderate",
    },
    {
        "question_id": 13,
        "db_id": "shop",
        "question": "Item labels?",
        "evidence": "",
        "SQL": "SELECT label FROM item",
        "difficulty": "simple",
    },
    {
        "question_id": 14,
        "db_id": "music",
        "question": "Broken gold",
        "evidence": "",
        "SQL": "SELECT no_such_function(name) FROM singer",
        "difficulty": "challenging",
    },
    {
        "question_id": 15,
        "db_id": "music",
        "question": "Countries?",
        "evidence": "",
        "SQL": "SELECT DISTINCT country FROM singer",
        "difficulty": "challenging",
    },
    {
        "question_id": 16,
        "db_id": "music",
        "question": "Known venues?",
        "evidence": "",
        "SQL": "SELECT venue FROM concert WHERE venue IS NOT NULL",
        "difficulty": "moderate",
    },
]

PREDICTIONS = [
    {"question_id": 10, "db_id": "music", "sql": "SELECT COUNT(singer_id) FROM singer"},  # match
    {"question_id": 11, "db_id": "music", "sql": "SELECT name FROM singer WHERE country = 'Brazil'"},  # mismatch
    {
        "id": "12",
        "db_id": "music",
        "sql": "SELECT year, venue FROM concert ORDER BY year DESC",
    },  # match (EX ignores order)
    {"question_id": 13, "db_id": "shop", "sql": "SELECT labl FROM item"},  # pred_error
    {"question_id": 14, "db_id": "music", "sql": "SELECT name FROM singer"},  # gold_error
    # 15 is missing
    {"question_id": 16, "db_id": "music", "sql": INFINITE},  # pred_timeout
]


@pytest.fixture
def bird(tmp_path: Path) -> Path:
    """A BIRD-layout dev split of ``OUTCOME_RECORDS``, the questions ``PREDICTIONS`` answers."""
    write_bird(tmp_path / "bird", records=OUTCOME_RECORDS)
    return tmp_path / "bird"


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def quiet(_: str) -> None:
    """A ``say`` that prints nothing."""
