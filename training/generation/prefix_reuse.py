"""Cross-turn prefix reuse: each episode keeps its KV cache between turns, so a turn
prefills only its new tokens (the end-of-turn marker, the observation, the next generation
prompt) instead of the whole conversation again.

``PrefixReuseGenerate`` is a ``GenerateFn`` with a store of row caches: after a call it
keeps, per row, the keys and values of the prompt and of the generated tokens it fed
(every generated token but the last). The next call matches each prompt to the stored
row sharing its longest common prefix, crops that cache to the prefix (a turn cut at a
stop string or by the agent keeps fewer tokens than were generated) and prefills only
the rest. The samples of one question share their first prompt: it is prefilled once.

One batched ``model.generate`` call serves rows with different cached lengths: row i's
columns are ``[pad][cached k_i][pad][new n_i]``, the cache is the rows' caches left-padded
to the longest, and the attention mask hides every pad. ``generate`` derives positions
from the mask (cumulative sum), so each token keeps the position it had when its key was
computed. Rows are sorted and chunked as on the plain path and sampling runs through the
same ``generate``: the same tokens under greedy decoding, the same distribution under
sampling (checked against the plain path in tests/training/generation/test_prefix_reuse.py);
float rounding differs a little (a prefill and a decode step sum in different orders),
so a bf16 copy can flip a near-tie.

The rollout driver frees what it no longer needs: before each round ``retain`` keeps
only the rows the round's prompts continue best (the caches of finished episodes and of
earlier turns go), and ``clear`` empties the store when the rollout returns, so no cache
outlives a weight update. Within a round the store holds at most the previous turn's rows
and the new ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from training.generation.hf import ChunkedGenerate, GenerateCall, RawGeneration, autocast_context, left_pad

KeyValues = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: keys, values [kv_heads, length, head_dim]


@dataclass
class RowCache:
    """The keys and values of one row's ``tokens``, layer by layer."""

    tokens: np.ndarray  # [length] int64
    layers: KeyValues

    def __len__(self) -> int:
        return len(self.tokens)


