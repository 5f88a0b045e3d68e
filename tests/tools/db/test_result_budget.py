"""The result budget (QueryLimits.max_result_rows / max_result_bytes) on a real SQLite file:
an exploding cross join stops at the metric preset's budget long before its deadline, a
result within the budget is exactly what it was without one, and bad values are refused."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import pytest

from tests.helpers.wide_table import CROSS_JOIN, ROWS, build_wide_table
from tools import PRESETS, QueryLimits, QueryResult, ToolError, execute, get_database
from tools.db.budget import FETCH_CHUNK, estimate_bytes
from tools.db.limits import METRIC_MAX_RESULT_BYTES, METRIC_MAX_RESULT_ROWS
from tools.errors import ConfigError

NO_BUDGET = dataclasses.replace(PRESETS["metric"], max_result_rows=None, max_result_bytes=None)
ALL_ROWS = "SELECT * FROM t"  # 3,000 rows: several fetch chunks


@pytest.fixture(scope="module")
def wide(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wide_table(tmp_path_factory.mktemp("budget") / "wide.sqlite")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _same_result(a: QueryResult | ToolError, b: QueryResult | ToolError) -> bool:
    assert isinstance(a, QueryResult) and isinstance(b, QueryResult)
    return dataclasses.replace(a, elapsed_s=0.0) == dataclasses.replace(b, elapsed_s=0.0)


def test_the_metric_preset_has_the_documented_budget() -> None:
    metric = PRESETS["metric"]
    assert (metric.max_result_rows, metric.max_result_bytes) == (METRIC_MAX_RESULT_ROWS, METRIC_MAX_RESULT_BYTES)
    assert (METRIC_MAX_RESULT_ROWS, METRIC_MAX_RESULT_BYTES) == (1_000_000, 128 << 20)


def test_the_exploding_cross_join_is_too_large_before_its_deadline(wide: Path) -> None:
    before = _sha256(wide)
    # The preset's own 30 s deadline: a timeout here would mean the fetch did not stop at the budget.
    result = execute(get_database(wide), CROSS_JOIN, PRESETS["metric"])
    assert isinstance(result, ToolError) and result.kind == "too_large", result
    assert "max_result_bytes" in result.message and "128.0 MiB" in result.message
    assert result.suggestion and "LIMIT" in result.suggestion
    assert _sha256(wide) == before  # read, never written


def test_a_row_budget_stops_the_cross_join_at_the_first_chunk_past_it(wide: Path) -> None:
    limits = dataclasses.replace(PRESETS["metric"], max_result_rows=5_000, max_result_bytes=None)
    result = execute(get_database(wide), CROSS_JOIN, limits)
    assert isinstance(result, ToolError) and result.kind == "too_large"
    assert "more than 5,000 rows" in result.message and "max_result_rows" in result.message


def test_a_result_of_exactly_the_row_budget_is_unchanged(wide: Path) -> None:
    db = get_database(wide)
    at_budget = dataclasses.replace(NO_BUDGET, max_result_rows=ROWS)
    assert _same_result(execute(db, ALL_ROWS, at_budget), execute(db, ALL_ROWS, NO_BUDGET))
    over = execute(db, ALL_ROWS, dataclasses.replace(NO_BUDGET, max_result_rows=ROWS - 1))
    assert isinstance(over, ToolError) and over.kind == "too_large"


def test_a_result_of_exactly_the_byte_budget_is_unchanged(wide: Path) -> None:
    db = get_database(wide)
    whole = execute(db, ALL_ROWS, NO_BUDGET)
    assert isinstance(whole, QueryResult) and len(whole.rows) > FETCH_CHUNK
    size = estimate_bytes(list(whole.rows))  # the per-chunk estimates add up to this
    assert _same_result(execute(db, ALL_ROWS, dataclasses.replace(NO_BUDGET, max_result_bytes=size)), whole)
    over = execute(db, ALL_ROWS, dataclasses.replace(NO_BUDGET, max_result_bytes=size - 1))
    assert isinstance(over, ToolError) and over.kind == "too_large" and "max_result_bytes" in over.message


def test_long_text_cells_count_by_their_length(wide: Path) -> None:
    # 20 rows of 100,000 characters: few rows, 2 MB of text.
    sql = "SELECT id, printf('%.*c', 100000, 'x') FROM t LIMIT 20"
    result = execute(get_database(wide), sql, dataclasses.replace(NO_BUDGET, max_result_bytes=1_000_000))
    assert isinstance(result, ToolError) and result.kind == "too_large"
    fits = execute(get_database(wide), sql, dataclasses.replace(NO_BUDGET, max_result_bytes=3_000_000))
    assert isinstance(fits, QueryResult) and len(fits.rows) == 20 and len(fits.rows[0][1]) == 100_000


def test_a_capped_executor_counts_only_the_rows_it_keeps(wide: Path) -> None:
    limits = QueryLimits(max_rows=5, max_result_rows=10)
    result = execute(get_database(wide), ALL_ROWS, limits)
    assert isinstance(result, QueryResult)
    assert (len(result.rows), result.row_count, result.truncated) == (5, ROWS, True)


def test_the_estimate_follows_the_cell_types() -> None:
    assert estimate_bytes([]) == 0
    numbers = estimate_bytes([(1, 2.5, None)])
    assert estimate_bytes([(1, "abcd", b"xy")]) == numbers + 6
    assert estimate_bytes([(1, "abcd"), (2, 3)]) == estimate_bytes([(1, 0), (2, 3)]) + 4  # a mixed column


@pytest.mark.parametrize("field", ["max_result_rows", "max_result_bytes"])
@pytest.mark.parametrize("value", [0, -3, 2.5, "many", True])
def test_a_bad_budget_is_a_config_error_naming_it(field: str, value: object) -> None:
    with pytest.raises(ConfigError, match=rf"QueryLimits\.{field}={value!r}.*positive int"):
        QueryLimits(**{field: value})  # type: ignore[arg-type]


def test_no_budget_is_the_default_of_an_executor_preset() -> None:
    assert (QueryLimits().max_result_rows, QueryLimits().max_result_bytes) == (None, None)


def test_the_connection_runs_the_next_query_after_a_stopped_fetch(wide: Path) -> None:
    # The stopped statement is finalised: the next query on the same connection runs.
    db = get_database(wide)
    limits = dataclasses.replace(NO_BUDGET, max_result_rows=10)
    assert isinstance(execute(db, CROSS_JOIN, limits), ToolError)
    after = execute(db, "SELECT count(*) FROM t", limits)
    assert isinstance(after, QueryResult) and after.rows == ((ROWS,),)
