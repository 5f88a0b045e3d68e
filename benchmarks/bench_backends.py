"""The tool layer against each backend's raw driver on the same queries (issue 26: goal <= 1.2x).

Used by ``benchmarks/bench_tools.py`` (parts ``overhead``, ``duckdb``, ``postgres``). The
tool side is the executor tool's own call (``tools.executor_tool.run_sql`` under the default
``QueryLimits``: 100 rows, 5 s deadline, the SQLite VM-step budget); the raw side is the
driver on its own (``sqlite3``; the DuckDB backend's connection with cells converted as the
backend converts them; ``psycopg`` in autocommit on the same server, role and schema).
"""

from __future__ import annotations

import contextlib
import functools
import random
import sqlite3
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

FAMILIES = ("point_lookup", "indexed_filter", "pk_range_aggregate", "full_scan_aggregate")
"""The four query families of ``overhead_queries``, in the order they cycle."""


def overhead_queries(rows: int, n: int, rng: random.Random, cities: list[str]) -> list[str]:
    """``n`` queries, a quarter of each family (``FAMILIES``): point lookup, indexed filter,
    PK range aggregate, full-scan aggregate. Every result has at most 100 rows (the tool's cap)."""
    out: list[str] = []
    for i in range(n):
        kind = i % 4
        if kind == 0:
            out.append(f"SELECT * FROM items WHERE id = {rng.randint(1, rows)}")
        elif kind == 1:
            out.append(
                f"SELECT name, price FROM items WHERE city = '{rng.choice(cities)}' ORDER BY price DESC LIMIT 20"
            )
        elif kind == 2:
            lo = rng.randint(1, max(1, rows - rows // 20))
            out.append(
                f"SELECT category, COUNT(*), AVG(price) FROM items "
                f"WHERE id BETWEEN {lo} AND {lo + rows // 20} GROUP BY category ORDER BY category"
            )
        else:
            out.append(f"SELECT COUNT(*), MAX(price) FROM items WHERE qty = {rng.randint(0, 99)}")
    return out


def best_of(fn: Callable[[], Any], repeat: int) -> float:
    """The fastest of ``repeat`` runs of ``fn``, in seconds."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def compare(
    queries: list[str],
    tool: Callable[[str], Any],
    raw: Callable[[str], list[tuple[Any, ...]]],
    repeat: int,
    extra: dict[str, Callable[[str], Any]] | None = None,
) -> dict[str, Any]:
    """Time ``tool(sql)`` and ``raw(sql)`` (best of ``repeat`` each) on every query after
    checking both return the same rows; a query the tool refuses is counted, not timed.
    ``extra``: more tool-side calls, each reported as its median ratio to raw."""
    from tools import QueryResult

    times: dict[str, list[float]] = {"raw": [], "tool": []}
    families: list[str] = []
    extra_ratios: dict[str, list[float]] = {name: [] for name in extra or {}}
    errors = 0
    for i, sql in enumerate(queries):
        first = tool(sql)
        if not isinstance(first, QueryResult):
            errors += 1
            print(f"  tool error on {sql!r}: {first}", file=sys.stderr)
            continue
        expected = raw(sql)
        # as multisets: ties in an ORDER BY may come back in another order through a cursor
        assert sorted(map(repr, map(tuple, first.rows))) == sorted(map(repr, map(tuple, expected))), sql
        t_raw = best_of(functools.partial(raw, sql), repeat)
        times["raw"].append(t_raw)
        times["tool"].append(best_of(functools.partial(tool, sql), repeat))
        families.append(FAMILIES[i % len(FAMILIES)])
        for name, call in (extra or {}).items():
            extra_ratios[name].append(best_of(functools.partial(call, sql), repeat) / t_raw)
    ratios = [t / r for t, r in zip(times["tool"], times["raw"], strict=True)]
    out: dict[str, Any] = {
        "queries": len(queries),
        "tool_errors": errors,
        "median_ratio": statistics.median(ratios) if ratios else float("nan"),
        "p90_ratio": percentile(ratios, 0.9) if ratios else float("nan"),
        "total_time_ratio": sum(times["tool"]) / sum(times["raw"]) if ratios else float("nan"),
    }
    for name, values in extra_ratios.items():
        out[f"median_ratio_{name}"] = statistics.median(values) if values else float("nan")
    for family in FAMILIES:
        picked = [j for j, f in enumerate(families) if f == family]
        if not picked:
            continue
        raw_s = [times["raw"][j] for j in picked]
        tool_s = [times["tool"][j] for j in picked]
        out[family] = {
            "raw_median_s": statistics.median(raw_s),
            "raw_p90_s": percentile(raw_s, 0.9),
            "tool_median_s": statistics.median(tool_s),
            "tool_p90_s": percentile(tool_s, 0.9),
            "ratio": statistics.median([ratios[j] for j in picked]),
        }
    return out


def bench_sqlite(path: Path, rows: int, n: int, repeat: int) -> dict[str, Any]:
    """The executor tool on a SQLite file vs raw ``sqlite3``, and through the dispatcher
    (``ToolBox.call`` with ReToolSQL's ``sqlite_query``: argument checks and the JSON text)."""
    from tools import QueryLimits, ToolBox, get_database
    from tools.executor_tool import run_sql

    db = get_database(path)
    raw_conn = sqlite3.connect(path)
    cities = [r[0] for r in raw_conn.execute("SELECT DISTINCT city FROM items ORDER BY city LIMIT 200")]
    queries = overhead_queries(rows, n, random.Random(1), cities)
    limits = QueryLimits()
    box = ToolBox(db, ["sqlite_query"])  # ReToolSQL's executor: the design registers it when looked up

    def dispatched(sql: str) -> str:
        return box.call("sqlite_query", {"db_id": db.db_id, "sql": sql}).text

    try:
        return compare(
            queries,
            lambda sql: run_sql(db, sql, limits),
            lambda sql: raw_conn.execute(sql).fetchall(),
            repeat,
            extra={"with_dispatcher_and_json": dispatched},
        )
    finally:
        raw_conn.close()


def bench_duckdb(path: Path, rows: int, n: int, repeat: int, deadline_s: float) -> dict[str, Any]:
    """The executor tool on a DuckDB copy of ``path`` vs the backend's own connection used
    raw (cells converted in both), and how long past its deadline a runaway query returns."""
    from eval.data.duckdb_copy import copy_sqlite_to_duckdb
    from tools import QueryLimits, ToolError, execute, get_database
    from tools.db.duckdb_backend import DuckDBDatabase, to_sqlite_value
    from tools.executor_tool import run_sql

    target = path.with_suffix(".duckdb")
    if target.exists():
        target.unlink()
    start = time.perf_counter()
    copy_sqlite_to_duckdb(path, target)
    copied_s = time.perf_counter() - start
    db = get_database(target)
    assert isinstance(db, DuckDBDatabase)
    cursor = db.cursor()  # the backend's own connection, without the tool layer
    cities = [r[0] for r in cursor.execute("SELECT DISTINCT city FROM items ORDER BY city LIMIT 200").fetchall()]
    queries = overhead_queries(rows, n, random.Random(1), cities)
    limits = QueryLimits()

    def raw(sql: str) -> list[tuple[Any, ...]]:
        return [tuple(map(to_sqlite_value, row)) for row in cursor.execute(sql).fetchall()]

    out = {"copy_s": copied_s, "size_mb": target.stat().st_size / 1e6}
    out |= compare(queries, lambda sql: run_sql(db, sql, limits), raw, repeat)
    overs = []
    for _ in range(3):
        start = time.perf_counter()
        result = execute(
            db, "SELECT count(*) FROM items a, items b, items c, items d", QueryLimits(timeout_s=deadline_s)
        )
        overs.append(1000 * (time.perf_counter() - start - deadline_s))
        assert isinstance(result, ToolError) and result.kind == "timeout", result
    out["runaway_past_deadline_ms_median"] = statistics.median(overs)
    return out


@contextlib.contextmanager
def postgres_admin_dsn(given: str | None) -> Iterator[str]:
    """``given`` (a superuser's DSN), or a private server started for the run and stopped
    after it (``tests/helpers/pg_server.py``: initdb in a temporary folder, a Unix socket)."""
    if given:
        yield given
        return
    from tests.helpers.pg_server import postgres_bindir, start_server

    bindir = postgres_bindir()
    if bindir is None:
        raise SystemExit("--parts postgres: no PostgreSQL server binaries (initdb); install Debian's postgresql")
    server = start_server(bindir)
    try:
        yield server.new_database("bench_tools")
    finally:
        server.stop()


def bench_postgres(path: Path, rows: int, n: int, repeat: int, admin_dsn: str | None) -> dict[str, Any]:
    """The executor tool on a PostgreSQL copy of ``path`` (schema ``items_bench``, read
    through a SELECT-only role) vs raw ``psycopg`` in autocommit as the same role, with the
    same ``search_path``; the copy gets the SQLite file's primary key and city index."""
    import psycopg

    from eval.data.postgres_copy import copy_sqlite_to_postgres, create_reader_role, role_dsn
    from tools import QueryLimits, get_database
    from tools.db.postgres_backend import PostgresDatabase, postgres_locator
    from tools.executor_tool import run_sql

    schema, role = "items_bench", "bench_reader"
    with postgres_admin_dsn(admin_dsn) as dsn:
        start = time.perf_counter()
        with contextlib.closing(psycopg.connect(dsn)) as admin:
            admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            copy_sqlite_to_postgres(path, admin, schema)
            admin.execute(f'ALTER TABLE "{schema}".items ADD PRIMARY KEY (id)')
            admin.execute(f'CREATE INDEX idx_items_city ON "{schema}".items (city)')
            admin.execute(f'ANALYZE "{schema}".items')
            create_reader_role(admin, role, [schema])
            admin.commit()
        copied_s = time.perf_counter() - start
        reader = role_dsn(dsn, role)
        db = get_database(postgres_locator(reader, schema))
        assert isinstance(db, PostgresDatabase)
        raw_conn = psycopg.connect(reader, autocommit=True, options=f"-c search_path={schema}")
        try:
            cities = [r[0] for r in raw_conn.execute("SELECT DISTINCT city FROM items ORDER BY city LIMIT 200")]
            queries = overhead_queries(rows, n, random.Random(1), cities)
            limits = QueryLimits()
            out = {"copy_s": copied_s}
            out |= compare(
                queries, lambda sql: run_sql(db, sql, limits), lambda sql: raw_conn.execute(sql).fetchall(), repeat
            )
        finally:
            raw_conn.close()
            db.close()
    return out


def print_figures(title: str, values: dict[str, Any]) -> None:
    print(f"\n{title}")
    for key, value in values.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k}={v:.3g}" for k, v in value.items())
        elif isinstance(value, float):
            value = f"{value:.3f}"
        print(f"  {key}: {value}")
