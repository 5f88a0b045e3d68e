"""One design's laptop rollout, generation arm by arm: the same questions, seeds and
sampling, so the same prompts and (in fp32) the same tokens, with each arm's seconds and
its ratio to today's path (``plain``: every turn re-encodes the whole conversation).

The rollout is the local engine's, built by ``LocalTrainer`` with the laptop profile
(recipe, agent, sampling, limits, the generation copy, ``model.decode_attention``): G
episodes for each of ``--questions`` training questions (``--eval``: the greedy held-out
rollout instead, one episode per question). Before the timed arms every question's first
prompt is built once (database profiles, few-shot pools), so no arm pays first-use costs.

Arms are entries of ``ARMS``: a name and how to build the ``GenerateFn`` from the trainer.
``prefix_reuse`` keeps each episode's KV cache between turns
(training/generation/prefix_reuse.py); ``prefix+matmul`` adds the hybrid CPU decode
attention on a copy of the weights (the engine uses it only on its bf16 copy, so on an
fp32 rollout this arm shows what one-token decode attention costs). A generation copy
(another dtype, quantised weights) is one more entry there.

    OMP_NUM_THREADS=1 python benchmarks/bench_rollout.py                 # ReToolSQL, embedded SmolLM2
    python benchmarks/bench_rollout.py --model runs/retoolsql/warm_start  # after the warm start
    python benchmarks/bench_rollout.py --tiny --questions 2               # the tests' tiny model (seconds)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for tests.helpers

from training.engines.local.trainer import generation_rows  # noqa: E402 - after the path above
from training.rollout import GenerateWrapper  # noqa: E402


def _hf(prefix_reuse: bool) -> Callable[[Any], Any]:
    def build(trainer: Any) -> Any:
        from training.generation.hf import hf_generate

        chunk = generation_rows(trainer.cfg)  # as the engine builds it
        return hf_generate(
            trainer.gen_model, trainer.tokenizer, trainer.device, None, chunk, logprobs=True, prefix_reuse=prefix_reuse
        )

    return build


def _matmul_decode(trainer: Any) -> Any:
    """Prefix reuse on a copy of the generation weights with the hybrid CPU attention
    (training/generation/cpu_attention.py), which the engine gives only its bf16 copy: how
    much of an fp32 rollout is one-token decode attention."""
    import copy

    from training.generation.cpu_attention import use_hybrid_cpu_attention
    from training.generation.hf import hf_generate

    model = copy.deepcopy(trainer.gen_model).eval()
    use_hybrid_cpu_attention(model)
    chunk = generation_rows(trainer.cfg)
    return hf_generate(model, trainer.tokenizer, trainer.device, None, chunk, logprobs=True, prefix_reuse=True)


def _int8_copy_concat(trainer: Any) -> Any:
    """``prefix+int8`` with transformers' own KV cache, which copies every layer's keys and
    values at each decode step (the engine's default writes them in place:
    training/generation/growing_cache.py)."""
    generate = _int8_copy(trainer)
    generate.growing_cache = False
    return generate


def _int8_copy(trainer: Any) -> Any:
    """Prefix reuse on the int8 generation copy of the fp32 policy, built as the engine
    builds it (``generation_copy``: the hybrid decode attention with
    ``model.decode_attention=auto``): what a CPU without native bf16 runs
    (``--generation-dtype fp32`` makes the other arms that CPU's fp32 path)."""
    from training.engines.local.policy_models import generation_copy
    from training.generation.hf import hf_generate

    model = generation_copy(trainer.model, "cpu", "int8", trainer.cfg.model.decode_attention)
    chunk = generation_rows(trainer.cfg)
    return hf_generate(model, trainer.tokenizer, trainer.device, None, chunk, logprobs=True, prefix_reuse=True)


# name -> GenerateFn from a built LocalTrainer; the first arm is the baseline of the ratios.
# A generation copy (another dtype, quantised weights) is one more entry here.
ARMS: dict[str, Callable[[Any], Any]] = {
    "plain": _hf(prefix_reuse=False),
    "prefix_reuse": _hf(prefix_reuse=True),
    "prefix+matmul": _matmul_decode,
    "prefix+int8": _int8_copy,
    "prefix+int8+concat": _int8_copy_concat,
}


class Timed(GenerateWrapper):
    """Counts the seconds spent inside ``generate`` (the rest is agents, tools, tokenizer)."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.seconds, self.calls = 0.0, 0

    def __call__(self, prompts: list[list[int]], params: Any) -> list[Any]:
        start = time.perf_counter()
        try:
            return self.inner(prompts, params)
        finally:
            self.seconds += time.perf_counter() - start
            self.calls += 1


def build_trainer(args: argparse.Namespace, run_dir: str) -> Any:
    from training.config import compose_tree
    from training.engines.local.trainer import LocalTrainer, TrainerInputs
    from training.run import prepare_config

    overrides = [
        f"recipe={args.recipe}",
        "engine=local",
        "engine.device=cpu",
        "logger=[]",
        f"run_dir={run_dir}",
        "trainer.eval_before_after=false",
        "stage.warm_start.enable=false",  # a rollout only: --model points at warm-started weights
        f"model.generation_dtype={args.generation_dtype}",
        *([f"model.path={args.model}"] if args.model else []),
        *args.override,
    ]
    cfg = prepare_config(compose_tree("config", overrides), {o.split("=", 1)[0] for o in overrides}, say=print)
    inputs = TrainerInputs()
    if args.tiny:
        from tests.helpers.tiny_model import tiny_model, tiny_tokenizer

        inputs = TrainerInputs(model=tiny_model(), tokenizer=tiny_tokenizer(), model_source="tiny")
    return LocalTrainer(cfg, inputs, say=print)


def requests_of(trainer: Any, args: argparse.Namespace) -> tuple[list[Any], Any, Any]:
    """(requests, agent, sampling): the laptop step's draw, or the held-out greedy rollout."""
    from tools import get_database

    if args.eval:
        examples, group, agent, sampling = trainer.eval_examples, 1, trainer.eval_agent, trainer.eval_sampling
    else:
        a = trainer.cfg.algorithm
        examples = [trainer.train_examples[i] for i in trainer.sampler.take(args.questions or a.batch_size)]
        group, agent, sampling = a.group_size, trainer.agent, trainer.sampling
    examples = examples[: args.questions] if args.questions else examples
    for ex in examples:  # first-use costs (schema profiles, few-shot pools) outside the timed arms
        agent.start(ex, get_database(ex.db_path), ())
    return [(ex, get_database(ex.db_path), g) for ex in examples for g in range(group)], agent, sampling


def run_arm(trainer: Any, name: str, requests: list[Any], agent: Any, sampling: Any, seed: int) -> dict[str, Any]:
    import torch

    from training.rollout import run_episodes

    generate = Timed(ARMS[name](trainer))
    torch.manual_seed(seed)
    start = time.perf_counter()
    trajectories = run_episodes(agent, requests, trainer.tokenizer, generate, sampling, trainer.limits)
    seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "generate": generate.seconds,
        "calls": generate.calls,
        "reused": getattr(generate.inner, "reused_tokens", 0),
        "tokens": [t.response_ids for t in trajectories],
        "turns": sum(len(t.result.turns) for t in trajectories),
        "policy": sum(t.num_policy_tokens for t in trajectories),
        "prompt": sum(len(t.prompt_ids) for t in trajectories),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", default="retoolsql")
    parser.add_argument("--questions", type=int, default=0, help="questions (default: the laptop step's batch)")
    parser.add_argument("--eval", action="store_true", help="the greedy held-out rollout instead of a training step's")
    parser.add_argument("--model", default=None, help="model.path (default: the embedded SmolLM2-135M)")
    parser.add_argument("--generation-dtype", default="auto", choices=("auto", "bf16", "int8", "fp32"))
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tiny", action="store_true", help="the tests' tiny model instead of SmolLM2")
    parser.add_argument("--override", nargs="*", default=[], help="extra Hydra overrides")
    args = parser.parse_args()

    import torch

    with tempfile.TemporaryDirectory() as run_dir:
        trainer = build_trainer(args, run_dir)
        requests, agent, sampling = requests_of(trainer, args)
        dtype = next(trainer.gen_model.parameters()).dtype
        print(
            f"[bench] {args.recipe}: {len(requests)} episodes, generation copy {dtype}, "
            f"temperature {sampling.temperature}, {torch.get_num_threads()} thread(s)"
        )
        results = {name: run_arm(trainer, name, requests, agent, sampling, args.seed) for name in args.arms}
    base = results[args.arms[0]]
    print(
        f"\n{'arm':<20} {'seconds':>8} {'generate':>9} {'speed-up':>9} {'same tokens':>12} "
        f"{'turns':>6} {'policy tok':>10} {'prompt tok':>10} {'reused tok':>10}"
    )
    for name, r in results.items():
        same = sum(a == b for a, b in zip(r["tokens"], base["tokens"], strict=True))
        same_text = f"{same}/{len(r['tokens'])}"
        print(
            f"{name:<20} {r['seconds']:>8.1f} {r['generate']:>9.1f} {base['seconds'] / r['seconds']:>8.2f}x "
            f"{same_text:>12} {r['turns']:>6} {r['policy']:>10} {r['prompt']:>10} {r['reused']:>10}"
        )


if __name__ == "__main__":
    main()
