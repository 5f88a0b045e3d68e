"""Which linear layers the int8 generation copy quantises: speed and closeness to fp32 of
each choice on the embedded SmolLM2-135M (training/generation/int8_copy.py's table).

For each arm (fp32, every linear layer int8, all but the MLP down projections (the copy's
choice), attention only, and bf16 weights for reference) it prints the prefill seconds of
``--rows`` random prompts of ``--prompt`` tokens, the seconds per decode step (10 steps), and,
on a repeated SQL prompt, the share of positions whose greedy next token equals fp32's and
the mean KL(fp32 || arm) in nats per token. Run it pinned to one core for stable figures:

    OMP_NUM_THREADS=1 taskset -c 0 python benchmarks/bench_int8_copy.py [--rows 8 --prompt 300]
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

SQL_TEXT = (
    "CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT, country TEXT, age INTEGER);\n"
    "Question: How many singers are from France? Write SQL.\n"
    "SELECT count(*) FROM singer WHERE country = 'France';\n"
) * 8


def quantised(model: Any, keep: Callable[[str], bool]) -> Any:
    """A copy of ``model`` whose linear layers named by ``keep`` are dynamic int8 (per channel)."""
    import torch
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    names = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and n != "lm_head" and keep(n)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return quantize_dynamic(
            copy.deepcopy(model), {n: per_channel_dynamic_qconfig for n in names}, dtype=torch.qint8
        )


def arms(model: Any) -> dict[str, Any]:
    import torch

    from training.generation.int8_copy import int8_generation_copy

    return {
        "fp32": model,
        "int8 every linear": quantised(model, lambda n: True),
        "int8 copy (no down)": int8_generation_copy(model),
        "int8 attention only": quantised(model, lambda n: "self_attn" in n),
        "bf16 weights": copy.deepcopy(model).to(torch.bfloat16),
    }


def speed(model: Any, ids: Any) -> tuple[float, float]:
    import torch

    with torch.no_grad():
        start = time.perf_counter()
        out = model(ids, use_cache=True)
        prefill = time.perf_counter() - start
        cache, token = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
        start = time.perf_counter()
        for _ in range(10):
            out = model(token, past_key_values=cache, use_cache=True)
            cache, token = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
    return prefill, (time.perf_counter() - start) / 10


def closeness(reference: Any, other: Any) -> tuple[float, float]:
    import torch

    agree = float((reference.argmax(-1) == other.argmax(-1)).float().mean())
    lp, lq = torch.log_softmax(reference, -1), torch.log_softmax(other, -1)
    return agree, float((lp.exp() * (lp - lq)).sum(-1).mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=300)
    args = parser.parse_args()

    import torch

    from training.generation.loading import load_model

    loaded = load_model(None, say=lambda _: None)
    model = loaded.model.float().eval()
    torch.manual_seed(0)
    ids = torch.randint(100, model.config.vocab_size - 100, (args.rows, args.prompt))
    sql = torch.tensor([loaded.tokenizer(SQL_TEXT).input_ids[:500]])
    with torch.no_grad():
        reference = model(sql).logits.float()
    print(f"SmolLM2-135M, {torch.get_num_threads()} thread(s), {args.rows} rows x {args.prompt} prompt tokens")
    print(f"{'arm':<22} {'prefill s':>9} {'decode s/step':>13} {'vs fp32':>8} {'greedy agree':>12} {'KL nats/tok':>11}")
    base_decode = None
    for name, arm in arms(model).items():
        prefill, decode = speed(arm, ids)
        base_decode = base_decode or decode
        with torch.no_grad():
            agree, kl = closeness(reference, arm(sql).logits.float())
        print(f"{name:<22} {prefill:>9.2f} {decode:>13.3f} {base_decode / decode:>7.2f}x {agree:>12.3f} {kl:>11.4f}")


if __name__ == "__main__":
    main()
