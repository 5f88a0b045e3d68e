"""A KV cache that grows in place: each layer's keys and values live in a buffer with room
for the tokens a ``generate`` call will add, and a decode step writes its one new column
there.

transformers' ``DynamicLayer`` concatenates (``torch.cat``) the whole cache with the new
token at every step, so each step copies every layer's keys and values: for 8 rows of
1,000 tokens on SmolLM2-135M (30 layers, 3 KV heads) that is 370 MB written per step, as
much memory traffic as the int8 copy's weights. :class:`GrowingLayer` returns views of its
buffer instead; the attention reads the same numbers (greedy tokens and log-probs equal to
the concatenating cache's, tests/training/generation/test_growing_cache.py). Figures:
``benchmarks/bench_rollout.py`` (arm ``prefix+int8+concat``, the copying cache).

Memory: a buffer sized for ``max_new_tokens`` more columns than the prompt is what the
concatenating cache reaches when a row runs to the cap (and it held two copies during each
step's concatenation); the main jobs' peaks were unchanged with it (docs/results.md).

Only for caches whose every layer is a plain ``DynamicLayer`` (full attention); anything
else (sliding windows, recurrent states) keeps transformers' own cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

GROW_TOKENS = 256
"""Spare columns added whenever a buffer is (re)allocated past the length it was sized for."""


class GrowingLayer(DynamicLayer):
    """A ``DynamicLayer`` whose ``keys``/``values`` are views of a larger buffer.

    ``length``: the columns the layer is expected to reach (prompt plus new tokens), so one
    allocation serves the whole call. Anything that replaces ``keys`` by other tensors
    (``batch_select_indices``, ``reorder_cache``) is noticed at the next update, which then
    starts a new buffer from them; ``crop`` keeps a view of the buffer and is continued in place."""

    def __init__(self, length: int = 0) -> None:
        super().__init__()
        self.length = length
        self._buffers: tuple[torch.Tensor, torch.Tensor] | None = None

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        held_keys, held_values = cast(torch.Tensor, self.keys), cast(torch.Tensor, self.values)
        used = held_keys.shape[-2] if held_keys.numel() else 0
        end = used + key_states.shape[-2]
        if not self._continues_buffer(held_keys, key_states, end):
            self._new_buffers(held_keys, held_values, key_states, value_states, end)
        keys, values = self._buffers  # type: ignore[misc]  # set just above when missing
        keys[:, :, used:end] = key_states
        values[:, :, used:end] = value_states
        self.keys, self.values = keys[:, :, :end], values[:, :, :end]
        return self.keys, self.values

    def _continues_buffer(self, held_keys: torch.Tensor, key_states: torch.Tensor, end: int) -> bool:
        """Whether the held keys are still the front of the buffer and the new columns fit."""
        if self._buffers is None or held_keys.numel() == 0:
            return False
        buffer = self._buffers[0]
        return (
            held_keys.data_ptr() == buffer.data_ptr()
            and held_keys.stride() == buffer.stride()
            and held_keys.shape[:2] == key_states.shape[:2] == buffer.shape[:2]
            and end <= buffer.shape[-2]
        )

    def _new_buffers(
        self,
        held_keys: torch.Tensor,
        held_values: torch.Tensor,
        key_states: torch.Tensor,
        value_states: torch.Tensor,
        end: int,
    ) -> None:
        """Buffers with room for ``end`` columns (or more), holding what the layer holds."""
        used = held_keys.shape[-2] if held_keys.numel() else 0
        room = self.length if self.length >= end else end + GROW_TOKENS
        shape = (*key_states.shape[:2], room)
        keys = key_states.new_empty((*shape, key_states.shape[-1]))  # [batch, kv_heads, room, head_dim]
        values = value_states.new_empty((*shape, value_states.shape[-1]))  # [batch, kv_heads, room, head_dim]
        if used:
            keys[:, :, :used] = held_keys
            values[:, :, :used] = held_values
        self._buffers = (keys, values)


def growing_cache(
    model: Any, length: int, data: Sequence[tuple[torch.Tensor, torch.Tensor]] = ()
) -> DynamicCache | None:
    """A ``DynamicCache`` of :class:`GrowingLayer` for ``model`` sized for ``length`` columns,
    holding ``data`` (per layer: keys, values) when given; None when ``model``'s cache is not
    made of plain full-attention layers (or it is an encoder-decoder)."""
    config = model.config
    if (
        getattr(config, "is_encoder_decoder", False)
        or not getattr(model, "_supports_default_dynamic_cache", lambda: True)()
    ):
        return None
    try:
        cache = DynamicCache(config=config)
    except Exception:  # a config DynamicCache cannot read: not a standard decoder
        return None
    if not cache.layers or any(type(layer) is not DynamicLayer for layer in cache.layers):
        return None
    layers = [GrowingLayer(length) for _ in cache.layers]
    cache.layers = layers  # type: ignore[assignment]  # a list of the layers' base class
    if data:
        for layer, (keys, values) in zip(layers, data, strict=True):
            layer.update(keys, values)
    return cache
