"""The PostgreSQL backend on a real server (the session's ``pg_server``): the hostile battery
with PostgreSQL's own attacks, limits, values, schema, fingerprint and the read-only role,
on PostgreSQL copies of the tool tests' SQLite database."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import pq

from eval.data.postgres_copy import copy_sqlite_to_postgres, create_reader_role, role_dsn
from tests.helpers.pg_server import PgServer
from tests.tools.conftest import make_school_db
from tests.tools.db.test_connection import LIMITS
from tools import Backend, QueryLimits, QueryResult, ToolError, execute, get_database
from tools.db.postgres_backend import PostgresDatabase, postgres_locator, qmark_to_format
from tools.errors import DataError

# Each deadline shortened to 0.5 s: PostgreSQL has no step limit, so every runaway runs to its deadline.
SHORT = {name: replace(limits, timeout_s=min(limits.timeout_s, 0.5)) for name, limits in LIMITS.items()}
ROLE = "tools_reader"


@dataclass
class PgData:
    admin: str  # the superuser's DSN of the test database
    reader: str  # the SELECT-only role's DSN
    sqlite: dict[str, Path]  # schema -> the SQLite file it was copied from
    outside: Path  # a folder anyone may write to: a server-side file write would land here


@pytest.fixture(scope="module")
def pg(pg_server: PgServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PgData]:
    """Database ``tools``: the tool tests' database as schema ``school`` and, with a few
    thousand events, as ``big``; a sequence and a table the reader may not use."""
    folder = tmp_path_factory.mktemp("pg")
    files = {
        "school": make_school_db(folder / "school.sqlite"),
        "big": make_school_db(folder / "big.sqlite", extra_rows=3000),
    }
    admin = pg_server.new_database("tools")
    with psycopg.connect(admin) as conn:
        for schema, path in files.items():
            copy_sqlite_to_postgres(path, conn, schema)
        conn.execute("CREATE SEQUENCE big.counter")
        conn.execute("CREATE TABLE public.secret (x text)")
        conn.execute("INSERT INTO public.secret VALUES ('hidden')")
        create_reader_role(conn, ROLE, files)
    outside = Path(tempfile.mkdtemp(prefix="pg-out-"))
    outside.chmod(0o777)
    try:
        yield PgData(admin, role_dsn(admin, ROLE), files, outside)
    finally:
        for entry in outside.iterdir():
            entry.unlink()
        outside.rmdir()


def open_db(data: PgData, schema: str) -> Backend:
    return get_database(postgres_locator(data.reader, schema))


def pg_hostile(folder: Path) -> list[tuple[str, set[str]]]:
    """SQL that must not succeed through the reader role; paths point into ``folder``."""
    return [
        ("INSERT INTO schools(id, name) VALUES (99, 'x')", {"forbidden"}),
        ("UPDATE schools SET name = 'x'", {"forbidden"}),
        ("DELETE FROM schools", {"forbidden"}),
        ("DROP TABLE schools", {"forbidden"}),
        ("TRUNCATE schools", {"forbidden"}),
        ("CREATE TABLE t(a int)", {"forbidden"}),
        ("CREATE TEMP TABLE t AS SELECT 1 AS a", {"forbidden"}),
        ("ALTER TABLE schools ADD COLUMN x int", {"forbidden"}),
        ("WITH x AS (DELETE FROM schools RETURNING *) SELECT * FROM x", {"forbidden"}),
        ("SELECT * FROM schools FOR UPDATE", {"forbidden"}),
        ("SELECT * INTO copied FROM schools", {"forbidden", "syntax", "other"}),
        (f"COPY schools TO PROGRAM 'touch {folder}/program'", {"forbidden"}),
        (f"COPY schools TO '{folder}/out.csv'", {"forbidden"}),
        (f"COPY (SELECT 1) TO '{folder}/one.csv'", {"forbidden"}),
        ("COPY schools FROM '/etc/hostname'", {"forbidden"}),
        ("SELECT pg_read_file('/etc/passwd')", {"forbidden"}),
        ("SELECT pg_read_binary_file('/etc/passwd')", {"forbidden"}),
        ("SELECT * FROM pg_ls_dir('.')", {"forbidden"}),
        ("SELECT lo_import('/etc/passwd')", {"forbidden"}),
        ("SELECT lo_from_bytea(0, 'x')", {"forbidden"}),
        (f"SELECT lo_export(1, '{folder}/lo')", {"forbidden"}),
        ("SELECT * FROM dblink('dbname=postgres', 'DROP TABLE big.schools') AS t(a text)", {"forbidden"}),
        ("SET ROLE tester", {"forbidden"}),
        ("SET SESSION AUTHORIZATION tester", {"forbidden"}),
        ("SELECT set_config('statement_timeout', '0', false)", {"forbidden"}),
        ("SELECT pg_catalog.\"set_config\"('search_path', 'public', false)", {"forbidden"}),
        ("SET statement_timeout = 0", {"forbidden"}),
        ("RESET ALL", {"forbidden"}),
        ("SELECT query_to_xml('DELETE FROM schools RETURNING 1', true, true, '')", {"forbidden"}),
        ("SELECT pg_terminate_backend(pid) FROM pg_stat_activity", {"forbidden"}),
        ("SELECT pg_cancel_backend(pg_backend_pid())", {"forbidden"}),
        ("SELECT pg_advisory_lock(1)", {"forbidden"}),
        ("SELECT U&\"set\\0063onfig\"('a.b', 'c', false)", {"forbidden"}),
        ("SELECT set_config /* a comment */ ('a.b', 'c', false)", {"forbidden"}),
        ("SELECT nextval('counter')", {"forbidden"}),
        ("SELECT setval('counter', 99)", {"forbidden"}),
        ("SELECT * FROM public.secret", {"forbidden"}),
        ("SELECT * FROM pg_authid", {"forbidden"}),
        ("DO $$BEGIN DELETE FROM schools; END$$", {"forbidden"}),
        ("CALL nothing()", {"forbidden"}),
        ("PREPARE p AS DELETE FROM schools", {"forbidden"}),
        ("LISTEN channel", {"forbidden"}),
        ("LOCK TABLE schools", {"forbidden"}),
        ("BEGIN", {"forbidden"}),
        ("COMMIT", {"forbidden"}),
        ("EXPLAIN ANALYZE DELETE FROM schools", {"forbidden"}),
        ("GRANT SELECT ON public.secret TO PUBLIC", {"forbidden"}),
        ("SELECT 1; DROP TABLE schools", {"too_many_statements", "forbidden"}),
        ("SELECT 1; SELECT 2", {"too_many_statements"}),
        ("SELECT pg_sleep(30)", {"timeout"}),
        ("SELECT count(*) FROM events a, events b, events c, events d", {"timeout"}),
        ("SELECT count(*) FROM generate_series(1, 10000000000)", {"timeout"}),
    ]


def content_dump(admin: str) -> dict[str, object]:
    """Every table's rows (each schema but the catalogue's), the relations, roles and large objects."""
    with contextlib.closing(psycopg.connect(admin, autocommit=True)) as conn:
        tables = conn.execute(
            "SELECT schemaname, tablename FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', 'information_schema') "
            "ORDER BY 1, 2"
        ).fetchall()
        dump: dict[str, object] = {
            f"{s}.{t}": conn.execute(
                f"SELECT md5(coalesce(string_agg(x::text, '|' ORDER BY x::text), '')) FROM \"{s}\".\"{t}\" x"
            ).fetchone()
            for s, t in tables
        }
        dump["relations"] = conn.execute(
            "SELECT n.nspname, c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast') ORDER BY 1, 2"
        ).fetchall()
        dump["roles"] = conn.execute("SELECT rolname, rolsuper, rolcanlogin FROM pg_roles ORDER BY 1").fetchall()
        dump["large_objects"] = conn.execute("SELECT count(*) FROM pg_largeobject_metadata").fetchone()
        dump["counter"] = conn.execute("SELECT last_value, is_called FROM big.counter").fetchone()
        dump["sessions"] = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE usename = %s", (ROLE,)).fetchone()
    return dump


@pytest.mark.slow
def test_hostile_battery_changes_nothing_on_postgres(pg: PgData) -> None:
    db = open_db(pg, "big")
    assert isinstance(db, PostgresDatabase)
    assert isinstance(execute(db, "SELECT 1", QueryLimits()), QueryResult)  # the session to keep alive
    before = content_dump(pg.admin)
    for preset in sorted(SHORT):
        for sql, kinds in pg_hostile(pg.outside):
            # the 0.5 s deadline only where a timeout is the answer: a refusal must not race it on a loaded machine
            limits = SHORT[preset] if "timeout" in kinds else LIMITS[preset]
            out = execute(db, sql, limits)
            assert isinstance(out, ToolError), (preset, sql, out)
            assert out.kind in kinds, (preset, sql, out)
            assert out.message
            if "timeout" not in kinds:  # as an official evaluation runs a text: no trimming, same guards
                assert isinstance(execute(db, sql, limits, as_written=True), ToolError), (preset, sql)
    settings = execute(
        db,
        "SELECT current_user, current_setting('transaction_read_only'), current_setting('search_path')",
        QueryLimits(),
    )
    assert isinstance(settings, QueryResult) and settings.rows == ((ROLE, "on", '"big"'),)
    assert content_dump(pg.admin) == before
    assert list(pg.outside.iterdir()) == []


def test_runaway_stops_at_the_deadline_and_the_connection_is_reused(pg: PgData) -> None:
    db = open_db(pg, "big")
    for sql in ("SELECT pg_sleep(5)", "SELECT count(*) FROM events a, events b, events c, events d"):
        started = time.monotonic()
        out = execute(db, sql, QueryLimits(timeout_s=0.5))
        took = time.monotonic() - started
        assert isinstance(out, ToolError) and out.kind == "timeout", (sql, out)
        assert 0.4 <= took < 1.5, (sql, took)
    after = execute(db, "SELECT count(*) FROM schools", QueryLimits())
    assert isinstance(after, QueryResult) and after.rows == ((6,),)


def test_failed_queries_come_back_as_tool_errors_without_a_console_warning(
    pg: PgData, caplog: pytest.LogCaptureFixture
) -> None:
    """A query that fails on the server (at parse, at plan, mid-run, at the deadline) is the
    model's tool error, and psycopg's "error ignored terminating <Pipeline>" stays off the log."""
    db = open_db(pg, "school")
    failing = {
        "SELEC 1": "syntax",
        "SELECT nope FROM schools": "schema",
        "SELECT 1 / (count(*) - count(*)) FROM schools": "runtime",
        "SELECT pg_sleep(5)": "timeout",
    }
    with caplog.at_level(logging.DEBUG):
        for sql, kind in failing.items():
            out = execute(db, sql, QueryLimits(timeout_s=0.5))
            assert isinstance(out, ToolError) and out.message, (sql, kind, out)
            capped = execute(db, sql, replace(QueryLimits(timeout_s=0.5), max_rows=1))
            assert isinstance(capped, ToolError), (sql, kind, capped)
    assert [
        r.getMessage() for r in caplog.records if r.name.startswith("psycopg") and r.levelno >= logging.WARNING
    ] == []
    after = execute(db, "SELECT count(*) FROM schools", QueryLimits())
    assert isinstance(after, QueryResult) and after.rows == ((6,),)


def test_a_session_the_server_ended_is_replaced(pg: PgData, monkeypatch: pytest.MonkeyPatch) -> None:
    db = open_db(pg, "school")
    assert isinstance(execute(db, "SELECT 1", QueryLimits()), QueryResult)
    tries: list[object] = []
    run_on = PostgresDatabase._run_on

    def recorded(*args: Any) -> object:
        tries.append(run_on(*args))
        return tries[-1]

    monkeypatch.setattr(PostgresDatabase, "_run_on", recorded)
    with contextlib.closing(psycopg.connect(pg.admin, autocommit=True)) as admin:
        ended = admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE usename = %s", (ROLE,)
        ).fetchone()
    assert ended and ended[0] >= 1
    out = execute(db, "SELECT count(*) FROM schools", QueryLimits())
    assert isinstance(out, QueryResult) and out.rows == ((6,),), out
    # The dead session's error (AdminShutdown), then the same query on a fresh session.
    assert len(tries) == 2 and isinstance(tries[0], psycopg.OperationalError) and tries[1] == out


def test_generate_series_explosion_meets_the_row_cap_and_the_result_budget(pg: PgData) -> None:
    db = open_db(pg, "big")
    capped = execute(db, "SELECT * FROM generate_series(1, 200000) AS g", QueryLimits(max_rows=3))
    assert isinstance(capped, QueryResult)
    assert capped.rows == ((1,), (2,), (3,)) and capped.row_count == 200_000 and capped.truncated
    budget = QueryLimits(max_rows=None, max_result_rows=5000, timeout_s=10)
    # In the select list the series streams (in FROM, PostgreSQL stores it whole first: a timeout).
    for sql in ("SELECT generate_series(1, 100000000)", "SELECT * FROM events a, events b"):
        started = time.monotonic()
        out = execute(db, sql, budget)
        assert isinstance(out, ToolError) and out.kind == "too_large", (sql, out)
        assert "max_result_rows" in out.message and time.monotonic() - started < 5


def test_rows_cells_and_budget_match_sqlite(pg: PgData) -> None:
    lite = get_database(pg.sqlite["school"])
    post = open_db(pg, "school")
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
            a, b = execute(lite, sql, limits), execute(post, sql, limits)
            if isinstance(a, QueryResult):
                assert isinstance(b, QueryResult), (sql, limits, b)
                assert (a.rows, a.row_count, a.truncated) == (b.rows, b.row_count, b.truncated), (sql, limits)
            else:
                assert isinstance(b, ToolError) and (a.kind, a.message) == (b.kind, b.message), (sql, limits)


def test_values_come_back_as_sqlite_would_return_them(pg: PgData) -> None:
    out = execute(
        open_db(pg, "school"),
        "SELECT 1.5 AS d, true AS b, DATE '2020-01-02' AS day, TIMESTAMP '2020-01-02 03:04:05' AS ts, "
        "SUM(x) AS s, 7 / 2.0 AS q, ARRAY[1, 2] AS l, '{\"a\": 1}'::jsonb AS j, '\\x00ff'::bytea AS raw, "
        "'100%' AS pct, NULL AS n FROM (VALUES (1::bigint), (2::bigint)) AS v(x)",
        QueryLimits(),
    )
    assert isinstance(out, QueryResult), out
    assert out.rows == (
        (1.5, 1, "2020-01-02", "2020-01-02 03:04:05", 3, 3.5, "[1, 2]", '{"a": 1}', b"\x00\xff", "100%", None),
    )
    assert [type(v) for v in out.rows[0][:2]] + [type(out.rows[0][4])] == [float, int, int]


def test_schema_errors_fingerprint_and_profile(pg: PgData) -> None:
    db = open_db(pg, "school")
    assert isinstance(db, Backend) and db.dialect == "postgres" and db.db_id == "school"
    assert db.schema() == get_database(pg.sqlite["school"]).schema()
    assert get_database(db.locator) is db
    assert len(db.content_hash) == 64 and db.content_hash == db.content_hash
    missing = execute(db, "SELECT * FROM shcools", QueryLimits())
    assert isinstance(missing, ToolError) and missing.kind == "no_such_table"
    assert "schools" in (missing.suggestion or "")
    column = execute(db, "SELECT nme FROM schools", QueryLimits())
    assert isinstance(column, ToolError) and column.kind == "no_such_column"
    syntax = execute(db, "SELEC 1", QueryLimits())
    assert isinstance(syntax, ToolError) and syntax.kind == "syntax"
    assert db.query_internal("SELECT count(*) FROM scores WHERE year = ? AND 'a?' <> '%'", [2015]) == [(8,)]
    lite_profile = get_database(pg.sqlite["school"]).profile()
    profile = db.profile()
    assert [t.name for t in profile.tables] == [t.name for t in lite_profile.tables]
    for ours, theirs in zip(profile.tables, lite_profile.tables, strict=True):
        assert ours.row_count == theirs.row_count
        # A column mixing text, numbers and blobs in SQLite is text in the copy (eval.data.postgres_copy).
        plain = {c.name for c in theirs.columns if len(c.storage) <= 1}
        assert len(plain) >= len(theirs.columns) - 1
        assert [(c.name, c.non_null, c.distinct, c.min, c.max, c.avg) for c in ours.columns if c.name in plain] == [
            (c.name, c.non_null, c.distinct, c.min, c.max, c.avg) for c in theirs.columns if c.name in plain
        ], ours.name


def test_fingerprint_follows_the_content(pg: PgData) -> None:
    with psycopg.connect(pg.admin) as conn:
        conn.execute("CREATE SCHEMA moving")
        conn.execute("CREATE TABLE moving.t (a bigint)")
        create_reader_role(conn, ROLE, ["moving"])
    db = open_db(pg, "moving")
    before = db.content_hash
    with psycopg.connect(pg.admin) as conn:
        conn.execute("INSERT INTO moving.t VALUES (1)")
        conn.execute("SELECT pg_stat_force_next_flush()")
    deadline = time.monotonic() + 5
    while db.content_hash == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert db.content_hash != before


def test_only_a_read_only_role_and_an_existing_schema_connect(pg: PgData) -> None:
    with pytest.raises(DataError, match="superuser"):
        PostgresDatabase(postgres_locator(pg.admin, "school")).connection()
    with pytest.raises(DataError, match="no schema 'nowhere'"):
        PostgresDatabase(postgres_locator(pg.reader, "nowhere")).connection()
    with pytest.raises(DataError, match="not a PostgreSQL URI"):
        postgres_locator("/data/bench.sqlite", "school")
    bad = execute(PostgresDatabase(postgres_locator(pg.admin, "school")), "SELECT 1", QueryLimits())
    assert isinstance(bad, ToolError) and "superuser" in bad.message
    assert qmark_to_format("a = ? AND b LIKE '%?'") == "a = %s AND b LIKE '%%?'"


def test_each_thread_has_its_own_connection(pg: PgData) -> None:
    db = open_db(pg, "school")
    assert isinstance(db, PostgresDatabase)
    seen: list[object] = []
    results: list[object] = []

    def work() -> None:
        seen.append(db.connection())
        results.append(execute(db, "SELECT count(*) FROM events", QueryLimits()))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(c) for c in seen}) == 4
    assert all(isinstance(r, QueryResult) and r.rows == ((31,),) for r in results), results


def test_server_runs_as_an_unprivileged_user(pg_server: PgServer) -> None:
    owner = pg_server.data.stat().st_uid
    assert owner != 0 or os.geteuid() != 0


def round_trips(db: PostgresDatabase, sql: str, limits: QueryLimits) -> tuple[object, list[list[str]]]:
    """``execute``'s answer and the statements sent in each round trip (libpq's protocol trace:
    a round trip ends at the server's ReadyForQuery)."""
    conn = db.connection()
    with tempfile.TemporaryFile("w+") as trace:
        conn.pgconn.trace(trace.fileno())
        conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        try:
            out = execute(db, sql, limits)
        finally:
            conn.pgconn.untrace()
        trace.seek(0)
        lines = trace.read().splitlines()
    trips: list[list[str]] = [[]]
    for line in lines:
        fields = line.split("\t")
        if fields[0] == "F" and fields[2] in ("Parse", "Query"):
            trips[-1].append(re.findall(r'"((?:[^"]|"")*)"', fields[3])[-1])
        elif fields[0] == "B" and fields[2] == "ReadyForQuery":
            trips.append([])
    assert conn.info.transaction_status == pq.TransactionStatus.IDLE  # every run ends its transaction
    return out, trips[:-1]


