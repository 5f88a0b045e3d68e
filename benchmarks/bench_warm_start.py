"""Seconds and peak memory of one design's laptop warm start (its SFT on demonstrations),
for this checkout and optionally another one (the baseline), with the ratio.

Each measurement is a fresh interpreter in the checkout being measured: the local engine's
trainer built with the laptop profile (as ``python -m training.run recipe=X`` builds it),
its demonstrations recorded on ``--examples`` training questions, then the SFT, timed alone
(``duration_s`` of ``supervised_fine_tune``); the peak is the process's resident high-water
mark (``VmHWM``). The checkouts take turns, so a change of machine load hits both. The NLL
of the first and last steps shows both arms trained the same way::

    python benchmarks/bench_warm_start.py --recipe trustsql --examples 8
    python benchmarks/bench_warm_start.py --recipe trustsql --compare /path/to/old/checkout \\
        --override model.generation_dtype=int8 model.autocast=off   # as on a CPU without bf16
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def measure(recipe: str, examples: int, overrides: list[str]) -> dict[str, Any]:
    """The warm start of this interpreter's checkout (the first entry of ``sys.path``)."""
    import training
    from training.config import compose_tree
    from training.engines.local.trainer import LocalTrainer, TrainerInputs
    from training.run import prepare_config

    with tempfile.TemporaryDirectory() as run_dir:
        given = [
            f"recipe={recipe}",
            "engine=local",
            "engine.device=cpu",
            "logger=[]",
            f"run_dir={run_dir}",
            "trainer.eval_before_after=false",
            f"stage.warm_start.examples={examples}",
            *overrides,
        ]
        cfg = prepare_config(compose_tree("config", given), {o.split("=", 1)[0] for o in given}, say=lambda _: None)
        result = LocalTrainer(cfg, TrainerInputs(), say=lambda _: None).run_warm_start()
    peak_kb = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM"))
    return {**result, "peak_gb": peak_kb * 1024 / 1e9, "code": str(Path(training.__file__).parents[1])}


def run_in(checkout: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One measurement in a fresh interpreter whose code is ``checkout``'s."""
    command = [sys.executable, str(Path(__file__).resolve()), "--inner", "--recipe", args.recipe]
    command += ["--examples", str(args.examples), "--override", *args.override]
    env = {**os.environ, "PYTHONPATH": str(checkout), "WANDB_MODE": "offline"}
    done = subprocess.run(command, cwd=checkout, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"the warm start in {checkout} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", default="trustsql")
    parser.add_argument("--examples", type=int, default=8, help="training questions to demonstrate")
    parser.add_argument("--repeat", type=int, default=1, help="measurements per checkout")
    parser.add_argument("--compare", type=Path, help="another checkout to measure the same way (the baseline)")
    parser.add_argument("--override", nargs="*", default=[], help="extra Hydra overrides")
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        sys.path.insert(0, os.getcwd())  # the measured checkout, before any installed copy
        print(json.dumps(measure(args.recipe, args.examples, args.override)))
        return
    checkouts = [("baseline", args.compare)] if args.compare else []
    checkouts.append(("this checkout", REPO))
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in checkouts}
    for _ in range(args.repeat):
        for name, checkout in checkouts:
            runs[name].append(run_in(checkout, args))
            last = runs[name][-1]
            print(
                f"{name:<14} SFT {last['duration_s']:7.1f} s  peak {last['peak_gb']:.2f} GB  "
                f"{int(last['steps'])} steps on {int(last['policy_tokens'])} policy tokens, "
                f"NLL {last['nll_first']:.4f} -> {last['nll_last']:.4f} (code: {last['code']})",
                flush=True,
            )
    means = {name: sum(r["duration_s"] for r in rs) / len(rs) for name, rs in runs.items()}
    print(
        f"# {args.recipe}: SFT seconds, mean of {args.repeat}: " + ", ".join(f"{n} {s:.1f}" for n, s in means.items())
    )
    if args.compare:
        print(f"# ratio (baseline / this checkout): {means['baseline'] / means['this checkout']:.2f}x")


if __name__ == "__main__":
    main()
