"""CPU generation: sdpa attention vs the hybrid (sdpa prefill, plain-matmul one-token
decode; training/generation/cpu_attention.py) on the same bf16 weights and the same prompts.

Prints prefill time, decode time per step and the ratio, and whether the greedy tokens
are identical (same math; in bf16 a near-tie can flip a token).

    python benchmarks/bench_cpu_decode.py                    # embedded SmolLM2-135M
    python benchmarks/bench_cpu_decode.py --rows 8 --prompt-tokens 1200 --new-tokens 48
    python benchmarks/bench_cpu_decode.py --tiny             # the tests' tiny model (seconds)
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for tests.helpers


def load(tiny: bool) -> tuple[Any, Any]:
    import torch

    if tiny:
        from tests.helpers.tiny_model import tiny_model, tiny_tokenizer

        return tiny_model(seed=0).to(torch.bfloat16).eval(), tiny_tokenizer()
    from training.generation.loading import load_model

    loaded = load_model(None, "cpu", say=lambda _: None)
    return loaded.model.to(torch.bfloat16).eval(), loaded.tokenizer


def timed(model: Any, ids: Any, mask: Any, pad: int, new_tokens: int) -> tuple[float, float, Any]:
    """(prefill seconds, seconds per decode step, generated ids), greedy."""
    import torch

    def run(n: int) -> tuple[float, Any]:
        start = time.perf_counter()
        with torch.no_grad():
            out = model.generate(
                input_ids=ids,
                attention_mask=mask,
                max_new_tokens=n,
                min_new_tokens=n,
                do_sample=False,
                pad_token_id=pad,
            )
        return time.perf_counter() - start, out

    prefill, _ = run(1)
    total, out = run(new_tokens)
    return prefill, (total - prefill) / max(1, new_tokens - 1), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=1200)
    parser.add_argument("--new-tokens", type=int, default=48)
    args = parser.parse_args()

    import torch

    from training.generation.cpu_attention import use_hybrid_cpu_attention
    from training.generation.hf import left_pad

    torch.set_grad_enabled(False)
    model, tok = load(args.tiny)
    text = "SELECT name, city FROM schools WHERE enrollment > 100 ORDER BY name; " * 400
    base = tok.encode(text)[: args.prompt_tokens]
    rows = [base[: len(base) - 40 * (i % 4)] for i in range(args.rows)]  # mixed lengths: left padding
    ids, mask = left_pad(rows, tok.pad_token_id)
    hybrid = copy.deepcopy(model)
    if not use_hybrid_cpu_attention(hybrid):
        sys.exit(f"model type {model.config.model_type!r} is not supported by the hybrid attention")
    print(
        f"{args.rows} rows x ~{args.prompt_tokens} prompt tokens, {args.new_tokens} new tokens, bf16, "
        f"{torch.get_num_threads()} threads"
    )
    p0, d0, out0 = timed(model, ids, mask, tok.pad_token_id, args.new_tokens)
    p1, d1, out1 = timed(hybrid, ids, mask, tok.pad_token_id, args.new_tokens)
    print(f"{'attention':<28}{'prefill s':>10}{'decode ms/step':>16}")
    print(f"{'sdpa (baseline)':<28}{p0:>10.2f}{d0 * 1000:>16.1f}")
    print(f"{'hybrid (prefill sdpa)':<28}{p1:>10.2f}{d1 * 1000:>16.1f}")
    print(
        f"decode speed-up: {d0 / d1:.2f}x; prefill ratio {p1 / p0:.2f}; "
        f"greedy tokens identical: {bool(torch.equal(out0, out1))}"
    )


if __name__ == "__main__":
    main()
