"""A local GRPO step against its bare compute, per recipe, with the step-time breakdown.

For each recipe: ``--warmup`` steps first (first-use costs: database profiles, chat
template probes, gold results), then one measured training step with the laptop profile
(or the sizes given below) on the chosen model, split into generation, tools (rollout time
outside ``generate``: agent steps, SQLite, tokenization), rewards, log-prob passes and the
update.

Its bare compute, in the same run on the same tokens: the step's ``generate`` calls
replayed (same prompts, same sampling parameters, same pre-step weights and RNG state, so
the same tokens), then forward + backward over the step's update buffer in the engine's
micro-batches and one AdamW step per mini-batch, counting only the passes the algorithm
needs: an old-log-prob forward only with more than one mini-batch (or with the rollout
correction, whose IS weights and rejection mask need the whole buffer's training
log-probs before the first optimizer step), a reference forward only while beta > 0 (on a
reference kept loaded: the step loads it once per update, which counts as overhead).
``step/bare`` is the engine's overhead over that compute (the goal: at most 1.2x), in
wall-clock seconds and in this process's CPU seconds (``cpu``). On a shared machine the
load changes between the step and its replay, and ``generate`` dominates both; the
``same gen`` ratio counts the step's ``generate`` calls (``time/generation``: exactly the
replayed calls) at their replayed time, so it is the engine's own overhead - everything
outside ``generate`` against the bare passes and AdamW. ``driver/bare`` is the rollout
(driver + agents + tools + generate) over the bare ``generate`` replay.

    python benchmarks/bench_local_engine.py                     # embedded SmolLM2, all recipes
    python benchmarks/bench_local_engine.py --tiny --recipes trustsql dualsql
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for tests.helpers

from training.rollout import GenerateWrapper  # noqa: E402 - after the path above


def make_config(recipe: str, run_dir: str, overrides: list[str]) -> Any:
    from training.config import compose_tree
    from training.run import prepare_config

    base = [
        f"recipe={recipe}",
        "engine=local",
        "engine.device=cpu",
        "logger=[]",
        f"run_dir={run_dir}",
        "trainer.eval_before_after=false",
        "trainer.total_steps=1",
        *overrides,
    ]
    raw = compose_tree("config", base)
    explicit = {o.split("=", 1)[0] for o in base}
    return prepare_config(raw, explicit, say=lambda _: None)


class RecordingGenerate(GenerateWrapper):
    """Wraps a GenerateFn and keeps every call (prompts, params) for the bare replay."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.calls, self.seconds = [], 0.0

    def __call__(self, prompts: list[list[int]], params: Any) -> list[Any]:
        start = time.perf_counter()
        out = self.inner(prompts, params)
        self.seconds += time.perf_counter() - start
        self.calls.append(([list(p) for p in prompts], params))
        return out


def bench_recipe(recipe: str, args: argparse.Namespace) -> dict[str, float]:
    import copy

    import torch

    from training.engines.local.trainer import LocalTrainer, TrainerInputs

    with tempfile.TemporaryDirectory() as run_dir:
        cfg = make_config(recipe, run_dir, args.override)
        inputs = TrainerInputs()
        if args.tiny:
            from tests.helpers.tiny_model import tiny_model, tiny_tokenizer

            inputs = TrainerInputs(model=tiny_model(), tokenizer=tiny_tokenizer(), model_source="tiny")
        trainer = LocalTrainer(cfg, inputs, say=lambda _: None)
        torch.manual_seed(0)
        for _ in range(args.warmup):
            trainer.train_step()
        policy = copy.deepcopy(trainer.model)  # the weights the measured step starts from
        gen_state = {k: v.clone() for k, v in trainer.gen_model.state_dict().items()}
        recorder = RecordingGenerate(trainer.generate)
        trainer.generate = recorder
        rng = torch.get_rng_state()
        cpu = time.process_time()
        metrics = trainer.train_step()
        step_cpu = time.process_time() - cpu
        trainer.generate = recorder.inner
        trainer.gen_model.load_state_dict(gen_state)  # replay on the step's own generation weights
        torch.set_rng_state(rng)  # ... and its own samples
        beta = metrics["kl/beta"]
        with trainer.models.reference() if beta > 0 else contextlib.nullcontext() as ref_model:
            # the bare passes keep the reference loaded: its load (about 1 s) is the step's own
            bare = bare_compute(trainer, policy, recorder, trainer.last_buffer, beta, ref_model)
    times = {k[5:]: v for k, v in metrics.items() if k.startswith("time/")}
    times.update(bare)
    times["bare"] = bare["bare_generate"] + bare["bare_passes"] + bare["bare_adamw"]
    times["step_over_bare"] = times["step"] / times["bare"] if times["bare"] else float("nan")
    times["cpu_step_over_bare"] = step_cpu / bare["bare_cpu"] if bare["bare_cpu"] else float("nan")
    same = times["step"] - times.get("generation", 0.0) + bare["bare_generate"]  # the step, its generate as replayed
    times["same_generate_over_bare"] = same / times["bare"] if times["bare"] else float("nan")
    rollout = times.get("generation", 0.0) + times.get("tools", 0.0)
    times["driver_over_bare"] = rollout / bare["bare_generate"] if bare["bare_generate"] else float("nan")
    times["trajectories"] = metrics.get("sampling/trajectories_updated", 0.0)
    times["turns"] = metrics.get("episode/turns", 0.0)
    return times


