"""Test-suite EX on the bundled benchmark: building the suites, what they catch, what they cost.

For every database of the bundled benchmark (``eval.data`` minibird: six training and two
held-out databases), the suite is built from the gold queries of the questions on it (a
fresh cache directory, so every build is timed), then:

* build time and the disk the neighbours take, per database and in all;
* the gold queries' mutants (``rex.test_suite.mutants``: predicates dropped or changed,
  columns swapped, aggregates changed, joins made outer, DISTINCT / ORDER BY / LIMIT
  changed): how many EX already rejects on the original, how many of the rest the
  neighbours reject, and the share the suite (original + neighbours) tells apart in all
  (goal >= 95 %), with the mutants still accepted listed (``--show``);
* the cost of scoring 1,000 predictions with ``ExecScorer.score`` under ``ex`` and under
  ``test_suite`` in the same process, as a ratio (goal <= 2x): a third of the predictions
  are their question's gold query (not run again on the neighbours), a third the gold query
  wrapped as ``SELECT * FROM (gold)`` (equivalent: the neighbours run), a third one of its
  mutants; a fresh scorer each pass, so gold results are computed once per pass in both;
  three alternating passes each, the fastest reported (the machine may be shared).

Run: ``python benchmarks/bench_test_suite.py [--predictions 1000] [--neighbours 4] [--show 20]``.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROUNDS = 3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--predictions", type=int, default=1000)
    parser.add_argument("--neighbours", type=int, default=4)
    parser.add_argument("--rows-per-table", type=int, default=30)
    parser.add_argument("--candidates", type=int, default=8)
    parser.add_argument("--show", type=int, default=10, help="mutants still accepted to print")
    args = parser.parse_args(argv)
    cache = tempfile.mkdtemp(prefix="bench-test-suite-")
    os.environ["SQLAGENT_RL_CACHE"] = cache
    try:
        return _run(args)
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def _run(args: argparse.Namespace) -> int:
    from eval.data import load_examples
    from rex.test_suite import SuiteSettings, ensure_suite
    from tools import get_database

    settings = SuiteSettings(args.neighbours, args.rows_per_table, args.candidates)
    golds: dict[str, list[str]] = {}
    for split in ("train", "dev"):
        for ex in load_examples("minibird", split=split):
            golds.setdefault(ex.db_path, []).append(ex.gold_sql)
    print(f"settings: {settings}")
    print(
        f"{'database':<10} {'golds':>5} {'mutants':>7} {'EX rejects':>10} {'suite adds':>10} {'share':>7} "
        f"{'build s':>8} {'disk KiB':>8}"
    )
    totals = {"mutants": 0, "original": 0, "neighbours": 0, "seconds": 0.0, "bytes": 0}
    uncaught: list[dict[str, str]] = []
    started = time.monotonic()
    for path, sqls in sorted(golds.items()):
        db = get_database(path)
        suite, built = ensure_suite(db, sqls, settings)
        assert built, f"{db.db_id}: a fresh cache should build"
        s = suite.info["stats"]
        totals["mutants"] += s["mutants"]
        totals["original"] += s["caught_by_original"]
        totals["neighbours"] += s["caught_by_neighbours"]
        totals["seconds"] += s["seconds"]
        totals["bytes"] += s["bytes"]
        uncaught += s["uncaught"]
        print(
            f"{db.db_id:<10} {s['golds']:>5} {s['mutants']:>7} {s['caught_by_original']:>10} "
            f"{s['caught_by_neighbours']:>10} {s['caught_share']:>7.1%} {s['seconds']:>8.2f} {s['bytes'] / 1024:>8.0f}"
        )
    wall = time.monotonic() - started
    alive = totals["mutants"] - totals["original"]
    share = (totals["original"] + totals["neighbours"]) / totals["mutants"]
    print(
        f"\nbuilt {len(golds)} suites in {wall:.1f} s ({totals['seconds']:.1f} s building), "
        f"{totals['bytes'] / 1024:.0f} KiB of neighbours"
    )
    print(
        f"mutants: {totals['mutants']}; EX rejects {totals['original']} on the original; "
        f"of the {alive} EX accepts, the neighbours reject {totals['neighbours']} "
        f"({totals['neighbours'] / alive if alive else 1.0:.1%})"
    )
    print(f"mutants the suite tells apart: {share:.1%} (goal >= 95%)")
    for u in uncaught[: args.show]:
        print(f"  still accepted: {u['mutant']}\n      gold: {u['gold']}")
    _cost(golds, args.predictions)
    return 0


def _cost(golds: dict[str, list[str]], n: int) -> None:
    from rex import ExecScorer
    from rex.test_suite import mutants
    from tools import get_database

    rng = random.Random(0)
    pairs = []
    for path, sqls in sorted(golds.items()):
        schema = get_database(path).schema()
        for sql in sqls:
            pairs.append((path, sql, sql))
            pairs.append((path, sql, f"SELECT * FROM ({sql.strip().rstrip(';')})"))  # equivalent, not the same text
            near = mutants(sql, schema)
            pairs += [(path, sql, m.sql) for m in rng.sample(near, min(1, len(near)))]
    rng.shuffle(pairs)
    pairs = (pairs * (n // len(pairs) + 1))[:n]
    timings: dict[str, tuple[float, float, list]] = {}
    for metric in ("ex", "test_suite") * ROUNDS:  # alternating; the fastest pass of each is reported
        scorer = ExecScorer()
        began = time.perf_counter()
        scores = [scorer.score(get_database(p), g, s, metric) for p, g, s in pairs]
        took = time.perf_counter() - began
        if metric not in timings or took < timings[metric][0]:
            timings[metric] = (took, sum(x.score for x in scores), scores)
    ex_t, ex_hits, _ = timings["ex"]
    ts_t, ts_hits, ts_scores = timings["test_suite"]
    rejected = sum(bool(x.details.get("suite_rejected")) for x in ts_scores)
    equivalent_rejected = sum(
        bool(x.details.get("suite_rejected")) for (_, g, s), x in zip(pairs, ts_scores, strict=True) if g in s
    )
    same = sum(g == s for _, g, s in pairs)
    wrapped = sum(s.startswith("SELECT * FROM (") and g in s for _, g, s in pairs)
    print(f"\nscoring {n} predictions ({same} their gold query, {wrapped} it wrapped, {n - same - wrapped} mutants):")
    print(f"  ex:         {ex_t:.2f} s, {ex_hits:.0f} correct")
    print(f"  test_suite: {ts_t:.2f} s, {ts_hits:.0f} correct ({rejected} EX matches rejected by a neighbour)")
    print(f"  ratio test_suite / ex: {ts_t / ex_t:.2f}x (goal <= 2x)")
    print(f"  gold or wrapped-gold predictions the suite rejected: {equivalent_rejected} (should be 0)")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.exit(main())
