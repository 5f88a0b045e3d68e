"""A small shop database on which wrong queries match the gold result: every order is
over 100 (so a COUNT(*) without its WHERE counts the same) and no customer lives in Oslo
(so a misspelt city returns the same empty result)."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

OVER_100 = "SELECT COUNT(*) FROM orders WHERE amount > 100"
IN_OSLO = "SELECT name FROM customers WHERE city = 'Oslo'"
BIG_SPENDERS = (
    "SELECT c.name FROM customers AS c JOIN orders AS o ON o.customer_id = c.id "
    "WHERE o.status = 'paid' GROUP BY c.id HAVING SUM(o.amount) > 300"
)
GOLDS = (OVER_100, IN_OSLO, BIG_SPENDERS, "SELECT COUNT(*) FROM orders WHERE status = 'refunded'")


def build_shop(path: Path) -> Path:
    con = sqlite3.connect(path)
    con.executescript(
        """
        CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT);
        CREATE TABLE orders (
            id INTEGER PRIMARY KEY,
            customer_id INTEGER NOT NULL REFERENCES customers (id),
            amount REAL,
            status TEXT,
            UNIQUE (customer_id, amount)
        );
        CREATE INDEX orders_status ON orders (status);
        CREATE VIEW paid AS SELECT * FROM orders WHERE status = 'paid';
        """
    )
    cities = ["Rome", "Paris", "Lima", "Rome", "Kyiv", "Paris"]
    con.executemany(
        "INSERT INTO customers VALUES (?, ?, ?)", [(i + 1, f"Customer {i + 1}", c) for i, c in enumerate(cities)]
    )
    con.executemany(
        "INSERT INTO orders VALUES (?, ?, ?, ?)",
        [(i + 1, 1 + i % 6, 110.0 + 15 * i, "paid" if i % 4 else "refunded") for i in range(24)],
    )
    con.commit()
    con.close()
    return path


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def suite_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh cache root and no suite remembered by this process."""
    from rex.test_suite.suites import forget_loaded

    root = tmp_path_factory.mktemp("suite-cache")
    monkeypatch.setenv("SQLAGENT_RL_CACHE", str(root))
    forget_loaded()
    yield root
    forget_loaded()


@pytest.fixture
def shop(tmp_path: Path, suite_cache: Path) -> Any:
    from tools import get_database

    return get_database(build_shop(tmp_path / "shop.sqlite"))