def bare_compute(
    trainer: Any, policy: Any, recorder: RecordingGenerate, buffer: Any, beta: float, ref_model: Any
) -> dict[str, float]:
    """The step's generate calls replayed, then forward + backward and AdamW on its buffer
    (the passes the algorithm needs, see the module docstring); seconds per part."""
    import torch

    from training.engines.local import loss as lp
    from training.engines.local.update import _split, micro_batches

    cpu = time.process_time()
    start = time.perf_counter()
    for prompts, params in recorder.calls:
        recorder.inner(prompts, params)
    recorder.clear()  # a prefix-reuse generate's caches (the replay calls it directly)
    out = {"bare_generate": time.perf_counter() - start, "bare_passes": 0.0, "bare_adamw": 0.0}
    if not buffer.size:
        out["bare_cpu"] = time.process_time() - cpu
        return out
    cfg, models = trainer.cfg, trainer.models
    o, a = cfg.optim, cfg.algorithm
    optimizer = torch.optim.AdamW(
        policy.parameters(), lr=o.lr, betas=(o.betas[0], o.betas[1]), weight_decay=o.weight_decay
    )
    chunks = _split(list(range(buffer.size)), a.mini_batches)
    correct = a.rollout_correction.enabled and all(t.logprobs is not None for t in buffer.trajectories)
    pad, size = trainer.tokenizer.pad_token_id, o.micro_batch_size
    share = trainer.updater.share  # the engine's micro-batches: rows behind a shared prefix packed

    def forward(model: Any, rows: list[int]) -> torch.Tensor:
        logp, _ = lp.response_log_probs(model, buffer.policy_batch(rows, pad, share), models.device, models.autocast)
        return logp  # [micro, resp_len]

    start = time.perf_counter()
    if len(chunks) > 1 or correct:  # old log-probs: a no-grad pass over the whole buffer
        with torch.no_grad():
            for micro in micro_batches(list(range(buffer.size)), buffer, size, share):
                forward(policy, micro)
    adamw = 0.0
    for rows in chunks:
        for micro in micro_batches(rows, buffer, size, share):
            if beta > 0:
                with torch.no_grad():
                    forward(ref_model, micro)
            batch = buffer.policy_batch(micro, pad, share)
            logp = forward(policy, micro)
            mask, adv = batch.masks["full"], batch.advantages["full"]  # [micro, resp_len], [micro]
            (-(logp * adv[:, None] * mask).sum() / mask.sum().clamp(min=1.0)).backward()
        tick = time.perf_counter()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        adamw += time.perf_counter() - tick
    out["bare_passes"] = time.perf_counter() - start - adamw
    out["bare_adamw"] = adamw
    out["bare_cpu"] = time.process_time() - cpu
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    from agents.designs import list_designs

    parser.add_argument("--recipes", nargs="+", default=list_designs(), help="default: every registered design")
    parser.add_argument("--tiny", action="store_true", help="tiny random model (seconds) instead of SmolLM2")
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured steps before the measured one")
    parser.add_argument("--override", nargs="*", default=[], help="extra Hydra overrides, e.g. algorithm.group_size=2")
    args = parser.parse_args()
    cols = [
        "step",
        "bare",
        "generation",
        "tools",
        "rewards",
        "logprob",
        "update",
        "bare_generate",
        "bare_passes",
        "bare_adamw",
    ]
    print(
        f"{'recipe':<10} "
        + " ".join(f"{c:>13}" for c in cols)
        + f" {'rows':>5} {'turns':>6} {'step/bare':>10}"
        + f" {'cpu':>8} {'same gen':>9} {'driver/bare':>12}"
    )
    for recipe in args.recipes:
        t = bench_recipe(recipe, args)
        print(
            f"{recipe:<10} "
            + " ".join(f"{t.get(c, 0.0):>12.2f}s" for c in cols)
            + f" {t['trajectories']:>5.0f} {t['turns']:>6.2f} {t['step_over_bare']:>9.3f}x"
            + f" {t['cpu_step_over_bare']:>7.3f}x {t['same_generate_over_bare']:>8.3f}x"
            + f" {t['driver_over_bare']:>11.3f}x",
            flush=True,
        )


if __name__ == "__main__":
    main()
