"""Benchmark of the tool layer; prints figures (ratios against a baseline run here).

1. Tool overhead on SQLite (``--parts overhead``): the executor tool
   (``tools.executor_tool.run_sql``) vs raw ``sqlite3`` on the same 100 queries over a
   database with a ``--rows``-row table, and through the dispatcher with ReToolSQL's
   ``sqlite_query`` (argument checks, JSON text): per-query time ratios, overall and per
   query family with median / p90 seconds (aim <= 1.15x; issue 26: SQLite's speed unchanged).
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
5. PostgreSQL (``--parts postgres``): the same table copied into a private server (or the
   database ``--pg-dsn`` names, as a superuser); the tool on the PostgreSQL backend vs raw
   ``psycopg`` on the same queries, role and schema (goal <= 1.2x).

The overhead parts live in ``benchmarks/bench_backends.py``.

    python benchmarks/bench_tools.py                 # full size: 1,000,000 rows
    python benchmarks/bench_tools.py --rows 50000    # quick run
    python benchmarks/bench_tools.py --rows 50000 --parts overhead,duckdb,postgres
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_backends import bench_duckdb, bench_postgres, bench_sqlite, percentile, print_figures

PARTS_ORDER = ("overhead", "bm25", "runaway", "duckdb", "postgres")
PARTS = frozenset(PARTS_ORDER)


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
        "cached_search_p99_ms": 1000 * percentile(latencies, 0.99),
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
    parser.add_argument("--parts", default=",".join(PARTS_ORDER), help="which benchmarks to run (comma-separated)")
    parser.add_argument(
        "--pg-dsn", help="a PostgreSQL superuser's DSN for --parts postgres (default: a private server)"
    )
    args = parser.parse_args(argv)
    parts = set(args.parts.split(","))
    if parts - PARTS:
        parser.error(f"unknown --parts {sorted(parts - PARTS)}; choose from {', '.join(PARTS_ORDER)}")

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
    if "overhead" in parts:
        figures["overhead"] = bench_sqlite(db_path, args.rows, args.queries, args.repeat)
        print_figures("1. SQLite: the executor tool vs raw sqlite3", figures["overhead"])
    if "bm25" in parts:
        queries = search_queries(vocab, args.searches, random.Random(2))
        figures["bm25"] = [bench_bm25(db_path, engine, queries) for engine in args.engines.split(",")]
        if args.rank_bm25:
            figures["bm25"].append(bench_rank_bm25(db_path, queries))
        for row in figures["bm25"]:
            print_figures(f"2. BM25 value search ({row['engine']})", row)
    if "runaway" in parts:
        figures["runaway"] = bench_runaway(db_path, args.deadline, repeats=3)
        print_figures("3. runaway queries", figures["runaway"])
    if "duckdb" in parts:
        figures["duckdb"] = bench_duckdb(db_path, args.rows, args.queries, args.repeat, args.deadline)
        print_figures("4. DuckDB: the executor tool vs its raw connection", figures["duckdb"])
    if "postgres" in parts:
        figures["postgres"] = bench_postgres(db_path, args.rows, args.queries, args.repeat, args.pg_dsn)
        print_figures("5. PostgreSQL: the executor tool vs raw psycopg", figures["postgres"])
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
