"""The test-suite metric is SQLite-only: on a DuckDB database it is a clear error, and
held-out reports leave ``ex_test_suite`` out there instead of failing."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.types import Example
from eval.data.duckdb_copy import copy_sqlite_to_duckdb
from eval.scoring import Sample, score_question
from rex import ExecScorer
from rex.test_suite import ensure_suites
from tests.rex.test_suite.conftest import build_shop
from tools import get_database
from tools.errors import ConfigError

GOLD = "SELECT COUNT(*) FROM customers"
OTHER = "SELECT COUNT(*) + 1 FROM customers"


@pytest.fixture
def duck_shop(tmp_path: Path, suite_cache: Path) -> Path:
    duck = tmp_path / "shop.duckdb"
    copy_sqlite_to_duckdb(build_shop(tmp_path / "shop.sqlite"), duck)
    return duck


@pytest.mark.parametrize("pred", [GOLD, OTHER])  # a match and a mismatch refuse alike
def test_test_suite_metric_on_duckdb_is_a_clear_error(duck_shop: Path, pred: str) -> None:
    db = get_database(duck_shop)
    assert ExecScorer().score(db, GOLD, pred, "ex").score == float(pred == GOLD)  # EX scores on DuckDB
    with pytest.raises(ConfigError, match=r"SQLite-only.*'shop'.*duckdb.*reward.exec_metric=ex"):
        ExecScorer().score(db, GOLD, pred, "test_suite")


def test_building_suites_for_a_duckdb_dataset_is_a_clear_error(duck_shop: Path) -> None:
    with pytest.raises(ConfigError, match="SQLite-only"):
        ensure_suites([(duck_shop, GOLD)])


def test_heldout_scores_leave_ex_test_suite_out_on_duckdb(duck_shop: Path) -> None:
    example = Example(id="q0", db_id="shop", db_path=str(duck_shop), question="How many customers?", gold_sql=GOLD)
    record = score_question(example, [Sample(GOLD)], ExecScorer(), "greedy", test_suite=True)
    assert record["ex"] == 1 and "ex_test_suite" not in record
