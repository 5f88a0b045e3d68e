"""The DuckDB backend: the hostile battery (DuckDB's own attacks added), limits, values,
schema and fingerprint, on a DuckDB copy of the tool tests' SQLite database."""

from __future__ import annotations

import shutil
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from eval.data.duckdb_copy import copy_sqlite_to_duckdb
from tests.tools.conftest import make_school_db
from tests.tools.db.test_connection import LIMITS, _fingerprint
from tools import Backend, QueryLimits, QueryResult, ToolError, execute, get_database
from tools.db.backend import dialect_of
from tools.db.dialects import database_dialect
from tools.db.duckdb_backend import DuckDBDatabase, to_sqlite_value
from tools.errors import DataError

# Each deadline shortened to 1 s: DuckDB has no step limit, so every runaway runs to its deadline.
SHORT = {name: replace(limits, timeout_s=min(limits.timeout_s, 1.0)) for name, limits in LIMITS.items()}


def duckdb_hostile(folder: Path) -> list[tuple[str, set[str]]]:
    """SQL that must not succeed on a DuckDB file; paths point into ``folder``, which the
    test checks is unchanged afterwards."""
    return [
        ("INSERT INTO schools(id, name) VALUES (99, 'x')", {"forbidden"}),
        ("UPDATE schools SET name = 'x'", {"forbidden"}),
        ("DELETE FROM schools", {"forbidden"}),
        ("DROP TABLE schools", {"forbidden"}),
        ("CREATE TABLE t(a INT)", {"forbidden"}),
        ("CREATE TEMP TABLE t(a INT)", {"forbidden"}),
        ("CREATE TEMP TABLE t AS SELECT 1 AS a", {"forbidden"}),
        ("CREATE MACRO m(x) AS x", {"forbidden"}),
        ("ALTER TABLE schools ADD COLUMN x INT", {"forbidden"}),
        ("WITH x AS (SELECT 1) DELETE FROM schools", {"forbidden"}),
        ("SELECT * FROM read_csv('/etc/passwd')", {"forbidden"}),
        ("SELECT * FROM read_csv_auto('/etc/hostname')", {"forbidden"}),
        ("SELECT * FROM read_text('/etc/hostname')", {"forbidden"}),
        ("SELECT * FROM glob('/*')", {"forbidden"}),
        ("SELECT * FROM '/etc/passwd'", {"forbidden", "no_such_table"}),
        (f"COPY schools TO '{folder}/out.csv'", {"forbidden"}),
        (f"COPY (SELECT * FROM schools) TO '{folder}/out.parquet' (FORMAT parquet)", {"forbidden"}),
        (f"EXPORT DATABASE '{folder}/export'", {"forbidden"}),
        ("INSTALL httpfs", {"forbidden"}),
        ("FORCE INSTALL httpfs", {"forbidden"}),
        ("LOAD httpfs", {"forbidden"}),
        ("LOAD '/tmp/evil.duckdb_extension'", {"forbidden"}),
        ("SELECT * FROM read_parquet('https://example.com/data.parquet')", {"forbidden"}),
        ("SELECT * FROM 'https://example.com/data.csv'", {"forbidden", "no_such_table"}),
        ("SELECT * FROM read_parquet('s3://bucket/data.parquet')", {"forbidden"}),
        (f"ATTACH '{folder}/other.duckdb' AS other", {"forbidden"}),
        ("ATTACH ':memory:' AS other", {"forbidden"}),
        ("DETACH big", {"forbidden"}),
        ("USE memory", {"forbidden"}),
        ("SET memory_limit = '100GB'", {"forbidden"}),
        ("SET enable_external_access = true", {"forbidden"}),
        ("RESET enable_external_access", {"forbidden"}),
        ("SET threads = 64", {"forbidden"}),
        ("PRAGMA threads = 64", {"forbidden"}),
        ("PRAGMA enable_profiling", {"forbidden"}),
        ("CHECKPOINT", {"forbidden"}),
        ("BEGIN TRANSACTION", {"forbidden"}),
        ("CALL pragma_table_info('schools')", {"forbidden"}),
        ("SELECT * FROM query('CREATE TABLE z AS SELECT 1')", {"forbidden", "syntax"}),
        ("SELECT 1; DROP TABLE schools", {"too_many_statements", "forbidden"}),
        ("SELECT 1; SELECT 2", {"too_many_statements"}),
        ("SELECT count(*) FROM events a, events b, events c, events d", {"timeout"}),
        (
            "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT count(*) FROM r",
            {"timeout", "too_large"},
        ),
    ]


