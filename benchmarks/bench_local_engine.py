"""Local engine step-time breakdown per recipe, and the rollout driver's overhead.

For each recipe: one training step with the laptop profile (or the sizes given below) on
the chosen model, split into generation, tools (rollout time outside ``generate``: agent
steps, SQLite, tokenization), rewards, log-prob passes and the update. Then the rollout
driver's overhead: the same generate calls replayed bare (same prompts, same sampling,
same budgets) vs. through ``run_episodes``; the ratio is driver time / bare time.

    python benchmarks/bench_local_engine.py                     # embedded SmolLM2, all recipes
    python benchmarks/bench_local_engine.py --tiny --recipes trustsql dualsql
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for tests.helpers


def make_config(recipe: str, run_dir: str, overrides: list[str]) -> Any:
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf

    from training.run import prepare_config

    base = [f"recipe={recipe}", "engine=local", "engine.device=cpu", "logger=[]", f"run_dir={run_dir}",
            "trainer.eval_before_after=false", "trainer.total_steps=1", *overrides]
    with initialize_config_module("recipes", version_base=None):
        raw = OmegaConf.to_container(compose("config", overrides=base), resolve=True)
    explicit = {o.split("=", 1)[0] for o in base}
    return prepare_config(raw, explicit, say=lambda _: None)


class RecordingGenerate:
    """Wraps a GenerateFn and keeps every call (prompts, params) for the bare replay."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.calls, self.seconds = inner, [], 0.0

    def __call__(self, prompts: list[list[int]], params: Any) -> list[Any]:
        start = time.perf_counter()
        out = self.inner(prompts, params)
        self.seconds += time.perf_counter() - start
        self.calls.append(([list(p) for p in prompts], params))
        return out


def bench_recipe(recipe: str, args: argparse.Namespace) -> dict[str, float]:
    import torch

    from training.engines.local import LocalTrainer, TrainerInputs

    with tempfile.TemporaryDirectory() as run_dir:
        cfg = make_config(recipe, run_dir, args.override)
        inputs = TrainerInputs()
        if args.tiny:
            from tests.helpers.tiny_model import tiny_model, tiny_tokenizer

            inputs = TrainerInputs(model=tiny_model(), tokenizer=tiny_tokenizer(), model_source="tiny")
        trainer = LocalTrainer(cfg, inputs, say=lambda _: None)
        torch.manual_seed(0)
        metrics = trainer.train_step()
        times = {k[5:]: v for k, v in metrics.items() if k.startswith("time/")}

        # rollout-driver overhead: the same questions, greedy, through the driver vs bare
        examples = trainer.train_examples[: cfg.algorithm.batch_size]
        recorder = RecordingGenerate(trainer.generate)
        trainer.generate = recorder
        greedy = dataclasses.replace(trainer.sampling, temperature=0.0)
        start = time.perf_counter()
        trainer.rollout(examples, cfg.algorithm.group_size, trainer.agent, greedy)
        driver = time.perf_counter() - start
        start = time.perf_counter()
        for prompts, params in recorder.calls:
            recorder.inner(prompts, params)
        bare = time.perf_counter() - start
    times["driver_s"], times["bare_generate_s"] = driver, bare
    times["overhead_ratio"] = driver / bare if bare else float("nan")
    times["trajectories"] = metrics.get("sampling/trajectories_updated", 0.0)
    times["turns"] = metrics.get("episode/turns", 0.0)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipes", nargs="+", default=["retoolsql", "think2sql", "trustsql", "dualsql"])
    parser.add_argument("--tiny", action="store_true", help="tiny random model (seconds) instead of SmolLM2")
    parser.add_argument("--override", nargs="*", default=[], help="extra Hydra overrides, e.g. algorithm.group_size=2")
    args = parser.parse_args()
    cols = ["generation", "tools", "rewards", "logprob", "update", "step"]
    print(f"{'recipe':<10} " + " ".join(f"{c:>10}" for c in cols) + f" {'turns':>6} {'driver/bare':>12}")
    for recipe in args.recipes:
        t = bench_recipe(recipe, args)
        print(f"{recipe:<10} " + " ".join(f"{t.get(c, 0.0):>9.2f}s" for c in cols)
              + f" {t['turns']:>6.2f} {t['overhead_ratio']:>11.3f}x"
              + f"   (driver {t['driver_s']:.1f}s vs bare generate {t['bare_generate_s']:.1f}s)", flush=True)


if __name__ == "__main__":
    main()
