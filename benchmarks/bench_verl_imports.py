"""CPU-seconds a fresh veRL process spends importing its module, with this project installed.

Every Ray actor veRL starts imports ``verl`` and with it this project's ``verl.plugins`` entry
point (training/engines/verl/workers/plugin.py). This times, in fresh interpreters, the import
of the modules that define veRL's actors - the load balancer, the reward loop, the agent loop
and the trainer registry - and prints the mean CPU-seconds of each (user + system, the
children's rusage), for this checkout and optionally another one (the baseline), with the
ratio::

    python benchmarks/bench_verl_imports.py --repeat 3
    python benchmarks/bench_verl_imports.py --repeat 3 --compare /path/to/old/checkout
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODULES = {
    "load balancer": "verl.workers.rollout.router",
    "reward loop": "verl.experimental.reward_loop.reward_loop",
    "agent loop": "verl.experimental.agent_loop.agent_loop",
    "trainer registry": "verl.trainer.ppo.v1",
}


def cpu_seconds(checkout: Path, module: str) -> float:
    """User + system CPU-seconds of one fresh interpreter importing ``module`` from ``checkout``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(
        [sys.executable, "-W", "ignore", "-c", f"import {module}"],
        cwd=checkout,  # `python -c` puts the working folder first on sys.path
        env={"PYTHONPATH": str(checkout), "PATH": "/usr/bin:/bin", "VERL_LOGGING_LEVEL": "ERROR"},
        capture_output=True,
        check=True,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="fresh interpreters per module and checkout")
    parser.add_argument("--compare", type=Path, help="another checkout to time the same way (the baseline)")
    args = parser.parse_args()
    checkouts = [("baseline", args.compare)] if args.compare else []
    checkouts.append(("this checkout", REPO))
    print(f"# CPU-seconds to import each module in a fresh interpreter, mean of {args.repeat}")
    header = f"{'module':<18}" + "".join(f"{name:>15}" for name, _ in checkouts)
    print(header + (f"{'ratio':>8}" if args.compare else ""))
    for label, module in MODULES.items():
        totals = [0.0] * len(checkouts)
        for _ in range(args.repeat):  # the checkouts in turn, so that a change of load hits both
            for i, (_, checkout) in enumerate(checkouts):
                totals[i] += cpu_seconds(checkout, module)
        means = [t / args.repeat for t in totals]
        line = f"{label:<18}" + "".join(f"{m:15.2f}" for m in means)
        print(line + (f"{means[0] / means[1]:7.2f}x" if args.compare else ""))


if __name__ == "__main__":
    main()
