"""A throughput **simulation** of veRL's sync and async trainers: episodes per second and
the share of the time the rollout server sits idle, ``sync`` against ``colocate_async`` and
``separate_async`` at the same staleness bound.

What runs is the fit tier's loop (``tests/training/engines/verl/fit/harness.py``): veRL's real
``fit()``, replay buffer, TransferQueue, agent-loop and reward workers, the project's
trainers, with the FSDP worker group and the vLLM server replaced by doubles on CPU. It is a
simulation because the two costs a GPU run is made of are modelled, not measured:

- **generation**: the server double sleeps ``--token-ms`` after each token, times a factor
  drawn per request from the measured distribution of generated tokens per turn in the four
  main jobs' ``samples.jsonl`` (``benchmarks/data/main_job_turn_tokens.json``: the turn's
  tokens over the median turn's), so a turn's time follows the spread of real turn lengths;
- **the update**: the worker-group double sleeps ``--update-s`` per optimizer step, standing
  in for the FSDP forward/backward on GPUs.

The tiny model's own compute rides on top of both. What it can show is how each trainer
schedules generation around updates and long turns; what it cannot show is vLLM's batching,
GPU memory, or NCCL transfer times. Each mode gets its own agent-loop workers::

    python benchmarks/bench_async_throughput.py                       # think2sql, 6 steps
    python benchmarks/bench_async_throughput.py --recipe trustsql --steps 4 --update-s 2
    python benchmarks/bench_async_throughput.py --recipe trustsql --batch 4 --group 4   # 16 episodes a step
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# One torch thread in this process, as in the Ray workers (harness.env_for_workers): the
# doubles' own compute is not what is modelled, and two threads here spin-waited for cores the
# Ray actors held (think2sql, B x G = 4 x 4: separate_async 1.35-1.36x with two, 1.46-1.47x with one).
os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for tests.*

import ray  # noqa: E402 - after the path above

from tests.helpers.threads import outer_threads  # noqa: E402
from tests.training.engines.verl.fit import async_harness as A  # noqa: E402
from tests.training.engines.verl.fit import harness as H  # noqa: E402
from tests.training.engines.verl.fit.test_async import COMMON, RECIPES, wrong_script  # noqa: E402
from training.engines.verl.workers.async_trainers import VersionedAsyncClient  # noqa: E402

MODES = ("sync", "colocate_async", "separate_async")
TURN_TOKENS = Path(__file__).resolve().parent / "data" / "main_job_turn_tokens.json"


def latency_factors(recipe: str) -> list[float]:
    """Each measured turn's generated tokens over the median turn's, for ``recipe``."""
    counts = json.loads(TURN_TOKENS.read_text())["turn_tokens"][recipe]
    median = statistics.median(counts)
    return [c / median for c in counts if c > 0]


def with_update_time(trainer_cls: Any, seconds: float) -> Any:
    """``trainer_cls`` whose worker group takes ``seconds`` more per optimizer step."""
    group_cls = trainer_cls.worker_group_cls

    class TimedGroup(group_cls):  # type: ignore[misc, valid-type]
        def _train_mini_batch(self, data: Any) -> Any:
            time.sleep(seconds)
            return super()._train_mini_batch(data)

    return type(f"Timed{trainer_cls.__name__}", (trainer_cls,), {"worker_group_cls": TimedGroup})


def run_mode(recipe: str, mode: str, root: Path, args: argparse.Namespace) -> dict[str, Any]:
    steps, batch, group = args.steps, args.batch, args.group
    changes = [
        f"trainer.total_steps={steps}",
        f"trainer.staleness={args.staleness}",
        f"trainer.mode={mode}",
        f"algorithm.batch_size={batch}",
        f"algorithm.group_size={group}",
    ]
    overrides = list({o.split("=")[0]: o for o in [*COMMON, *RECIPES[recipe], *changes]}.values())
    train, val = H.examples(root, recipe, n_train=batch * (steps + 2), n_val=1)
    config = H.verl_config(recipe, root / mode, H.tiny_model_dir(root), train, val, overrides)
    config = H.with_changes(config, {"data.shuffle": False})
    trainer_cls = H.CpuTrainer if mode == "sync" else A.TRAINERS[mode]
    session = H.start_session(
        recipe,
        root,
        config,
        writers={"0": "script", "1": "wrong"},
        wrong=wrong_script(recipe),
        client_cls=None if mode == "sync" else VersionedAsyncClient,
    )
    try:
        server = session.servers.server
        ray.get(server.set_latency.remote(args.token_ms / 1000.0, 1.0, latency_factors(recipe)))
        busy_before = ray.get(server.busy.remote())
        start = time.monotonic()
        H.run_fit(session, config, trainer_cls=with_update_time(trainer_cls, args.update_s))
        seconds = time.monotonic() - start
        busy = ray.get(server.busy.remote()) - busy_before
        if mode != "sync":
            A.drain()
    finally:
        H.stop_session()
    episodes = steps * batch * group * (2 if recipe == "dualsql" else 1)  # DualSQL: a linker and a generator each
    return {"mode": mode, "seconds": seconds, "episodes": episodes, "idle": max(0.0, 1.0 - busy / seconds)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", default="think2sql", choices=sorted(RECIPES))
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--staleness", type=int, default=1)
    parser.add_argument("--batch", type=int, default=2, help="questions per step (algorithm.batch_size)")
    parser.add_argument("--group", type=int, default=2, help="episodes per question (algorithm.group_size)")
    parser.add_argument("--token-ms", type=float, default=20.0, help="modelled milliseconds per generated token")
    parser.add_argument("--update-s", type=float, default=1.0, help="modelled seconds per optimizer step")
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(outer_threads(os.environ["OMP_NUM_THREADS"]))
    print(
        f"# SIMULATION: veRL's fit() on CPU with doubles; {args.recipe}, {args.steps} steps, "
        f"B={args.batch} G={args.group}, staleness {args.staleness}, {args.token_ms:g} ms/token "
        f"x the main jobs' turn-length spread, {args.update_s:g} s per update, {torch.get_num_threads()} thread(s)"
    )
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_async_") as tmp:
        for mode in args.modes:
            root = Path(tmp) / mode
            root.mkdir()
            row = run_mode(args.recipe, mode, root, args)
            rows.append(row)
            print(f"# {mode}: {row['seconds']:.1f} s", flush=True)
    base = next((r for r in rows if r["mode"] == "sync"), rows[0])
    base_rate = base["episodes"] / base["seconds"]
    versus = "vs " + base["mode"]
    print(f"{'mode':<16} {'fit() s':>8} {'episodes':>9} {'episodes/s':>11} {versus:>10} {'rollout idle':>13}")
    for r in rows:
        rate = r["episodes"] / r["seconds"]
        print(
            f"{r['mode']:<16} {r['seconds']:8.1f} {r['episodes']:9d} {rate:11.3f} "
            f"{rate / base_rate:9.2f}x {100 * r['idle']:12.0f}%"
        )


if __name__ == "__main__":
    main()
