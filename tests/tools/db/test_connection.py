"""The read-only connection helper: hostile inputs, limits, presets, errors, threads."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from tests.tools.conftest import make_school_db
from tools import (
    PRESETS,
    Database,
    QueryLimits,
    QueryResult,
    ToolError,
    execute,
    get_database,
)
from tools.db.limits import METADATA_PRAGMAS
from tools.errors import ConfigError, DataError

HOSTILE = [
    ("INSERT INTO schools(id, name) VALUES (99, 'x')", {"forbidden"}),
    ("UPDATE schools SET name = 'x'", {"forbidden"}),
    ("DELETE FROM schools", {"forbidden"}),
    ("DROP TABLE schools", {"forbidden"}),
    ("CREATE TABLE t(a)", {"forbidden"}),
    ("CREATE TEMP TABLE t(a)", {"forbidden"}),
    ("ALTER TABLE schools ADD COLUMN x", {"forbidden"}),
    ("WITH x AS (SELECT 1) DELETE FROM schools", {"forbidden"}),
    ("WITH x AS (SELECT 1) INSERT INTO schools(id, name) SELECT 100, 'y'", {"forbidden"}),
    ("ATTACH DATABASE ':memory:' AS other", {"forbidden"}),
    ("DETACH DATABASE main", {"forbidden"}),
    ("PRAGMA writable_schema = 1", {"forbidden"}),
    ("PRAGMA journal_mode = WAL", {"forbidden"}),
    ("PRAGMA query_only = 0", {"forbidden"}),
    ("BEGIN IMMEDIATE", {"forbidden"}),
    ("VACUUM", {"forbidden"}),
    ("REINDEX", {"forbidden"}),
    ("ANALYZE", {"forbidden"}),
    ("SELECT load_extension('libfoo')", {"forbidden"}),
    ("SELECT 1; DELETE FROM schools", {"too_many_statements", "forbidden"}),
    ("SELECT 1; SELECT 2", {"too_many_statements"}),
    ("SELECT randomblob(1e9)", {"other"}),
    ("SELECT zeroblob(1e9)", {"other"}),
    (
        "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT count(*) FROM r",
        {"step_limit", "timeout"},
    ),
    ("SELECT count(*) FROM events a, events b, events c, events d", {"step_limit", "timeout"}),
]

# The authorizer alone (no statement-kind check) must refuse everything above as well.
AUTHORIZER_ONLY = QueryLimits(max_rows=100, timeout_s=2.0, select_only=False, allowed_pragmas=METADATA_PRAGMAS)
# A preset with a long deadline (``metric``; the TRUST-SQL and DualSQL executors, which have
# no step cap) would hold each runaway for its whole deadline; its "_short" copy runs the
# battery with a 1 s deadline and everything else unchanged.
LONG_DEADLINE_S = 5.0
LIMITS = {
    **{k: v for k, v in PRESETS.items() if v.timeout_s <= LONG_DEADLINE_S},
    **{f"{k}_short": replace(v, timeout_s=1.0) for k, v in PRESETS.items() if v.timeout_s > LONG_DEADLINE_S},
    "authorizer_only": AUTHORIZER_ONLY,
}


def _fingerprint(path: Path) -> tuple[str, int, tuple[str, ...]]:
    return (
        hashlib.sha256(path.read_bytes()).hexdigest(),
        path.stat().st_mtime_ns,
        tuple(sorted(os.listdir(path.parent))),
    )


@pytest.fixture
def big_db(tmp_path: Path) -> Path:
    """A few thousand rows in ``events`` so a cross join is a runaway."""
    return make_school_db(tmp_path / "big.sqlite", extra_rows=3000)


@pytest.mark.parametrize("preset", sorted(LIMITS))
def test_hostile_battery_changes_nothing(big_db: Path, preset: str) -> None:
    db = get_database(big_db)
    limits = LIMITS[preset]
    before = _fingerprint(big_db)
    for sql, kinds in HOSTILE:
        started = time.monotonic()
        out = execute(db, sql, limits)
        took = time.monotonic() - started
        assert isinstance(out, ToolError), (preset, sql, out)
        assert out.kind in kinds, (preset, sql, out)
        assert out.message
        assert took < limits.timeout_s + 0.5, (preset, sql, took)
    # Non-UTF-8 bytes in a cell are read, not a crash.
    out = execute(db, "SELECT note FROM events WHERE note NOT LIKE 'note%'", limits)
    assert isinstance(out, QueryResult) and out.rows == (("\ufffdA\ufffd",),)
    assert _fingerprint(big_db) == before


def test_runaway_queries_stop_at_the_deadline(big_db: Path) -> None:
    db = get_database(big_db)
    limits = QueryLimits(timeout_s=0.5, max_vm_steps=None)
    for sql in (
        "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT count(*) FROM r",
        "SELECT count(*) FROM events a, events b, events c",
    ):
        started = time.monotonic()
        out = execute(db, sql, limits)
        took = time.monotonic() - started
        assert isinstance(out, ToolError) and out.kind == "timeout", out
        assert 0.5 <= took < 1.0


def test_step_limit_is_reported(big_db: Path) -> None:
    out = execute(get_database(big_db), "SELECT count(*) FROM events a, events b", QueryLimits(max_vm_steps=100_000))
    assert isinstance(out, ToolError) and out.kind == "step_limit"
    assert "100,000" in out.message


def test_row_cap_and_row_count(school_db: Path) -> None:
    db = get_database(school_db)
    out = execute(db, "SELECT * FROM events", PRESETS["retoolsql"])
    assert isinstance(out, QueryResult)
    assert out.row_count == 31 and len(out.rows) == 31 and not out.truncated
    out = execute(db, "SELECT event_id FROM events ORDER BY event_id", QueryLimits(max_rows=5))
    assert isinstance(out, QueryResult)
    assert out.rows == tuple((i,) for i in range(1, 6))
    assert out.row_count == 31 and out.truncated
    assert out.to_json()["truncated"] is True


def test_dualsql_cuts_cells_and_rows_but_not_schema_queries(school_db: Path) -> None:
    db = get_database(school_db)
    long_text = "SELECT printf('%.300c', 'x') AS t"
    out = execute(db, long_text, PRESETS["dualsql"])
    assert isinstance(out, QueryResult)
    assert out.rows[0][0].startswith("x" * 150 + "…[+150 chars]")
    out = execute(db, "SELECT * FROM events", PRESETS["dualsql"])
    assert isinstance(out, QueryResult) and len(out.rows) == 10 and out.truncated and out.row_count == 31
    # Schema queries come back in full: sqlite_master's long CREATE text is not cut.
    out = execute(db, "SELECT sql FROM sqlite_master WHERE type = 'table'", PRESETS["dualsql"])
    assert isinstance(out, QueryResult) and len(out.rows) == 3
    assert any(len(r[0]) > 150 for r in out.rows)
    out = execute(db, "PRAGMA table_info(schools)", PRESETS["dualsql"])
    assert isinstance(out, QueryResult) and [r[1] for r in out.rows] == [
        "id",
        "name",
        "city",
        "enrollment",
        "opened",
        "rate",
        "misc",
    ]


def test_metadata_pragmas_per_preset(school_db: Path) -> None:
    db = get_database(school_db)
    for sql in (
        "PRAGMA table_info(schools)",
        "PRAGMA foreign_key_list(scores)",
        "SELECT name FROM pragma_table_info('schools')",
    ):
        assert isinstance(execute(db, sql, PRESETS["trustsql"]), QueryResult), sql
        refused = execute(db, sql, PRESETS["retoolsql"])
        assert isinstance(refused, ToolError) and refused.kind == "forbidden", sql
    fk = execute(db, "PRAGMA foreign_key_list(scores)", PRESETS["trustsql"])
    assert isinstance(fk, QueryResult) and fk.rows[0][2] == "schools"


def test_state_changing_pragma_refused_even_if_listed() -> None:
    with pytest.raises(ConfigError, match="journal_mode"):
        QueryLimits(allowed_pragmas=frozenset({"journal_mode"}))


@pytest.mark.parametrize(
    ("sql", "kind", "hint"),
    [
        ("SELECT * FROM school", "no_such_table", "'schools'"),
        ("SELECT nme FROM schools", "no_such_column", "'name' (table schools)"),
        ("SELECT s.enrolment FROM schools s", "no_such_column", "'enrollment'"),
        ("SELEC * FROM schools", "syntax", None),
        ("SELECT * FROM schools WHERE", "syntax", None),
        ("", "syntax", None),
        ("SELECT nosuchfunc(1)", "other", "built-in SQLite function"),
        ("SELECT YEAR(opened) FROM schools", "other", "strftime('%Y', col)"),
        ("SELECT name FROM schools, schools AS s2", "other", "qualify the column"),
    ],
)
def test_structured_errors_with_suggestions(school_db: Path, sql: str, kind: str, hint: str | None) -> None:
    out = execute(get_database(school_db), sql, PRESETS["retoolsql"])
    assert isinstance(out, ToolError) and out.kind == kind, out
    if hint:
        assert out.suggestion and hint in out.suggestion
    assert out.to_json()["kind"] == kind


def test_results_keep_types_and_nulls(school_db: Path) -> None:
    out = execute(
        get_database(school_db), "SELECT id, city, enrollment, rate, misc FROM schools ORDER BY id", PRESETS["metric"]
    )
    assert isinstance(out, QueryResult)
    assert out.rows[2] == (3, None, "980", None, 7.5)
    assert out.rows[4][4] == b"\x00\x01"
    js = out.to_json()
    assert js["rows"][4][4].startswith("<blob 2 bytes")
    assert js["columns"] == ["id", "city", "enrollment", "rate", "misc"]


def test_trailing_semicolons_and_comments_are_one_statement(school_db: Path) -> None:
    db = get_database(school_db)
    for sql in (
        "SELECT 1;",
        "SELECT 1;;  ",
        "-- comment\nSELECT 1 /* c */ ;",
        "/* lead */ WITH a AS (SELECT 1) SELECT * FROM a",
    ):
        out = execute(db, sql, PRESETS["retoolsql"])
        assert isinstance(out, QueryResult) and out.rows == ((1,),), sql


def test_as_written_runs_the_text_as_pythons_sqlite3_does(school_db: Path) -> None:
    """BIRD's evaluation script's view of a text (``rex.bird_ex``), checked against Python's
    sqlite3 itself on the same file; the read-only guards still hold."""
    db = get_database(school_db)
    raw = sqlite3.connect(school_db)
    for sql in ("", " \n", ";;", "-- only a comment", "SELECT 1;", "SELECT 1; -- c", ";SELECT 1", "SELECT 1 /* open"):
        out = execute(db, sql, PRESETS["metric"], as_written=True)
        assert isinstance(out, QueryResult) and list(out.rows) == raw.execute(sql).fetchall(), sql
    for sql in ("SELECT 1;;", "SELECT 1; ;", "SELECT 1; SELECT 2"):
        with pytest.raises(sqlite3.ProgrammingError, match="one statement at a time"):
            raw.execute(sql)
        out = execute(db, sql, PRESETS["metric"], as_written=True)
        assert isinstance(out, ToolError) and out.kind == "too_many_statements", sql
    with pytest.raises(sqlite3.OperationalError, match="decode"):
        raw.execute("SELECT note FROM events").fetchall()
    out = execute(db, "SELECT note FROM events", PRESETS["metric"], as_written=True)
    assert isinstance(out, ToolError) and "decode" in out.message
    out = execute(db, "DELETE FROM schools", PRESETS["metric"], as_written=True)
    assert isinstance(out, ToolError) and out.kind == "forbidden"
    raw.close()
    # The default (strict) run keeps its rules: empty SQL is an error, a trailing ";;" runs.
    assert execute(db, " ", PRESETS["metric"]).kind == "syntax"  # type: ignore[union-attr]
    assert isinstance(execute(db, "SELECT 1;;", PRESETS["metric"]), QueryResult)


def test_non_string_sql_is_bad_arguments(school_db: Path) -> None:
    out = execute(get_database(school_db), 42, PRESETS["retoolsql"])  # type: ignore[arg-type]
    assert isinstance(out, ToolError) and out.kind == "bad_arguments"


def test_concurrent_threads_never_see_locked(school_db: Path) -> None:
    db = get_database(school_db)
    errors: list[object] = []
    stop = threading.Event()

    def reader() -> None:
        for _ in range(25):
            out = execute(
                db,
                "SELECT count(*), sum(avg_math) FROM scores JOIN schools ON schools.id = scores.school_id",
                PRESETS["retoolsql"],
            )
            if not isinstance(out, QueryResult):
                errors.append(out)

    def writer() -> None:
        # Another process-like writer committing now and then: readers wait, never fail.
        conn = sqlite3.connect(school_db, timeout=5)
        while not stop.is_set():
            conn.execute("INSERT INTO events(schools_id, kind, note) VALUES (1, 'w', 'w')")
            conn.commit()
            time.sleep(0.005)
        conn.close()

    w = threading.Thread(target=writer)
    threads = [threading.Thread(target=reader) for _ in range(32)]
    w.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    w.join()
    assert errors == []


def test_each_thread_has_its_own_connection(school_db: Path) -> None:
    db = get_database(school_db)
    seen: list[int] = []
    t = threading.Thread(target=lambda: seen.append(id(db.connect())))
    t.start()
    t.join()
    assert seen and seen[0] != id(db.connect())


def test_get_database_is_cached_and_hash_tracks_changes(school_db: Path) -> None:
    db = get_database(school_db)
    assert get_database(str(school_db)) is db and isinstance(db, Database)
    assert db.db_id == "schools"
    before = db.content_hash
    conn = sqlite3.connect(school_db)
    conn.execute("INSERT INTO events(kind) VALUES ('new')")
    conn.commit()
    conn.close()
    os.utime(school_db, ns=(time.time_ns(), time.time_ns() + 1_000_000))
    assert db.content_hash != before


def test_bad_paths_raise_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no SQLite database"):
        get_database(tmp_path / "missing.sqlite")
    junk = tmp_path / "junk.sqlite"
    junk.write_text("not a database at all")
    with pytest.raises(DataError, match="not a SQLite 3 database"):
        get_database(junk)


def test_schema_lists_tables_and_columns_in_order(school_db: Path) -> None:
    assert get_database(school_db).schema() == {
        "schools": ["id", "name", "city", "enrollment", "opened", "rate", "misc"],
        "scores": ["score_id", "school_id", "year", "avg_math"],
        "events": ["event_id", "schools_id", "kind", "note"],
    }


def test_cached_statements_keep_their_schema_flag(school_db: Path) -> None:
    db = get_database(school_db)
    for _ in range(3):  # the 2nd and 3rd runs reuse SQLite's prepared statement
        out = execute(db, "SELECT sql FROM sqlite_master WHERE type = 'table'", PRESETS["dualsql"])
        assert isinstance(out, QueryResult) and any(len(r[0]) > 150 for r in out.rows)


def test_connect_directly_is_still_read_only(school_db: Path) -> None:
    conn = get_database(school_db).connect()
    assert conn.execute("SELECT count(*) FROM schools").fetchone() == (6,)
    for sql in ("DELETE FROM schools", "PRAGMA journal_mode = WAL", "ATTACH ':memory:' AS x"):
        with pytest.raises(sqlite3.DatabaseError):
            conn.execute(sql)
