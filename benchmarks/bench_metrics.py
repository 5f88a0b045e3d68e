"""Throughput of EX / REX / QATCH scoring on 1,534 (gold, pred) pairs.

Pairs come from the bundled benchmark's dev databases (``eval.data`` minibird): every
dev gold query paired with predictions of realistic kinds (identical, DISTINCT added,
reordered, cut by LIMIT, a misspelt table, another question's gold), cycled to 1,534
pairs — the size of BIRD dev. Without the bundled benchmark, a generated SQLite database
of the same scale is used.

Measured, in one process:
* baseline — a straightforward reimplementation of BIRD's official loop: a new
  connection per pair, execute predicted then gold, ``set(pred) == set(gold)`` (without
  the official script's per-pair ``func_timeout`` thread, which only makes it slower);
* ``ExecScorer`` with EX, REX, QATCH (read-only guarded execution through
  ``tools.execute``, gold cache on), single process and with a process pool of 2;
* the same with the gold cache off (``gold_cache_size=0``) for a like-for-like
  execution count;
* the pure metric functions on pre-executed results.

Prints pairs/second and the ratio against the baseline, plus the EX agreement with the
baseline. Run: ``python benchmarks/bench_metrics.py [--pairs 1534]``.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import random
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

Pair = tuple[str, str, str]  # (db_path, gold_sql, pred_sql)


# --------------------------------------------------------------------------- pairs


def _variants(gold: str, other: str) -> list[str]:
    """Predictions of the kinds models produce, for one gold query."""
    body = gold.strip().rstrip(";")
    distinct = body.replace("SELECT ", "SELECT DISTINCT ", 1) if "DISTINCT" not in body.upper()[:20] else body
    return [
        body,
        distinct,
        f"SELECT * FROM ({body}) ORDER BY 1 DESC",
        f"SELECT * FROM ({body}) LIMIT 1",
        body.replace(" FROM ", " FROM missing_", 1),
        other,
        f"{body} -- the answer",
    ]


def minibird_pairs(n: int) -> tuple[list[Pair], str]:
    from eval.data import load_examples

    examples = load_examples("minibird", split="dev")
    by_db: dict[str, list] = {}
    for ex in examples:
        by_db.setdefault(ex.db_id, []).append(ex)
    pairs: list[Pair] = []
    rng = random.Random(0)
    cycle = 0
    while len(pairs) < n:
        for ex in examples:
            other = rng.choice(by_db[ex.db_id]).gold_sql
            pairs.append((ex.db_path, ex.gold_sql, _variants(ex.gold_sql, other)[cycle % 7]))
            if len(pairs) == n:
                break
        cycle += 1
    return pairs, f"minibird dev ({len(examples)} questions, {len(by_db)} databases)"


def generated_pairs(n: int, folder: Path) -> tuple[list[Pair], str]:
    """A shop database (customers, orders, items; NULLs, mixed types) and templated SQL."""
    path = folder / "shop.sqlite"
    rng = random.Random(1)
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, city TEXT, score REAL)")
    con.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, amount REAL, status TEXT, year)")
    cities = ["Oslo", "Rome", "Lima", "Pune", None]
    con.executemany(
        "INSERT INTO customers VALUES (?, ?, ?, ?)",
        [(i, f"c{i}", rng.choice(cities), rng.choice([None, rng.random() * 100])) for i in range(1, 3001)],
    )
    con.executemany(
        "INSERT INTO orders VALUES (?, ?, ?, ?, ?)",
        [
            (
                i,
                rng.randint(1, 3000),
                round(rng.random() * 500, 2),
                rng.choice(["new", "paid", "void"]),
                rng.choice([2019, "2020", 2021]),
            )
            for i in range(1, 20001)
        ],
    )
    con.commit()
    con.close()
    golds = [
        "SELECT city, COUNT(*) FROM customers GROUP BY city",
        "SELECT name FROM customers WHERE score > {v} ORDER BY score DESC LIMIT 10",
        "SELECT c.name, SUM(o.amount) FROM customers c JOIN orders o ON o.customer_id = c.id "
        "WHERE o.status = 'paid' GROUP BY c.id HAVING SUM(o.amount) > {w}",
        "SELECT AVG(amount) FROM orders WHERE year = 2021",
        "SELECT id, amount FROM orders WHERE customer_id = {c}",
        "SELECT COUNT(DISTINCT customer_id) FROM orders WHERE amount > {v}",
    ]
    pairs: list[Pair] = []
    for i in range(n):
        gold = golds[i % len(golds)].format(v=i % 90, w=500 + i % 700, c=1 + i % 3000)
        other = golds[(i + 1) % len(golds)].format(v=i % 90, w=500 + i % 700, c=1 + i % 3000)
        pairs.append((str(path), gold, _variants(gold, other)[(i // len(golds)) % 7]))
    return pairs, "generated shop database (3,000 customers, 20,000 orders)"


# --------------------------------------------------------------------------- runs


def official_loop(pairs: Sequence[Pair]) -> list[int]:
    """BIRD evaluation.py's scoring, straightforwardly: new connection per pair."""
    out = []
    for db_path, gold, pred in pairs:
        conn = sqlite3.connect(db_path)
        try:
            cursor = conn.cursor()
            cursor.execute(pred)
            pred_rows = cursor.fetchall()
            cursor.execute(gold)
            gold_rows = cursor.fetchall()
            out.append(int(set(pred_rows) == set(gold_rows)))
        except Exception:
            out.append(0)
        finally:
            conn.close()
    return out


