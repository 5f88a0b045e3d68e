"""Generating with a HF transformers model: the rollout driver's ``GenerateFn`` over it
(``hf_generate``), plain (``ChunkedGenerate``) or keeping each episode's KV cache between
turns (``training.generation.prefix_reuse``). The local engine's rollouts, a local teacher
and ``eval.run`` all generate through here; the batching pieces live in
``training.generation.hf_batch`` and are importable from here too.

Left-padded batched ``generate`` under ``torch.no_grad()`` (not ``inference_mode``:
backward later fails on inference tensors) and bf16 autocast where the hardware runs it
natively; the rollout driver owns turn logic and stop strings, this function only stops
rows early at them when the sampling params carry them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from training.generation.hf_batch import (
    AutocastDtype,
    ChunkedGenerate,
    GenerateCall,
    RawGeneration,
    autocast_context,
    batched_generate,
    left_pad,
    stop_token_ids,
    trim_row,
)
from training.generation.prefix_reuse import PrefixReuseGenerate, supports_prefix_reuse

if TYPE_CHECKING:
    from training.rollout import GenerateFn

__all__ = [
    "AutocastDtype",
    "ChunkedGenerate",
    "GenerateCall",
    "RawGeneration",
    "autocast_context",
    "batched_generate",
    "left_pad",
    "stop_token_ids",
    "trim_row",
    "hf_generate",
]


def hf_generate(
    model: Any,
    tokenizer: Any,
    device: str = "cpu",
    autocast: Any = None,
    chunk: int = 16,
    logprobs: bool = False,
    prefix_reuse: bool = False,
) -> GenerateFn:
    """A batched ``GenerateFn`` over a HF model: prompts sorted by length (less padding),
    generated ``chunk`` rows at a time. ``logprobs``: sampled rows (temperature > 0) also
    return the generating model's log-prob of each token (for the IS correction).
    ``prefix_reuse``: each episode keeps its KV cache between turns
    (``training.generation.prefix_reuse``; models it cannot serve get the plain path)."""
    if prefix_reuse and supports_prefix_reuse(model):
        return PrefixReuseGenerate(model, tokenizer, device, autocast, chunk, logprobs)
    return ChunkedGenerate(model, tokenizer, device, autocast, chunk, logprobs)
