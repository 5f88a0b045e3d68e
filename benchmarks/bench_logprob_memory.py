"""Peak memory and time of one log-prob forward + backward on the embedded model, the
plain path (full response logits) against the chunked LM head (training/engines/local/logprobs/chunked.py).

The batch is what a ReToolSQL laptop update sees at its longest: ``--rows`` trajectories of
``--prompt`` prompt tokens and ``--response`` response tokens (random ids, fixed seed). Each
arm runs in its own child process, so each peak is its own: the child loads SmolLM2-135M,
runs a small warm-up pass, reads its RSS (the baseline), then runs the pass the trainer
runs (log-probs with entropy, a loss, ``backward``) and reports its peak RSS (``VmHWM``) above
the baseline, the seconds, and a digest of the log-probs so the two arms can be compared.

    python benchmarks/bench_logprob_memory.py [--rows 2 --prompt 1000 --response 1024 --autocast bf16] [--checkpointing]
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


def _status(key: str) -> int:
    with open("/proc/self/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {key} in /proc/self/status")


def _reset_peak() -> None:
    """Start VmHWM from the current RSS (Linux >= 4.0: writing 5 to clear_refs)."""
    with open("/proc/self/clear_refs", "w", encoding="ascii") as handle:
        handle.write("5")


def run_arm(arm: str, rows: int, prompt: int, response: int, autocast_name: str, checkpointing: bool) -> dict[str, Any]:
    import torch

    from training.engines.local import loss as lp
    from training.generation.loading import ensure_embedded_checkpoint, load_model

    autocast = {"bf16": torch.bfloat16, "fp32": None}[autocast_name]
    model = load_model(str(ensure_embedded_checkpoint(lambda _: None)), "cpu", say=lambda _: None).model
    model.train()
    if checkpointing:  # model.gradient_checkpointing=true: layer activations recomputed in backward
        model.gradient_checkpointing_enable()
    fn = lp.response_log_probs if arm == "chunked" else lp.plain_response_log_probs
    gen = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size

    def make(p: int, r: int) -> lp.PolicyBatch:
        prompts = [torch.randint(0, vocab, (p,), generator=gen).tolist() for _ in range(rows)]
        responses = [torch.randint(0, vocab, (r - 7 * i,), generator=gen).tolist() for i in range(rows)]
        masks = {"full": [[1.0] * len(x) for x in responses]}
        return lp.build_policy_batch(prompts, responses, masks, {"full": [1.0] * rows}, 0)

    def step(batch: lp.PolicyBatch) -> Any:
        model.zero_grad(set_to_none=True)
        logp, entropy = fn(model, batch, "cpu", autocast, with_entropy=True)
        (-(logp.sum())).backward()
        return logp.detach()

    step(make(16, 16))  # imports, allocator and autograd set up in the baseline
    model.zero_grad(set_to_none=True)
    batch = make(prompt, response)
    baseline = _status("VmRSS")
    _reset_peak()
    started = time.perf_counter()
    logp = step(batch)
    seconds = time.perf_counter() - started
    peak = _status("VmHWM")
    return {
        "arm": arm,
        "peak_above_baseline_mb": (peak - baseline) / MB,
        "baseline_mb": baseline / MB,
        "seconds": seconds,
        "logp_sum": float(logp.sum()),
        "tokens": int((logp != 0).sum()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2)
    parser.add_argument("--prompt", type=int, default=1000)
    parser.add_argument("--response", type=int, default=1024)
    parser.add_argument("--autocast", choices=["bf16", "fp32"], default="bf16")
    parser.add_argument(
        "--checkpointing",
        action="store_true",
        help="both arms with gradient checkpointing (model.gradient_checkpointing)",
    )
    parser.add_argument("--arm", choices=["plain", "chunked"], help=argparse.SUPPRESS)  # a child's arm
    args = parser.parse_args()
    if args.arm:
        result = run_arm(args.arm, args.rows, args.prompt, args.response, args.autocast, args.checkpointing)
        print(json.dumps(result))
        return
    results = {}
    for arm in ("plain", "chunked"):
        command = [sys.executable, __file__, "--arm", arm, "--rows", str(args.rows), "--prompt", str(args.prompt)]
        command += ["--response", str(args.response), "--autocast", args.autocast]
        command += ["--checkpointing"] if args.checkpointing else []
        out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        results[arm] = json.loads(out.strip().splitlines()[-1])
        r = results[arm]
        print(
            f"{arm:8s} peak {r['peak_above_baseline_mb']:8.1f} MB above a {r['baseline_mb']:.0f} MB baseline, "
            f"{r['seconds']:6.2f} s, sum of log-probs {r['logp_sum']:.4f} over {r['tokens']} tokens"
        )
    plain, new = results["plain"], results["chunked"]
    print(
        f"ratio plain/chunked: memory {plain['peak_above_baseline_mb'] / new['peak_above_baseline_mb']:.2f}x, "
        f"time {plain['seconds'] / new['seconds']:.2f}x "
        f"({args.rows} rows x {args.prompt} prompt + {args.response} response tokens, autocast {args.autocast}, "
        f"gradient checkpointing {'on' if args.checkpointing else 'off'})"
    )


if __name__ == "__main__":
    main()