@pytest.fixture
def duck_big(tmp_path: Path) -> Path:
    """The tool tests' database with a few thousand events, copied into DuckDB, alone in its folder."""
    source = make_school_db(tmp_path / "big.sqlite", extra_rows=3000)
    folder = tmp_path / "duck"
    folder.mkdir()
    copy_sqlite_to_duckdb(source, folder / "big.duckdb")
    return folder / "big.duckdb"


@pytest.fixture
def duck_school(tmp_path: Path) -> Path:
    source = make_school_db(tmp_path / "school.sqlite")
    copy_sqlite_to_duckdb(source, tmp_path / "school.duckdb")
    return tmp_path / "school.duckdb"


@pytest.mark.parametrize("preset", sorted(SHORT))
def test_hostile_battery_changes_nothing_on_duckdb(duck_big: Path, preset: str) -> None:
    db = get_database(duck_big)
    assert isinstance(db, DuckDBDatabase)
    limits = SHORT[preset]
    before = _fingerprint(duck_big)
    for sql, kinds in duckdb_hostile(duck_big.parent):
        out = execute(db, sql, limits)
        assert isinstance(out, ToolError), (preset, sql, out)
        assert out.kind in kinds, (preset, sql, out)
        assert out.message
        if "timeout" not in kinds:  # as BIRD's official EX runs a text: no trimming, same guards
            assert isinstance(execute(db, sql, limits, as_written=True), ToolError), (preset, sql)
    # The configuration is as opened: nothing above changed it.
    settings = execute(
        db,
        "SELECT current_setting('enable_external_access'), current_setting('lock_configuration'), "
        "current_setting('autoload_known_extensions')",
        limits,
    )
    assert isinstance(settings, QueryResult) and settings.rows == ((0, 1, 0),)
    assert _fingerprint(duck_big) == before
    assert sorted(p.name for p in duck_big.parent.iterdir()) == ["big.duckdb"]


def test_runaway_stops_at_the_deadline_through_interrupt(duck_big: Path) -> None:
    import time

    db = get_database(duck_big)
    started = time.monotonic()
    out = execute(db, "SELECT count(*) FROM events a, events b, events c, events d", QueryLimits(timeout_s=0.5))
    took = time.monotonic() - started
    assert isinstance(out, ToolError) and out.kind == "timeout", out
    assert 0.5 <= took < 1.5
    # The connection is usable again afterwards.
    after = execute(db, "SELECT count(*) FROM schools", QueryLimits())
    assert isinstance(after, QueryResult) and after.rows == ((6,),)


def test_rows_cells_and_budget_match_sqlite(tmp_path: Path, duck_school: Path) -> None:
    lite = get_database(tmp_path / "school.sqlite")
    duck = get_database(duck_school)
    for limits in (
        QueryLimits(max_rows=5),
        QueryLimits(max_rows=3, max_cell_chars=4),
        QueryLimits(max_rows=None, max_result_rows=10),
        QueryLimits(max_rows=None, max_result_bytes=2000),
    ):
        for sql in (
            "SELECT name, city FROM schools ORDER BY id",
            "SELECT kind, note FROM events ORDER BY event_id",
            "SELECT score_id, avg_math FROM scores ORDER BY score_id",
        ):
            a, b = execute(lite, sql, limits), execute(duck, sql, limits)
            if isinstance(a, QueryResult):
                assert isinstance(b, QueryResult), (sql, limits, b)
                assert (a.rows, a.row_count, a.truncated) == (b.rows, b.row_count, b.truncated), (sql, limits)
            else:
                assert isinstance(b, ToolError) and (a.kind, a.message) == (b.kind, b.message), (sql, limits)


