"""Building a suite: the schema and keys kept, the original untouched, the cache reused."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from rex.test_suite import SuiteSettings, ensure_suite, find_suites
from rex.test_suite.fuzz import foreign_key_problems
from tests.rex.test_suite.conftest import GOLDS, file_digest


def master(path: Path) -> list[tuple[str, str, str]]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute("SELECT type, name, sql FROM sqlite_master ORDER BY type, name").fetchall()
    finally:
        con.close()


def rows(path: Path, sql: str) -> list[tuple[Any, ...]]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_neighbours_keep_the_schema_and_the_keys(shop: Any) -> None:
    suite, built = ensure_suite(shop, GOLDS, SuiteSettings(neighbours=3, rows_per_table=12))
    assert built and len(suite.neighbours) == 3
    for neighbour in suite.neighbours:
        assert master(neighbour.path) == master(shop.path)  # tables, index and view, same DDL
        assert foreign_key_problems(neighbour.path) == []
        customers = {r[0] for r in rows(neighbour.path, "SELECT id FROM customers")}
        assert {r[0] for r in rows(neighbour.path, "SELECT customer_id FROM orders")} <= customers
        for table in ("customers", "orders"):
            count = rows(neighbour.path, f"SELECT COUNT(*), COUNT(DISTINCT id) FROM {table}")[0]
            assert 1 <= count[0] == count[1] <= 12
        pairs = rows(neighbour.path, "SELECT customer_id, amount FROM orders")
        assert len(pairs) == len(set(pairs))  # the UNIQUE constraint held
    contents = {tuple(rows(n.path, "SELECT * FROM orders")) for n in suite.neighbours}
    assert len(contents) == 3 and tuple(rows(shop.path, "SELECT * FROM orders")) not in contents


def test_gold_literals_reach_the_neighbours(shop: Any) -> None:
    """'Oslo' (no customer lives there) and amounts at the 100 boundary come from the gold SQL."""
    suite, _ = ensure_suite(shop, GOLDS, SuiteSettings(neighbours=3, rows_per_table=12))
    cities = {r[0] for n in suite.neighbours for r in rows(n.path, "SELECT city FROM customers")}
    amounts = {r[0] for n in suite.neighbours for r in rows(n.path, "SELECT amount FROM orders")}
    assert "Oslo" in cities
    assert amounts & {100, 101, 99}


def test_the_original_database_is_never_written(shop: Any) -> None:
    before, stat = file_digest(shop.path), shop.path.stat()
    ensure_suite(shop, GOLDS, SuiteSettings(neighbours=2, rows_per_table=10))
    after = shop.path.stat()
    assert file_digest(shop.path) == before
    assert (after.st_size, after.st_mtime_ns) == (stat.st_size, stat.st_mtime_ns)
    assert sorted(p.name for p in shop.path.parent.iterdir()) == ["shop.sqlite"]  # no journal, no neighbour beside it


def test_neighbours_are_written_only_into_the_cache(shop: Any, suite_cache: Path) -> None:
    suite, _ = ensure_suite(shop, GOLDS, SuiteSettings(neighbours=2, rows_per_table=10))
    assert suite.folder.parent == suite_cache / "test_suites"
    assert sorted(p.name for p in suite.folder.iterdir()) == [
        "manifest.json",
        "neighbour_0.sqlite",
        "neighbour_1.sqlite",
        "suite.json",
    ]
    assert not [p for p in suite.folder.parent.iterdir() if p.name.startswith(".building-")]


def test_a_second_build_reuses_the_cached_suite(shop: Any) -> None:
    from rex.test_suite.suites import forget_loaded

    settings = SuiteSettings(neighbours=2, rows_per_table=10)
    first, built = ensure_suite(shop, GOLDS, settings)
    forget_loaded()  # as a new process would
    digests = [file_digest(n.path) for n in first.neighbours]
    second, built_again = ensure_suite(shop, GOLDS[:2], settings)  # chosen for these too
    assert built and not built_again
    assert second.folder == first.folder and [file_digest(n.path) for n in second.neighbours] == digests
    assert len(find_suites(shop, settings)) == 1


def test_other_gold_queries_or_settings_get_their_own_suite(shop: Any) -> None:
    settings = SuiteSettings(neighbours=2, rows_per_table=10)
    first, _ = ensure_suite(shop, GOLDS[:1], settings)
    second, built = ensure_suite(shop, GOLDS[:1] + ("SELECT city FROM customers WHERE id = 3",), settings)
    third, built_third = ensure_suite(shop, GOLDS[:1], SuiteSettings(neighbours=3, rows_per_table=10))
    assert built and built_third
    assert len({first.folder, second.folder, third.folder}) == 3


def test_the_build_reports_what_it_caught(shop: Any) -> None:
    suite, _ = ensure_suite(shop, GOLDS, SuiteSettings(neighbours=3, rows_per_table=12))
    stats = suite.info["stats"]
    assert stats["golds"] == len(GOLDS) and stats["mutants"] > 30
    assert stats["caught_by_neighbours"] > 0  # some mutants only a neighbour tells apart
    caught = stats["caught_by_original"] + stats["caught_by_neighbours"]
    assert stats["caught_share"] == caught / stats["mutants"]
    assert stats["bytes"] == suite.bytes > 0
    assert "SELECT COUNT(*) FROM orders" not in {u["mutant"] for u in stats["uncaught"]}


def test_a_damaged_suite_is_rebuilt_with_a_warning(shop: Any) -> None:
    from rex.test_suite.suites import forget_loaded
    from tools.cache import CacheDamagedWarning

    settings = SuiteSettings(neighbours=2, rows_per_table=10)
    first, _ = ensure_suite(shop, GOLDS, settings)
    digest = file_digest(first.neighbours[0].path)
    with open(first.neighbours[0].path, "r+b") as handle:  # flip bytes inside the file
        handle.seek(200)
        handle.write(b"\x00damaged\x00")
    forget_loaded()
    with pytest.warns(CacheDamagedWarning, match="neighbour_0.sqlite"):
        again, built = ensure_suite(shop, GOLDS, settings)
    assert built and again.folder == first.folder
    assert file_digest(again.neighbours[0].path) == digest  # the same seeds build the same bytes