_WORKER_SCORER = None


def _init_worker(cache_size: int) -> None:
    global _WORKER_SCORER
    from rex import ExecScorer

    _WORKER_SCORER = ExecScorer(timeout_s=30.0, gold_cache_size=cache_size)


def _score_chunk(args: tuple[Sequence[Pair], str]) -> list[float]:
    from tools import get_database

    chunk, metric = args
    scorer = _WORKER_SCORER
    if scorer is None:
        raise RuntimeError("worker scorer missing: _init_worker did not run")
    dbs = {path: get_database(path) for path in {p for p, _, _ in chunk}}  # as rewards receive them
    return [scorer.score(dbs[p], g, s, metric).score for p, g, s in chunk]


def scorer_run(pairs: Sequence[Pair], metric: str, cache_size: int) -> list[float]:
    _init_worker(cache_size)
    return _score_chunk((pairs, metric))


class WarmPool:
    """A process pool started and warmed (imports done, databases opened) before timing,
    as a training or evaluation run keeps its pool; start-up is reported separately."""

    def __init__(self, pairs: Sequence[Pair], workers: int = 2, cache_size: int = 4096) -> None:
        start = time.perf_counter()
        self.workers = workers
        self.pool = mp.get_context("spawn").Pool(workers, initializer=_init_worker, initargs=(cache_size,))
        warm = [(pairs[i : i + 1], "ex") for i in range(workers * 2)]
        self.pool.map(_score_chunk, warm, chunksize=1)
        self.startup_s = time.perf_counter() - start

    def run(self, pairs: Sequence[Pair], metric: str) -> list[float]:
        # Contiguous chunks keep each gold query's repeats in one worker's cache.
        size = (len(pairs) + self.workers * 4 - 1) // (self.workers * 4)
        chunks = [(pairs[i : i + size], metric) for i in range(0, len(pairs), size)]
        return [s for part in self.pool.map(_score_chunk, chunks, chunksize=1) for s in part]

    def close(self) -> None:
        self.pool.close()
        self.pool.join()


def timed(fn: Callable[[], object], repeat: int) -> tuple[float, object]:
    best, value = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        value = fn()
        best = min(best, time.perf_counter() - start)
    return best, value


