"""Benchmark of the tool layer; prints figures (ratios against a baseline run here).

1. Tool overhead: ``sqlite_query`` vs raw ``sqlite3`` on the same 100 queries over a
   database with a ``--rows``-row table: median per-query time ratio (aim <= 1.15x).
2. BM25 value search on the table's text column (~``--rows`` distinct values), for both
   engines (bm25s; FTS5 prefilter + rank-bm25 BM25Okapi): index build time, cache load
   time and speed-up vs a rebuild (aim >= 10x), first search after build / after load,
   and cached search latency p50/p99 (aim p50 < 50 ms). ``--rank-bm25`` adds plain
   rank-bm25 (every document scored per query) as the baseline (131 ms median for a 2-term
   query over 1M values on 2 cores).
3. Runaway query: how long after the deadline a never-ending query returns (aim < 100 ms).
4. DuckDB (``--parts duckdb``): the same table copied into a ``.duckdb`` file; the tool on
   the DuckDB backend vs the same DuckDB connection used raw, on the same queries (issue
   26's goal <= 1.2x), and how long after the deadline ``interrupt()`` stops a runaway.

    python benchmarks/bench_tools.py                 # full size: 1,000,000 rows
    python benchmarks/bench_tools.py --rows 50000    # quick run
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def make_database(path: Path, rows: int, seed: int = 0) -> list[str]:
    """``items(id, name, city, category, price, qty, created)``; ``name`` holds 2-3 words
    from a 30k-word synthetic vocabulary (almost all names distinct). Returns the vocabulary."""
    rng = random.Random(seed)
    syllables = ["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "pa", "qui", "ber", "dan", "fel", "gor", "hal"]
    vocab = sorted({"".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))) for _ in range(40_000)})[:30_000]
    cities = [f"{rng.choice(vocab).title()} City" for _ in range(500)]
    categories = [f"cat{i:02d}" for i in range(40)]
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, city TEXT, category TEXT, "
        "price REAL, qty INTEGER, created TEXT)"
    )
    batch = []
    for i in range(1, rows + 1):
        name = " ".join(rng.choice(vocab) for _ in range(rng.randint(2, 3))).title()
        batch.append(
            (
                i,
                name,
                rng.choice(cities),
                rng.choice(categories),
                round(rng.uniform(1, 500), 2),
                rng.randint(0, 99),
                f"20{rng.randint(10, 23)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
            )
        )
        if len(batch) == 50_000:
            conn.executemany("INSERT INTO items VALUES (?,?,?,?,?,?,?)", batch)
            batch.clear()
    conn.executemany("INSERT INTO items VALUES (?,?,?,?,?,?,?)", batch)
    conn.execute("CREATE INDEX idx_items_city ON items(city)")
    conn.commit()
    conn.close()
    return vocab


def overhead_queries(rows: int, n: int, rng: random.Random, cities: list[str]) -> list[str]:
    """``n`` queries, a quarter of each kind: point lookup, indexed filter, PK range
    aggregate, full-scan aggregate. Every result has at most 100 rows (the tool's cap)."""
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
                f"WHERE id BETWEEN {lo} AND {lo + rows // 20} GROUP BY category"
            )
        else:
            out.append(f"SELECT COUNT(*), MAX(price) FROM items WHERE qty = {rng.randint(0, 99)}")
    return out