def test_values_come_back_as_sqlite_would_return_them(duck_school: Path) -> None:
    out = execute(
        get_database(duck_school),
        "SELECT 1.5 AS d, true AS b, DATE '2020-01-02' AS day, TIMESTAMP '2020-01-02 03:04:05' AS ts, "
        "170141183460469231731687303715884105727::HUGEINT AS h, 7 / 2 AS q, [1, 2] AS l, NULL AS n",
        QueryLimits(),
    )
    assert isinstance(out, QueryResult)
    assert out.rows == ((1.5, 1, "2020-01-02", "2020-01-02 03:04:05", 2**127 - 1, 3.5, "[1, 2]", None),)
    assert [type(v) for v in out.rows[0][:2]] == [float, int]
    assert to_sqlite_value(bytearray(b"\x00")) == b"\x00"


def test_schema_errors_and_fingerprint(tmp_path: Path, duck_school: Path) -> None:
    db = get_database(duck_school)
    assert isinstance(db, Backend) and db.dialect == "duckdb"
    assert db.schema() == get_database(tmp_path / "school.sqlite").schema()
    assert len(db.content_hash) == 64 and db.content_hash == db.content_hash
    missing = execute(db, "SELECT * FROM shcools", QueryLimits())
    assert (
        isinstance(missing, ToolError) and missing.kind == "no_such_table" and "schools" in (missing.suggestion or "")
    )
    column = execute(db, "SELECT nme FROM schools", QueryLimits())
    assert isinstance(column, ToolError) and column.kind == "no_such_column"
    syntax = execute(db, "SELEC 1", QueryLimits())
    assert isinstance(syntax, ToolError) and syntax.kind == "syntax"
    assert db.query_internal("SELECT count(*) FROM scores WHERE year = ?", [2015]) == [(8,)]
    with pytest.raises(DataError, match="one SELECT"):
        db.query_internal("CHECKPOINT")


def test_bad_duckdb_files_raise_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no DuckDB database"):
        DuckDBDatabase(tmp_path / "missing.duckdb")
    fake = tmp_path / "fake.duckdb"
    fake.write_bytes(b"SQLite format 3\x00" + bytes(100))
    with pytest.raises(DataError, match="not a DuckDB database"):
        DuckDBDatabase(fake)


def test_the_file_not_its_name_picks_the_backend(tmp_path: Path, duck_school: Path) -> None:
    """A DuckDB file named ``.db`` opens as DuckDB and a SQLite file named ``.duckdb`` as
    SQLite (their first bytes); a path with no file behind it goes by its suffix."""
    renamed = tmp_path / "school_copy.db"
    shutil.copyfile(duck_school, renamed)
    db = get_database(renamed)
    assert isinstance(db, DuckDBDatabase) and database_dialect(renamed) == "duckdb"
    counted = execute(db, "SELECT count(*) FROM scores WHERE year = 2015", QueryLimits())
    assert isinstance(counted, QueryResult) and counted.rows == ((8,),)
    misnamed = tmp_path / "school_sqlite.duckdb"
    shutil.copyfile(tmp_path / "school.sqlite", misnamed)
    other = get_database(misnamed)
    assert other.dialect == "sqlite" and database_dialect(misnamed) == "sqlite"
    assert other.schema() == db.schema()
    assert dialect_of(tmp_path / "new.duckdb") == "duckdb" and dialect_of(tmp_path / "new.db") == "sqlite"


def test_each_thread_has_its_own_cursor(duck_school: Path) -> None:
    db = get_database(duck_school)
    assert isinstance(db, DuckDBDatabase)
    seen: list[object] = []
    results: list[object] = []

    def work() -> None:
        seen.append(db.cursor())
        results.append(execute(db, "SELECT count(*) FROM events", QueryLimits()))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(c) for c in seen}) == 4
    assert all(isinstance(r, QueryResult) and r.rows == ((31,),) for r in results), results
