"""The supervised chain of each design, measured once on CPU with the embedded default model.

Protocol (fixed before running; the numbers are whatever comes out), per design:
1. A format warm start: the laptop profile's SFT on demonstrations of the design's protocol
   (gold SQL of ``--warm-examples`` training questions drawn with seed ``seed + 1``), since
   the 135M default writes no design's format out of the box (docs/engines.md "The warm start") and a chain on the
   raw model keeps no trace at all. The overlap between the warm start's questions and the
   chain's questions is printed (same split, different seeded draws).
2. ``stage=sft_rl`` from those weights, on the bundled minibird data with the laptop
   profile: ``--questions`` training questions (seed 0), pass@k with ``k`` samples before
   and after SFT (``supervised.passk_after=true``; annotate chains mine it just for this),
   the design's traces and filters (teachers: none are reachable offline, so the teacher is
   the policy itself, as ``supervised.teachers=[]`` means), the design's SFT settings, then
   ``--rl-steps`` GRPO steps (laptop sizes) from the SFT weights; EX is greedy on the same
   ``--dev`` held-out questions before SFT, after SFT and after RL.

Every stage is resumable (``training/supervised/store.py``): rerunning the same command after
a kill continues. Writes ``<out>/<design>/chain/supervised/summary.json`` per design and
``<out>/stages_measure.json`` + a Markdown table of every finished design.

    nice -n 10 python benchmarks/stages_measure.py --designs think2sql           # one design
    nice -n 10 python benchmarks/stages_measure.py                               # all four
    python benchmarks/stages_measure.py --designs think2sql --questions 2 --k 2 --dev 2 --rl-steps 1 \\
        --warm-examples 4 --out /tmp/sm                                          # a smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root


def registered_designs() -> list[str]:
    """The designs to measure by default: every registered one."""
    from agents.designs import list_designs

    return list_designs()


def make_config(recipe: str, run_dir: Path, overrides: Sequence[str], say: Any) -> Any:
    """The recipe with the CPU laptop profile, as ``training.run`` prepares it."""
    from training.config import compose_tree
    from training.run import prepare_config

    base = [f"recipe={recipe}", "engine=local", "logger=[]", f"run_dir={run_dir}", *overrides]
    raw = compose_tree("config", base)
    explicit = {o.split("=", 1)[0].lstrip("+~") for o in base}
    return prepare_config(raw, explicit, say=say)


def warm_start(recipe: str, out: Path, args: argparse.Namespace, say: Any) -> tuple[Path, list[str], dict]:
    """Train (or reuse) the design's format warm start; its directory and question ids."""
    from training.engines.local.trainer import LocalTrainer, TrainerInputs
    from training.engines.local.warm_start import warm_start_dir
    from training.rollout.setup import fixed_subset

    cfg = make_config(
        recipe,
        out / "warm",
        [
            "stage.warm_start.enable=true",
            f"seed={args.seed + 1}",
            f"stage.warm_start.examples={args.warm_examples}",
            "trainer.eval_before_after=false",
        ],
        say,
    )
    trainer = LocalTrainer(cfg, TrainerInputs(), say)
    result = trainer.run_warm_start()  # SFT (or the finished one reloaded)
    ids = [ex.id for ex in fixed_subset(trainer.train_examples, args.warm_examples, args.seed + 1)]
    return warm_start_dir(out / "warm"), ids, result