def _best_of(fn: Callable[[], Any], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def bench_overhead(path: Path, rows: int, n: int, repeat: int) -> dict[str, Any]:
    from tools.sql_tools import sqlite_query

    from tools import ToolBox, get_database
    from tools.db.results import QueryResult

    db = get_database(path)
    raw = sqlite3.connect(path)
    cities = [r[0] for r in raw.execute("SELECT DISTINCT city FROM items LIMIT 200")]
    queries = overhead_queries(rows, n, random.Random(1), cities)
    box = ToolBox(db, ["sqlite_query"])
    ratios, dispatch_ratios, raw_times, tool_times, errors = [], [], [], [], 0
    for sql in queries:
        first = sqlite_query(db, sql)
        if not isinstance(first, QueryResult):
            errors += 1
            print(f"  tool error on {sql!r}: {first}", file=sys.stderr)
            continue
        assert [tuple(r) for r in raw.execute(sql).fetchall()] == list(first.rows)
        t_raw = _best_of(lambda sql=sql: raw.execute(sql).fetchall(), repeat)
        t_tool = _best_of(lambda sql=sql: sqlite_query(db, sql), repeat)
        t_box = _best_of(lambda sql=sql: box.call("sqlite_query", {"db_id": db.db_id, "sql": sql}).text, repeat)
        raw_times.append(t_raw)
        tool_times.append(t_tool)
        ratios.append(t_tool / t_raw)
        dispatch_ratios.append(t_box / t_raw)
    by_kind = {
        name: statistics.median(ratios[i::4])
        for i, name in enumerate(["point_lookup", "indexed_filter", "pk_range_aggregate", "full_scan_aggregate"])
        if ratios[i::4]
    }
    return {
        "queries": len(queries),
        "tool_errors": errors,
        "median_ratio": statistics.median(ratios),
        "p90_ratio": sorted(ratios)[int(0.9 * (len(ratios) - 1))],
        "total_time_ratio": sum(tool_times) / sum(raw_times),
        "median_ratio_with_dispatcher_and_json": statistics.median(dispatch_ratios),
        "median_ratio_by_kind": by_kind,
        "median_raw_ms_by_kind": {name: 1000 * statistics.median(raw_times[i::4]) for i, name in enumerate(by_kind)},
    }


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def search_queries(vocab: list[str], n: int, rng: random.Random) -> list[str]:
    """Mostly 1-2 word queries; every fifth a word fragment (substring matcher only)."""
    out = []
    for i in range(n):
        if i % 5 == 4:
            word = rng.choice(vocab)
            out.append(word[1:-1] if len(word) > 4 else word)
        else:
            out.append(" ".join(rng.choice(vocab) for _ in range(rng.randint(1, 2))))
    return out


def bench_bm25(path: Path, engine: str, queries: list[str]) -> dict[str, Any]:
    from tools.db.connection import Database
    from tools.explore import bm25

    db = Database(path)
    bm25._MEMORY.clear()
    start = time.perf_counter()
    first = bm25.bm25_search_sqlite(db, "items", "name", queries[0], engine=engine)
    build_plus_first = time.perf_counter() - start
    start = time.perf_counter()
    bm25.bm25_search_sqlite(db, "items", "name", queries[1], engine=engine)
    second = time.perf_counter() - start
    folder = bm25.index_folder(db, "items", "name", engine)
    size_mb = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 1e6

    bm25._MEMORY.clear()  # a restarted process: the index comes from disk
    start = time.perf_counter()
    bm25.bm25_search_sqlite(Database(path), "items", "name", queries[2], engine=engine)
    load_plus_first = time.perf_counter() - start

    latencies = []
    for q in queries:
        start = time.perf_counter()
        out = bm25.bm25_search_sqlite(db, "items", "name", q, engine=engine)
        latencies.append(time.perf_counter() - start)
        assert not hasattr(out, "kind"), out
    return {
        "engine": engine,
        "distinct_values": first["distinct_values"],  # type: ignore[index]
        "cold_build_and_first_search_s": build_plus_first,
        "cold_load_and_first_search_s": load_plus_first,
        "cache_load_speedup_vs_rebuild": build_plus_first / load_plus_first,
        "index_size_mb": size_mb,
        "search_after_build_ms": 1000 * second,
        "cached_search_p50_ms": 1000 * statistics.median(latencies),
        "cached_search_p99_ms": 1000 * _percentile(latencies, 0.99),
        "searches": len(latencies),
    }


def bench_rank_bm25(path: Path, queries: list[str]) -> dict[str, Any]:
    """Plain rank-bm25 (the baseline): BM25Okapi over every value, per query."""
    from rank_bm25 import BM25Okapi

    from tools.explore.bm25 import tokenize

    values = [r[0] for r in sqlite3.connect(path).execute("SELECT DISTINCT name FROM items WHERE name IS NOT NULL")]
    start = time.perf_counter()
    okapi = BM25Okapi([tokenize(v) or [""] for v in values])
    build = time.perf_counter() - start
    latencies = []
    for q in queries[:30]:
        start = time.perf_counter()
        scores = okapi.get_scores(tokenize(q))
        scores.argsort()[-10:]
        latencies.append(time.perf_counter() - start)
    return {
        "engine": "rank-bm25 (all documents)",
        "build_s": build,
        "search_p50_ms": 1000 * statistics.median(latencies),
    }


def bench_runaway(path: Path, deadline_s: float, repeats: int) -> dict[str, Any]:
    from tools import QueryLimits, ToolError, execute, get_database

    db = get_database(path)
    limits = QueryLimits(timeout_s=deadline_s, max_vm_steps=None)
    cases = {
        "recursive_cte": "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT count(*) FROM r",
        "cartesian_product": "SELECT count(*) FROM items a, items b",
        "sort_of_cross_join": "SELECT a.name FROM items a, items b ORDER BY a.name || b.name LIMIT 1",
    }
    out: dict[str, Any] = {"deadline_s": deadline_s}
    for name, sql in cases.items():
        overs = []
        for _ in range(repeats):
            start = time.perf_counter()
            result = execute(db, sql, limits)
            elapsed = time.perf_counter() - start
            assert isinstance(result, ToolError) and result.kind == "timeout", result
            overs.append(1000 * (elapsed - deadline_s))
        out[f"{name}_past_deadline_ms_median"] = statistics.median(overs)
        out[f"{name}_past_deadline_ms_max"] = max(overs)
    return out


def _raw_duckdb(cursor: Any, sql: str, convert: Callable[[Any], Any]) -> list[tuple[Any, ...]]:
    """The rows of ``sql`` on a DuckDB connection, cells converted as the backend converts them."""
    return [tuple(map(convert, row)) for row in cursor.execute(sql).fetchall()]


def bench_duckdb(path: Path, rows: int, n: int, repeat: int, deadline_s: float) -> dict[str, Any]:
    from eval.data.duckdb_copy import copy_sqlite_to_duckdb
    from tools import QueryLimits, QueryResult, ToolError, execute, get_database
    from tools.db.duckdb_backend import DuckDBDatabase, to_sqlite_value

    target = path.with_suffix(".duckdb")
    if target.exists():
        target.unlink()
    start = time.perf_counter()
    copy_sqlite_to_duckdb(path, target)
    copied_s = time.perf_counter() - start
    db = get_database(target)
    assert isinstance(db, DuckDBDatabase)
    raw = db.cursor()  # the backend's own connection, without the tool layer
    cities = [r[0] for r in raw.execute("SELECT DISTINCT city FROM items ORDER BY city LIMIT 200").fetchall()]
    queries = overhead_queries(rows, n, random.Random(1), cities)
    limits = QueryLimits()
    ratios, raw_times, errors = [], [], 0
    for sql in queries:
        first = execute(db, sql, limits)
        if not isinstance(first, QueryResult):
            errors += 1
            print(f"  tool error on {sql!r}: {first}", file=sys.stderr)
            continue
        assert len(first.rows) == len(raw.execute(sql).fetchall())
        t_raw = _best_of(functools.partial(_raw_duckdb, raw, sql, to_sqlite_value), repeat)
        t_tool = _best_of(functools.partial(execute, db, sql, limits), repeat)
        raw_times.append(t_raw)
        ratios.append(t_tool / t_raw)
    overs = []
    for _ in range(3):
        start = time.perf_counter()
        result = execute(db, "SELECT count(*) FROM items a, items b, items c", QueryLimits(timeout_s=deadline_s))
        overs.append(1000 * (time.perf_counter() - start - deadline_s))
        assert isinstance(result, ToolError) and result.kind == "timeout", result
    return {
        "copy_s": copied_s,
        "size_mb": target.stat().st_size / 1e6,
        "queries": len(queries),
        "tool_errors": errors,
        "median_ratio": statistics.median(ratios) if ratios else float("nan"),
        "p90_ratio": sorted(ratios)[int(0.9 * (len(ratios) - 1))] if ratios else float("nan"),
        "median_ratio_by_kind": {
            name: statistics.median(ratios[i::4])
            for i, name in enumerate(["point_lookup", "indexed_filter", "pk_range_aggregate", "full_scan_aggregate"])
            if not errors and ratios[i::4]
        },
        "median_raw_ms_by_kind": {
            name: 1000 * statistics.median(raw_times[i::4])
            for i, name in enumerate(["point_lookup", "indexed_filter", "pk_range_aggregate", "full_scan_aggregate"])
            if not errors and raw_times[i::4]
        },
        "runaway_past_deadline_ms_median": statistics.median(overs),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows in the benchmark table")
    parser.add_argument("--queries", type=int, default=100, help="queries in the overhead benchmark")
    parser.add_argument("--repeat", type=int, default=3, help="runs per query (best time kept)")
    parser.add_argument("--searches", type=int, default=200, help="BM25 searches timed per engine")
    parser.add_argument("--deadline", type=float, default=1.0, help="runaway-query deadline in seconds")
    parser.add_argument("--engines", default="bm25s,fts5", help="BM25 engines to measure")
    parser.add_argument("--rank-bm25", action="store_true", help="also time plain rank-bm25 (slow to build)")
    parser.add_argument("--workdir", type=Path, help="where to put the database and caches (default: a temp dir)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--parts", default="overhead,bm25,runaway,duckdb", help="which benchmarks to run")
    args = parser.parse_args(argv)

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-tools-"))
    workdir.mkdir(parents=True, exist_ok=True)
    os.environ["SQLAGENT_RL_CACHE"] = str(workdir / "cache")  # cold caches for this run
    db_path = workdir / f"bench_{args.rows}.sqlite"
    start = time.perf_counter()
    if db_path.exists():
        db_path.unlink()
    vocab = make_database(db_path, args.rows)
    size_mb = db_path.stat().st_size / 1e6
    print(f"database: {args.rows:,} rows, {size_mb:.0f} MB, built in {time.perf_counter() - start:.1f} s")

    figures: dict[str, Any] = {"rows": args.rows}
    parts = set(args.parts.split(","))
    if "overhead" in parts:
        figures["overhead"] = bench_overhead(db_path, args.rows, args.queries, args.repeat)
        _print("1. sqlite_query vs raw sqlite3", figures["overhead"])
    if "bm25" in parts:
        queries = search_queries(vocab, args.searches, random.Random(2))
        figures["bm25"] = [bench_bm25(db_path, engine, queries) for engine in args.engines.split(",")]
        if args.rank_bm25:
            figures["bm25"].append(bench_rank_bm25(db_path, queries))
        for row in figures["bm25"]:
            _print(f"2. BM25 value search ({row['engine']})", row)
    if "runaway" in parts:
        figures["runaway"] = bench_runaway(db_path, args.deadline, repeats=3)
        _print("3. runaway queries", figures["runaway"])
    if "duckdb" in parts:
        figures["duckdb"] = bench_duckdb(db_path, args.rows, args.queries, args.repeat, args.deadline)
        _print("4. DuckDB backend vs its raw connection", figures["duckdb"])
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


def _print(title: str, values: dict[str, Any]) -> None:
    print(f"\n{title}")
    for key, value in values.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k}={v:.3g}" for k, v in value.items())
        elif isinstance(value, float):
            value = f"{value:.3f}"
        print(f"  {key}: {value}")


if __name__ == "__main__":
    sys.exit(main())
