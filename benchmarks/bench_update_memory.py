"""Peak resident memory of a laptop update on the embedded model, with glibc's default
allocator settings against the fixed mmap threshold ``training.run`` sets
(``training.runs.usage.bound_heap_growth``).

Each arm is its own child process (the threshold is a process setting): it loads
SmolLM2-135M in fp32 with gradient checkpointing (the laptop profile's), makes an AdamW
optimizer, and runs ``--steps`` optimizer steps, each a forward and backward through the
project's log-prob path (``training.engines.local.loss.response_log_probs``) over
``--rows`` rows of ``--prompt`` prompt and ``--response`` response tokens (random ids, fixed
seed), one row per micro-batch pair as the warm start runs them. It reports the process's
peak RSS (``VmHWM``: model, gradients, AdamW state and activations together), the seconds,
and a digest of the last log-probs, which must be equal in both arms (the allocator does
not change the arithmetic).

    python benchmarks/bench_update_memory.py [--rows 2 --prompt 3800 --response 256 --steps 2 --autocast bf16]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

MB = 1 << 20


def run_arm(arm: str, args: argparse.Namespace) -> dict[str, Any]:
    if arm == "fixed":  # as training.run does first thing
        from training.runs.usage import bound_heap_growth

        assert bound_heap_growth()
    import torch

    from training.engines.local import loss as lp
    from training.generation.loading import ensure_embedded_checkpoint, load_model
    from training.runs.usage import peak_rss_bytes

    torch.manual_seed(0)
    autocast = {"bf16": torch.bfloat16, "fp32": None}[args.autocast]
    model = load_model(str(ensure_embedded_checkpoint(lambda _: None)), "cpu", say=lambda _: None).model
    model.train()
    model.gradient_checkpointing_enable()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    gen = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size

    def batch() -> lp.PolicyBatch:
        prompts = [torch.randint(0, vocab, (args.prompt,), generator=gen).tolist()]
        responses = [torch.randint(0, vocab, (args.response,), generator=gen).tolist()]
        masks = {"full": [[1.0] * args.response]}
        return lp.build_policy_batch(prompts, responses, masks, {"full": [1.0]}, 0)

    started = time.perf_counter()
    logp = torch.zeros(0)
    for _ in range(args.steps):
        optimizer.zero_grad(set_to_none=True)
        for _ in range(args.rows):
            logp, _ = lp.response_log_probs(model, batch(), "cpu", autocast)
            (-(logp.sum()) / args.rows).backward()
        optimizer.step()
    return {
        "arm": arm,
        "peak_mb": (peak_rss_bytes() or 0) / MB,
        "seconds": time.perf_counter() - started,
        "logp_sum": float(logp.detach().sum()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2)
    parser.add_argument("--prompt", type=int, default=3800)
    parser.add_argument("--response", type=int, default=256)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--autocast", choices=["bf16", "fp32"], default="bf16")
    parser.add_argument("--arm", choices=["default", "fixed"], help=argparse.SUPPRESS)  # a child's arm
    args = parser.parse_args()
    if args.arm:
        print(json.dumps(run_arm(args.arm, args)))
        return
    results = {}
    for arm in ("default", "fixed"):
        command = [sys.executable, __file__, "--arm", arm, "--rows", str(args.rows), "--prompt", str(args.prompt)]
        command += ["--response", str(args.response), "--steps", str(args.steps), "--autocast", args.autocast]
        out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        results[arm] = r = json.loads(out.strip().splitlines()[-1])
        print(f"{arm:8s} peak {r['peak_mb']:8.0f} MB, {r['seconds']:6.1f} s, last log-probs sum {r['logp_sum']:.4f}")
    default, fixed = results["default"], results["fixed"]
    print(
        f"ratio default/fixed: memory {default['peak_mb'] / fixed['peak_mb']:.2f}x, "
        f"time {default['seconds'] / fixed['seconds']:.2f}x ({args.steps} AdamW steps of {args.rows} x "
        f"{args.prompt} + {args.response} tokens, gradient checkpointing, autocast {args.autocast})"
    )


if __name__ == "__main__":
    main()