def test_a_capped_query_takes_one_round_trip_with_its_guards(pg: PgData) -> None:
    db = open_db(pg, "big")
    assert isinstance(db, PostgresDatabase)
    opening = [
        "BEGIN READ ONLY",
        "SELECT set_config('statement_timeout', $1, true), set_config('cursor_tuple_fraction', '1', true)",
        "DECLARE tool_rows NO SCROLL CURSOR FOR SELECT event_id FROM events",
    ]
    ending = ["MOVE FORWARD ALL IN tool_rows", "ROLLBACK"]
    out, trips = round_trips(db, "SELECT event_id FROM events", QueryLimits())
    assert isinstance(out, QueryResult) and len(out.rows) == 100 and out.row_count > 3000
    assert trips == [[*opening, "FETCH FORWARD 101 FROM tool_rows", *ending]]
    # A failing query: the server skips what follows it, then the run's own rollback ends it.
    # Whether the count and rollback were queued behind it depends on how fast the error comes
    # back (psycopg stops queueing into an aborted pipeline): either way nothing ran after it.
    out, trips = round_trips(db, "SELECT nme FROM schools", QueryLimits())
    assert isinstance(out, ToolError) and out.kind == "no_such_column"
    failing = [*opening[:2], "DECLARE tool_rows NO SCROLL CURSOR FOR SELECT nme FROM schools"]
    assert len(trips) == 2 and trips[1] == ["ROLLBACK"]
    assert trips[0] in (
        [*failing, "FETCH FORWARD 101 FROM tool_rows"],
        [*failing, "FETCH FORWARD 101 FROM tool_rows", *ending],
    )
    # Under a result budget the rows come in chunks, stopped at the budget: a first chunk
    # short of its size is the whole result, then the rollback.
    budget = QueryLimits(max_rows=None, max_result_rows=5000)
    out, trips = round_trips(db, "SELECT event_id FROM events", budget)
    assert isinstance(out, QueryResult) and out.row_count > 3000 and len(out.rows) == out.row_count
    fetches = ["FETCH FORWARD 1024 FROM tool_rows"] * (out.row_count // 1024)
    assert trips == [
        [*opening, fetches[0]],
        *[[f] for f in fetches[1:]],
        ["FETCH FORWARD 1024 FROM tool_rows"],
        ["ROLLBACK"],
    ]


def test_rows_past_the_cap_counted_past_the_deadline_are_a_lower_bound(pg: PgData) -> None:
    # The first 100 rows come after about 0.1 s, the count of the rest meets the watchdog.
    sql = "SELECT g, pg_sleep(0.001) FROM generate_series(1, 1000000) AS g"
    out = execute(open_db(pg, "big"), sql, QueryLimits(timeout_s=0.5))
    assert isinstance(out, QueryResult), out
    assert len(out.rows) == 100 and out.truncated and out.row_count_is_lower_bound and out.row_count >= 101


def test_each_run_has_its_read_only_transaction_and_timeout_and_leaves_the_session_as_it_was(pg: PgData) -> None:
    db = open_db(pg, "school")
    assert isinstance(db, PostgresDatabase)
    settings = ", ".join(
        f"current_setting('{name}')" for name in ("transaction_read_only", "statement_timeout", "cursor_tuple_fraction")
    )
    out = execute(db, f"SELECT {settings}", QueryLimits(timeout_s=0.5))
    assert isinstance(out, QueryResult), out
    read_only, timeout, fraction = out.rows[0]
    assert read_only == "on" and fraction == "1"
    assert timeout.endswith("ms") and 300 <= int(timeout[:-2]) <= 500  # the time left of the 0.5 s deadline
    session = db.connection().execute(f"SELECT {settings}, current_setting('default_transaction_read_only')")
    assert session.fetchone() == ("on", "0", "0.1", "on")  # the run's settings were local to its transaction
    with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):  # even a statement sent outside a run
        db.connection().execute("CREATE TEMP TABLE scratch (a int)")


@pytest.mark.parametrize("total", [0, 99, 100, 101, 102, 1024, 1025, 2500])
def test_row_counts_across_the_cap_and_the_fetch_chunks(pg: PgData, total: int) -> None:
    db = open_db(pg, "school")
    sql = f"SELECT g, 'row ' || g FROM generate_series(1, {total}) AS g"
    capped = execute(db, sql, QueryLimits(max_rows=100))
    assert isinstance(capped, QueryResult)
    assert capped.row_count == total and capped.rows == tuple((g, f"row {g}") for g in range(1, min(total, 100) + 1))
    whole = execute(db, sql, QueryLimits(max_rows=None, max_result_rows=5000))
    assert isinstance(whole, QueryResult) and [r[0] for r in whole.rows] == list(range(1, total + 1))
    assert db.query_internal(f"SELECT g FROM generate_series(1, {total * 10}) AS g") == [
        (g,) for g in range(1, total * 10 + 1)
    ]
