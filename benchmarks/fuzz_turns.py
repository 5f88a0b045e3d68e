"""The long turn fuzz; prints its counts.

``--turns`` adversarial model turns (tests/helpers/turn_fuzz.py: random unicode with lone
surrogates, RTL and zero-width characters and NUL, huge and looping turns, nested and
unclosed tags of every design's protocol, JSON bombs, wrong tools and arguments, runaway,
huge-result and writing SQL, chat-template markers) split evenly over every registered
design (and the option sets that change an episode's path: DualSQL without guardrails,
TRUST-SQL with Schema-Prefill). Half of each design's turns go through whole episodes on
``Episode.step`` with the real tools on a small real SQLite database, half through the
rollout driver (``run_episodes`` with a token generate that emits them, under varied token
limits). Every episode is scored by its design's reward and by ``ex``, ``rex``, ``qatch``.

Per design it prints: turns, episodes, how episodes ended, format failures by reason, tool
outcomes, rewards computed, reward errors, exceptions that escaped (must be 0), broken
promises (a failed turn without its reason, a policy token generate did not return, …;
must be 0), the slowest agent step and reward call, and the wall time. Runaway SQL: the
executor presets without a VM-step cap (TRUST-SQL's and DualSQL's 30 s deadline) run with
a 0.2 s deadline here, and the rewards with 0.2 s, so the fuzz stays fast; ReToolSQL's
keeps its 15M-step cap. Exit status 1 when anything escaped or broke.

    python benchmarks/fuzz_turns.py                        # 10,000 turns, seed 0
    python benchmarks/fuzz_turns.py --turns 600 --seed 3   # the CI size
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for tests.helpers


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=10_000, help="adversarial turns in all (default 10,000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--show", type=int, default=5, help="format reasons and problems shown per design")
    args = parser.parse_args()
    if args.turns < 1:
        parser.error(f"--turns {args.turns}: give a positive number of turns")

    work = Path(tempfile.mkdtemp(prefix="fuzz-turns-"))
    os.environ.setdefault("SQLAGENT_RL_CACHE", str(work / "cache"))
    from tests.helpers.agent_db import make_db
    from tests.helpers.turn_fuzz_run import run_fuzz
    from tools import get_database

    db = get_database(make_db(work / "schools.sqlite"))
    started = time.perf_counter()
    tallies = run_fuzz(args.turns, args.seed, db)
    wall = time.perf_counter() - started

    print(f"turn fuzz: {args.turns} turns, seed {args.seed}, {wall:.0f} s\n")
    for label, t in tallies.items():
        print(f"== {label}: {t.turns} turns, {t.episodes} episodes, {t.seconds:.1f} s")
        print(f"   ended: {dict(t.end_reasons.most_common())}")
        print(f"   turn kinds: {dict(t.kinds.most_common())}")
        failures = sum(t.format_failures.values())
        print(f"   format failures: {failures} ({len(t.format_failures)} reasons), most common:")
        for reason, n in t.format_failures.most_common(args.show):
            print(f"      {n:6d}  {reason}")
        print(f"   tool outcomes: {dict(t.outcomes.most_common())}")
        print(f"   rewards computed: {t.rewards}, reward errors: {sum(t.reward_errors.values())}")
        for reason, n in t.reward_errors.most_common(args.show):
            print(f"      {n:6d}  {reason}")
        print(f"   exceptions: {len(t.exceptions)}, broken promises: {len(t.violations)}")
        for problem in (t.exceptions + t.violations)[: args.show]:
            print(f"      {problem[:400]}")
        print(f"   slowest step: {t.slowest_step[0]:.3f} s ({t.slowest_step[1]})")
        print(f"   slowest reward: {t.slowest_reward[0]:.3f} s ({t.slowest_reward[1]})")
    exceptions = sum(len(t.exceptions) for t in tallies.values())
    broken = sum(len(t.violations) for t in tallies.values())
    print(
        f"\ntotal: {sum(t.turns for t in tallies.values())} turns, {sum(t.episodes for t in tallies.values())} "
        f"episodes, {sum(sum(t.format_failures.values()) for t in tallies.values())} format failures, "
        f"{sum(sum(t.outcomes.values()) for t in tallies.values())} tool calls, "
        f"{sum(t.rewards for t in tallies.values())} rewards, "
        f"{sum(sum(t.reward_errors.values()) for t in tallies.values())} reward errors, "
        f"{exceptions} exceptions, {broken} broken promises, {wall:.0f} s"
    )
    return 1 if exceptions or broken else 0


if __name__ == "__main__":
    sys.exit(main())
