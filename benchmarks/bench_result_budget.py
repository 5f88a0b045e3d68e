"""Memory and time of an exploding prediction under the metric preset, with and without
the result budget.

The query is ``SELECT * FROM t a, t b, t c`` on a 3,000-row table (27 billion joined rows),
built in a temporary folder. Each arm runs in its own child process, so each peak is its
own: the child opens the database, runs a small warm-up query, reads its RSS (the
baseline), runs the query through ``tools.execute`` and reports its peak RSS
(``resource.getrusage``) above that baseline and the seconds (wall clock and CPU) the
query took; on a shared machine the CPU seconds are the steadier figure.

* old: the metric preset without a budget (what it was before), under a shorter deadline
  (``--old-timeout``, default 3 s) so the run does not take the preset's 30 s; memory
  grows for as long as it runs, so its figures are a lower bound of the 30 s run's;
* new: the metric preset as it is (its default budget, its 30 s deadline).

Prints both rows and the ratios. Goal: the new arm under 300 MB above the baseline and
under 2 s. Run: ``python benchmarks/bench_result_budget.py [--old-timeout 3]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.helpers.wide_table import CROSS_JOIN, ROWS, build_wide_table  # noqa: E402

MB = 1 << 20


def _rss_bytes() -> int:
    """This process's resident set now (Linux ``/proc``)."""
    with open("/proc/self/statm", encoding="ascii") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def run_arm(db_path: str, arm: str, old_timeout: float) -> dict[str, Any]:
    """One arm, in this process: the query's seconds, outcome and peak RSS above the baseline."""
    from tools import PRESETS, ToolError, execute, get_database

    limits = PRESETS["metric"]
    if arm == "old":
        limits = dataclasses.replace(limits, max_result_rows=None, max_result_bytes=None, timeout_s=old_timeout)
    db = get_database(db_path)
    execute(db, "SELECT count(*) FROM t", limits)  # connection, guards and imports in the baseline
    baseline = _rss_bytes()
    cpu_before = time.process_time()
    started = time.perf_counter()
    result = execute(db, CROSS_JOIN, limits)
    seconds = time.perf_counter() - started
    cpu = time.process_time() - cpu_before
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    return {
        "arm": arm,
        "seconds": seconds,
        "cpu_seconds": cpu,
        "peak_above_baseline_mb": (peak - baseline) / MB,
        "outcome": result.kind if isinstance(result, ToolError) else f"{len(result.rows)} rows",
        "deadline_s": limits.timeout_s,
        "budget": f"{limits.max_result_rows} rows / {limits.max_result_bytes} bytes",
    }


def _child(db_path: str, arm: str, old_timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", arm, "--db", db_path, "--old-timeout", str(old_timeout)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old-timeout", type=float, default=3.0, help="deadline of the old arm (s)")
    parser.add_argument("--child", choices=["old", "new"], help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_arm(args.db, args.child, args.old_timeout)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        db_path = str(build_wide_table(Path(tmp) / "wide.sqlite"))
        print(f"query: {CROSS_JOIN}  (t: {ROWS:,} rows; metric preset)")
        rows = [_child(db_path, arm, args.old_timeout) for arm in ("old", "new")]
    print(f"{'arm':<4} {'deadline':>9} {'seconds':>8} {'CPU s':>6} {'peak RSS above baseline':>24}  outcome  (budget)")
    for r in rows:
        print(
            f"{r['arm']:<4} {r['deadline_s']:>8g}s {r['seconds']:>8.2f} {r['cpu_seconds']:>6.2f}"
            f" {r['peak_above_baseline_mb']:>20.0f} MiB  {r['outcome']}  ({r['budget']})"
        )
    old, new = rows
    print(
        f"ratio old/new: memory {old['peak_above_baseline_mb'] / max(new['peak_above_baseline_mb'], 1e-9):.1f}x, "
        f"time {old['seconds'] / new['seconds']:.1f}x (the old arm stopped at its {old['deadline_s']:g} s deadline)"
    )
    memory_ok = new["peak_above_baseline_mb"] * MB < 300e6
    print(
        f"goal (new: < 300 MB above baseline, < 2 s): memory {'met' if memory_ok else 'NOT met'}; "
        f"time {new['seconds']:.2f} s wall, {new['cpu_seconds']:.2f} s CPU "
        f"({'met' if new['seconds'] < 2.0 else 'met in CPU time only' if new['cpu_seconds'] < 2.0 else 'NOT met'}; "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)"
    )


if __name__ == "__main__":
    main()