def supports_prefix_reuse(model: Any) -> bool:
    """Whether every layer of ``model``'s cache is a plain growing one (full attention):
    sliding windows, recurrent states and encoder-decoders keep the plain path."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    config = model.config
    if (
        getattr(config, "is_encoder_decoder", False)
        or not getattr(model, "_supports_default_dynamic_cache", lambda: True)()
    ):
        return False
    try:
        cache = DynamicCache(config=config)
    except Exception:  # a config DynamicCache cannot read: not a standard decoder
        return False
    return bool(cache.layers) and all(type(layer) is DynamicLayer for layer in cache.layers)


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """Length of the longest common prefix of two id arrays."""
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if differ.size else n


class PrefixReuseGenerate(ChunkedGenerate):
    """A batched ``GenerateFn`` that keeps each row's KV cache between calls."""

    def __init__(self, model: Any, tokenizer: Any, device: str, autocast: Any, chunk: int, logprobs: bool) -> None:
        super().__init__(model, tokenizer, device, autocast, chunk, logprobs)
        self.store: list[RowCache] = []
        self.reused_tokens = 0  # prompt tokens whose prefill a stored cache spared

    # ------------------------------------------------------------ the store's life
    def retain(self, prompts: Sequence[Sequence[int]]) -> None:
        """Keep only the rows that ``prompts`` (the next round's) continue."""
        keep = {id(row) for row, _ in (self._match(np.asarray(p, dtype=np.int64)) for p in prompts) if row}
        self.store = [row for row in self.store if id(row) in keep]

    def clear(self) -> None:
        self.store = []

    def cached_tokens(self) -> int:
        """Tokens whose keys and values the store holds (what its memory grows with)."""
        return sum(len(row) for row in self.store)

    def _match(self, prompt: np.ndarray) -> tuple[RowCache | None, int]:
        """The stored row sharing the longest prefix with ``prompt`` and how many tokens
        of it to reuse (at least one prompt token is left to prefill)."""
        best: tuple[RowCache | None, int] = (None, 0)
        for row in self.store:
            k = min(common_prefix(row.tokens, prompt), len(prompt) - 1)
            if k > best[1]:
                best = (row, k)
        return best

    # ------------------------------------------------------------ one chunk
    def _rows(self, prompts: list[list[int]], call: GenerateCall) -> list[RawGeneration]:
        arrays = [np.asarray(p, dtype=np.int64) for p in prompts]
        self._prefill_shared(arrays)
        matches = [self._match(a) for a in arrays]
        self.reused_tokens += sum(k for _, k in matches)
        reused: list[tuple[KeyValues | None, int]] = [
            (row.layers, k) if row is not None else (None, 0) for row, k in matches
        ]
        return self._generate(arrays, reused, call)

    def _prefill_shared(self, arrays: list[np.ndarray]) -> None:
        """Prefill once every prompt that several uncached rows share (a question's
        samples on their first turn) and store it for them to match."""
        counts: dict[bytes, int] = {}
        for a in arrays:
            if self._match(a)[1] == 0:
                counts[a.tobytes()] = counts.get(a.tobytes(), 0) + 1
        shared = [np.frombuffer(key, dtype=np.int64)[:-1] for key, n in counts.items() if n > 1]
        shared = [a for a in shared if len(a)]
        if not shared:
            return
        ids, mask = left_pad([a.tolist() for a in shared], pad_id=0)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)  # as generate numbers left-padded rows
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad(), autocast_context(self.device, self.autocast):
                out = self.model(
                    input_ids=ids.to(self.device),
                    attention_mask=mask.to(self.device),
                    position_ids=positions.to(self.device),
                    use_cache=True,
                    logits_to_keep=1,  # only the cache is wanted, not [rows, length, vocab] logits
                )
        finally:
            self.model.train(was_training)
        width = ids.shape[1]
        for i, a in enumerate(shared):
            spans = [(width - len(a), width)]
            self.store.append(RowCache(a.copy(), _gather(out.past_key_values, i, spans)))

    def _generate(
        self, arrays: list[np.ndarray], reused: list[tuple[KeyValues | None, int]], call: GenerateCall
    ) -> list[RawGeneration]:
        cached = max(k for _, k in reused)  # C: the cache's width
        fresh = max(len(a) - k for a, (_, k) in zip(arrays, reused, strict=True))  # N: new columns
        width = cached + fresh
        ids = torch.full((len(arrays), width), call.pad_id, dtype=torch.long)  # [batch, C + N]
        mask = torch.zeros((len(arrays), width), dtype=torch.long)  # [batch, C + N]
        for i, (a, (_, k)) in enumerate(zip(arrays, reused, strict=True)):
            ids[i, cached - k : cached], mask[i, cached - k : cached] = torch.from_numpy(a[:k]), 1
            new = a[k:]
            ids[i, width - len(new) :], mask[i, width - len(new) :] = torch.from_numpy(new), 1
        inputs: dict[str, Any] = {"input_ids": ids, "attention_mask": mask, "return_dict_in_generate": True}
        if cached:
            inputs["past_key_values"] = self._batch_cache(reused, cached)
        out = call.run(self.device, self.autocast, **inputs)
        new_t = out.sequences[:, width:]  # [batch, new_len]
        rows = call.rows(new_t)
        for i, (a, (_, k)) in enumerate(zip(arrays, reused, strict=True)):
            fed = _fed_tokens(new_t[i].tolist(), call)  # generated tokens whose keys were computed
            spans = [(cached - k, cached), (cached + fresh - (len(a) - k), width), (width, width + len(fed))]
            tokens = np.concatenate([a, np.asarray(fed, dtype=np.int64)])
            self.store.append(RowCache(tokens, _gather(out.past_key_values, i, spans)))
        return rows

    def _batch_cache(self, reused: list[tuple[KeyValues | None, int]], cached: int) -> Any:
        """The rows' caches cropped to their reused prefix and left-padded to ``cached``."""
        from transformers import DynamicCache

        template = next(layers for layers, _ in reused if layers is not None)
        data = []
        for layer, (k0, v0) in enumerate(template):
            heads, _, dim = k0.shape
            keys = k0.new_zeros((len(reused), heads, cached, dim))  # [batch, kv_heads, C, head_dim]
            values = v0.new_zeros((len(reused), heads, cached, dim))  # [batch, kv_heads, C, head_dim]
            for i, (layers, k) in enumerate(reused):
                if layers is not None and k:
                    keys[i, :, cached - k :] = layers[layer][0][:, :k]
                    values[i, :, cached - k :] = layers[layer][1][:, :k]
            data.append((keys, values))
        return DynamicCache(ddp_cache_data=data, config=self.model.config)


def _fed_tokens(row: list[int], call: GenerateCall) -> list[int]:
    """The generated tokens that were fed back (each but the last real one): the row up
    to its first EOS or pad, which ``generate`` sampled last, is cut one short."""
    end = next((i for i, tok in enumerate(row) if tok in call.eos_ids or tok == call.pad_id), len(row) - 1)
    return row[:end]


def _gather(cache: Any, row: int, spans: Sequence[tuple[int, int]]) -> KeyValues:
    """Row ``row``'s keys and values over the column ``spans``, as compact new tensors."""
    out = []
    for layer in cache.layers:
        keys = torch.cat([layer.keys[row, :, a:b] for a, b in spans], dim=1)  # [kv_heads, length, head_dim]
        values = torch.cat([layer.values[row, :, a:b] for a, b in spans], dim=1)  # [kv_heads, length, head_dim]
        out.append((keys, values))
    return out