def pure_metrics(pairs: Sequence[Pair]) -> dict[str, float]:
    """Seconds for the metric functions alone, on results executed beforehand."""
    from rex import execution_match, qatch_scores, rex_score
    from rex.scorer import ExecScorer
    from rex.tables import Failure, as_outcome
    from tools import get_database

    scorer = ExecScorer()
    executed = []
    for path, gold, pred in pairs:
        db = get_database(path)
        g = scorer.gold(db, gold)
        p = scorer.execute(db, pred)
        if not isinstance(as_outcome(g.result), Failure) and not isinstance(as_outcome(p), Failure):
            executed.append((g.result, p, g.ordered))
    out = {"pairs": float(len(executed))}
    for name, fn in (
        ("ex", lambda g, p, o: execution_match(g, p)),
        ("rex", lambda g, p, o: rex_score(g, p, o)),
        ("qatch", lambda g, p, o: qatch_scores(g, p)),
    ):
        out[name], _ = timed(lambda fn=fn: [fn(g, p, o) for g, p, o in executed], repeat=3)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=1534)
    parser.add_argument("--repeat", type=int, default=2, help="best of N timings")
    parser.add_argument("--generated", action="store_true", help="use the generated database, not minibird")
    args = parser.parse_args(argv)

    tmp = tempfile.TemporaryDirectory()
    source = ""
    pairs: list[Pair] = []
    if not args.generated:
        try:
            pairs, source = minibird_pairs(args.pairs)
        except Exception as err:  # noqa: BLE001 - fall back, and say why
            print(f"minibird unavailable ({type(err).__name__}: {err}); using a generated database", file=sys.stderr)
    if not pairs:
        pairs, source = generated_pairs(args.pairs, Path(tmp.name))
    print(f"pairs: {len(pairs)} from {source}")

    base_s, base = timed(lambda: official_loop(pairs), args.repeat)
    rate = len(pairs) / base_s
    print(f"{'run':38s} {'seconds':>8s} {'pairs/s':>9s} {'vs baseline':>11s}")
    print(f"{'baseline: official loop, EX':38s} {base_s:8.3f} {rate:9.0f} {1.0:10.2f}x")
    results: dict[str, list[float]] = {}
    pool = WarmPool(pairs)
    print(f"(pool of 2 start-up, imports and warm-up: {pool.startup_s:.2f} s, not counted below)")
    for metric in ("ex", "rex", "qatch"):
        for label, fn in (
            ("1 process, gold cache", lambda m=metric: scorer_run(pairs, m, 4096)),
            ("1 process, no cache", lambda m=metric: scorer_run(pairs, m, 0)),
            ("pool of 2, gold cache", lambda m=metric: pool.run(pairs, m)),
        ):
            seconds, scores = timed(fn, args.repeat)
            results[f"{metric}/{label}"] = scores  # type: ignore[assignment]
            name = f"{metric.upper()} {label}"
            print(f"{name:38s} {seconds:8.3f} {len(pairs) / seconds:9.0f} {base_s / seconds:10.2f}x")

    pool.close()
    ours = [int(s == 1.0) for s in results["ex/1 process, gold cache"]]
    agree = sum(a == b for a, b in zip(ours, base, strict=True))
    print(
        f"EX agreement with the official loop: {agree}/{len(pairs)}; accuracy ours {sum(ours) / len(ours):.4f}, "
        f"official {sum(base) / len(base):.4f}"
    )
    mean = {m: sum(results[f"{m}/1 process, gold cache"]) / len(pairs) for m in ("rex", "qatch")}
    print(f"mean REX {mean['rex']:.4f}, mean QATCH {mean['qatch']:.4f}")

    pure = pure_metrics(pairs)
    n = int(pure.pop("pairs"))
    print(
        f"metric functions alone on {n} executed pairs: "
        + ", ".join(f"{k.upper()} {n / v:,.0f}/s" for k, v in pure.items())
    )
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