def measure(recipe: str, args: argparse.Namespace, say: Any) -> dict[str, Any]:
    from training.rollout.setup import fixed_subset
    from training.supervised.chain import run_stage

    out = Path(args.out) / recipe
    start = time.perf_counter()
    warm_dir, warm_ids, warm = warm_start(recipe, out, args, say)
    warm_s = time.perf_counter() - start
    cfg = make_config(
        recipe,
        out / "chain",
        [
            "stage=sft_rl",
            f"model.path={warm_dir}",
            f"seed={args.seed}",
            "resume=true",
            # through the laptop caps, so TRUST-SQL's RL filter scales with k (6/8 -> 3/4)
            f"laptop.supervised_questions={args.questions}",
            f"laptop.supervised_samples={args.k}",
            "supervised.passk_after=true",
            f"data.eval_limit={args.dev}",
            f"trainer.total_steps={args.rl_steps}",
            *args.override,
        ],
        say,
    )
    chain_start = time.perf_counter()
    summary = run_stage(cfg, None, say)
    from eval.data import load_from_config

    d = cfg.data
    train = load_from_config(cfg.supervised.data or d, "train")  # the SFT questions' dataset (TRUST-SQL: its own)
    chain_ids = {ex.id for ex in fixed_subset(train, cfg.supervised.questions, cfg.seed)}
    return {
        "design": recipe,
        "summary": summary,
        "warm_start": {k: v for k, v in warm.items() if isinstance(v, (int, float))},
        "warm_start_s": round(warm_s, 1),
        "chain_s": round(time.perf_counter() - chain_start, 1),
        "overlap_warm_chain": len(chain_ids & set(warm_ids)),
        "sizes": {
            "questions": cfg.supervised.questions,
            "k": cfg.supervised.samples,
            "dev": d.eval_limit,
            "rl_steps": cfg.trainer.total_steps,
            "warm_examples": args.warm_examples,
        },
        "load_average": os.getloadavg(),
    }


def row(result: dict[str, Any]) -> str:
    s = result["summary"]

    def pct(v: Any) -> str:
        return "-" if v is None else f"{100 * v:.1f} %"

    def passk(p: Any) -> str:
        return (
            "-"
            if not p
            else f"{p['pass_at_k']:.3f} ({p['bands']['all_solved']}/{p['bands']['partly_solved']}/"
            f"{p['bands']['all_wrong']})"
        )

    hard = s.get("hard_gained") or {}
    sft = s.get("sft") or {}
    rl = s.get("rl") or {}
    minutes = (result["warm_start_s"] + result["chain_s"]) / 60
    return (
        f"| {result['design']} | {passk(s.get('pass_at_k'))} | {passk(s.get('pass_at_k_after_sft'))} | "
        f"{hard.get('solved_after', '-')}/{hard.get('hard_before', '-')} | {s.get('rows', 0)} | "
        f"{int(sft.get('steps', 0))} | {pct(s.get('ex_before'))} → {pct(s.get('ex_after_sft'))} → "
        f"{pct(s.get('ex_after_rl'))} | {rl.get('questions', '-')} | {minutes:.1f} min |"
    )


HEADER = (
    "| design | pass@k before SFT (solved/partly/wrong) | pass@k after SFT | hard gained | SFT rows | "
    "SFT steps | EX before → after SFT → after RL | RL questions | wall time |\n"
    "|---|---|---|---|---|---|---|---|---|"
)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    designs = registered_designs()
    parser.add_argument("--designs", nargs="+", default=designs, choices=designs)
    parser.add_argument("--questions", type=int, default=8, help="training questions for traces and pass@k")
    parser.add_argument("--k", type=int, default=4, help="samples per question for pass@k and mining")
    parser.add_argument("--dev", type=int, default=8, help="held-out minibird dev questions for EX")
    parser.add_argument("--rl-steps", type=int, default=2, help="GRPO steps after SFT (laptop sizes)")
    parser.add_argument("--warm-examples", type=int, default=32, help="demonstrations in the format warm start")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="runs/stages_measure")
    parser.add_argument("--override", nargs="*", default=[], help="extra config overrides for the chain")
    args = parser.parse_args(argv)
    os.environ.setdefault("WANDB_MODE", "offline")
    say = print
    say(
        f"[measure] designs {args.designs}; {args.questions} training questions, k={args.k}, {args.dev} dev "
        f"questions, {args.rl_steps} RL steps, warm start on {args.warm_examples} demonstrations; load average "
        f"{os.getloadavg()}"
    )
    results_path = Path(args.out) / "stages_measure.json"
    results = json.loads(results_path.read_text()) if results_path.exists() else {}
    for recipe in args.designs:
        results[recipe] = measure(recipe, args, say)
        results_path.parent.mkdir(parents=True, exist_ok=True)
        results_path.write_text(json.dumps(results, indent=2, default=str))
        say(
            f"[measure] {recipe}: warm start {results[recipe]['warm_start_s']:.0f}s, chain "
            f"{results[recipe]['chain_s']:.0f}s; warm-start questions among the chain's: "
            f"{results[recipe]['overlap_warm_chain']}"
        )
    say(HEADER)
    for recipe in sorted(results):
        if recipe in results:
            say(row(results[recipe]))


if __name__ == "__main__":
    main()
