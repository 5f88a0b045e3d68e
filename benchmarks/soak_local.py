"""The kill -9 soak of the local engine; prints what it did and what differed.

The tiny test model (tests/helpers/tiny_model.py) trained by ``python -m training.run``
on the bundled minibird data for ``--steps`` steps with a checkpoint every step, killed
with SIGKILL at ``--kills`` seeded random points (right after a step's record, before its
checkpoint; mid-step; during a process's start-up evaluation or first step) and restarted with ``resume=auto`` after
each, then compared with an uninterrupted run of the same command: the final weights
(``torch.equal`` on every tensor) and every record file (metrics.jsonl, samples.jsonl,
prompts.jsonl, heldout_*.jsonl: each step once, same values; wall-clock fields left out)
and summary.json's steps and EX. See tests/helpers/soak.py for how the kill points are drawn.

    python benchmarks/soak_local.py                          # 200 steps, 10 kills, seed 0
    python benchmarks/soak_local.py --steps 20 --kills 3 --seed 4

Exit status 1 when the soaked run differs from the uninterrupted one.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for tests.helpers


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0, help="the kill points' seed (the runs use seed 0)")
    parser.add_argument("--recipe", default="think2sql")
    parser.add_argument("--work", type=Path, default=None, help="where the two runs go (default: a new temp dir)")
    args = parser.parse_args()
    if args.steps < 1 or args.kills < 0:
        parser.error(f"--steps {args.steps} --kills {args.kills}: need steps >= 1 and kills >= 0")

    from tests.helpers.soak import command, compare_runs, kill_points, run_once, run_with_kills, step_seconds
    from tests.helpers.sweep import save_tiny_model

    work = args.work or Path(tempfile.mkdtemp(prefix="soak-local-"))
    work.mkdir(parents=True, exist_ok=True)
    model = save_tiny_model(work / "tiny-model")
    reference, soaked = work / "uninterrupted", work / "soaked"
    timeout = 60.0 * 60 * 6

    started = time.perf_counter()
    rc = run_once(command(reference, model, args.steps, 0, args.recipe), work, work / "uninterrupted.log", timeout)
    reference_s = time.perf_counter() - started
    if rc != 0:
        print(f"the uninterrupted run failed (exit {rc}); see {work / 'uninterrupted.log'}")
        return 1
    step_s = step_seconds(reference)
    kills = kill_points(random.Random(args.seed), args.steps, args.kills, step_s)

    started = time.perf_counter()
    cmd = command(soaked, model, args.steps, 0, args.recipe)
    landed = run_with_kills(cmd, soaked, work, work / "soaked.log", kills, timeout)
    soaked_s = time.perf_counter() - started
    problems = compare_runs(reference, soaked)

    print(f"soak: {args.recipe}, {args.steps} steps, {len(landed)} of {args.kills} kills landed (seed {args.seed})")
    print(f"   uninterrupted run {reference_s:.0f} s (median step {step_s:.2f} s); soaked run {soaked_s:.0f} s")
    for i, kill in enumerate(landed, 1):
        print(
            f"   kill {i:2d}: after {'its first record' if kill.step is None else f'step {kill.step}'} + "
            f"{kill.delay_s:.2f} s ({kill.killed_after_s:.1f} s after start); "
            f"checkpoint {kill.checkpoint}; last record {kill.last_record}"
        )
    print(f"   work directory: {work}")
    if problems:
        print(f"DIFFERENT from the uninterrupted run ({len(problems)}):")
        for problem in problems:
            print(f"   {problem}")
        return 1
    print("   final weights equal (every tensor) and every record file equal: the soak passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
