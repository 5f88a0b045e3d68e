"""Cross-turn prefix reuse: each episode keeps its KV cache between turns, so a turn
prefills only its new tokens (the end-of-turn marker, the observation, the next generation
prompt) instead of the whole conversation again.

``PrefixReuseGenerate`` is a ``GenerateFn`` with a store of row caches: after a call it
keeps, per row, the keys and values of the prompt and of the generated tokens it fed
(every generated token but the last). The next call matches each prompt to the stored
row sharing its longest common prefix, crops that cache to the prefix (a turn cut at a
stop string or by the agent keeps fewer tokens than were generated) and prefills only
the rest. The samples of one question share their first prompt: it is prefilled once. On
CPU each first prompt is prefilled alone, unpadded (``PrefixReuseGenerate.prefill_alone``),
so the batched call that follows feeds one token per row.

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
outlives a weight update. Within a round a row is dropped once the last prompt ``retain``
announced for it has been copied into a batch, before that batch generates, so the store
holds little more than one cache per episode in flight. Called outside ``run_episodes``,
call ``clear`` when done.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from training.generation.hf_batch import ChunkedGenerate, GenerateCall, RawGeneration, autocast_context, left_pad

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
    from training.generation.growing_cache import growing_cache

    return growing_cache(model, 1) is not None


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
        self._pending: dict[int, int] = {}  # id(row) -> prompts of this round still to continue it
        self.prefill_alone = device == "cpu"  # first prompts one by one, unpadded (_prefill_first_prompts)

    # ------------------------------------------------------------ the store's life
    def retain(self, prompts: Sequence[Sequence[int]]) -> None:
        """Keep only the rows that ``prompts`` (the next round's) continue best."""
        self._pending = {}
        for row, _ in (self._match(np.asarray(p, dtype=np.int64)) for p in prompts):
            if row is not None:
                self._pending[id(row)] = self._pending.get(id(row), 0) + 1
        self.store = [row for row in self.store if id(row) in self._pending]

    def clear(self) -> None:
        self.store, self._pending = [], {}

    def cached_tokens(self) -> int:
        """Tokens whose keys and values the store holds (what its memory grows with)."""
        return sum(len(row) for row in self.store)

    def _match(self, prompt: np.ndarray, extra: Sequence[RowCache] = ()) -> tuple[RowCache | None, int]:
        """The stored (or ``extra``) row sharing the longest prefix with ``prompt`` and how
        many tokens of it to reuse (at least one prompt token is left to prefill)."""
        best: tuple[RowCache | None, int] = (None, 0)
        for row in (*self.store, *extra):
            k = min(common_prefix(row.tokens, prompt), len(prompt) - 1)
            if k > best[1]:
                best = (row, k)
        return best

    def _release(self, used: Sequence[RowCache | None]) -> None:
        """Drop the rows the round announced (``retain``) once their last prompt used them."""
        done = set()
        for row in used:
            if row is not None and id(row) in self._pending:
                self._pending[id(row)] -= 1
                if self._pending[id(row)] <= 0:
                    done.add(id(row))
        self.store = [row for row in self.store if id(row) not in done]

    # ------------------------------------------------------------ one chunk
    def _rows(self, prompts: list[list[int]], call: GenerateCall) -> list[RawGeneration]:
        arrays = [np.asarray(p, dtype=np.int64) for p in prompts]
        first = self._prefill_first_prompts(arrays)  # once for the chunk, not once per row
        matches = [self._match(a, first) for a in arrays]
        del first  # the rows that reuse them hold them through ``matches``
        self.reused_tokens += sum(k for _, k in matches)
        ks = [k for _, k in matches]
        ids, mask, cached = _layout(arrays, ks, call.pad_id)
        inputs: dict[str, Any] = {"input_ids": ids, "attention_mask": mask, "return_dict_in_generate": True}
        if cached:
            data = self._batch_keys_values(matches, cached)
            inputs["past_key_values"] = call.cache(ids.shape[1] + call.max_new_tokens, data)
            del data
        self._release([row for row, _ in matches])  # the batch cache holds copies: free what is done
        del matches
        out = call.run(self.device, self.autocast, **inputs)
        del inputs
        width = ids.shape[1]
        new_t = out.sequences[:, width:]  # [batch, new_len]
        for i, (a, k) in enumerate(zip(arrays, ks, strict=True)):
            fed = _fed_tokens(new_t[i].tolist(), call)  # generated tokens whose keys were computed
            spans = [(cached - k, cached), (width - (len(a) - k), width), (width, width + len(fed))]
            tokens = np.concatenate([a, np.asarray(fed, dtype=np.int64)])
            self.store.append(RowCache(tokens, _gather(out.past_key_values, i, spans)))
        return call.rows(new_t)

    def _prefill_first_prompts(self, arrays: list[np.ndarray]) -> list[RowCache]:
        """Prefill the prompts no stored row continues (all but their last token), for the
        chunk's rows to reuse; these caches live for this chunk. On CPU (``prefill_alone``)
        every such prompt is prefilled alone: unpadded, sdpa runs its causal kernel with the
        KV heads shared, where a padded batch takes the masked math path with the KV heads
        copied (8 rows of ~1,300 tokens on SmolLM2-135M, one core: 39 s batched, 20 s one by
        one). Elsewhere only the prompts several rows share (a question's samples) are
        prefilled here, each once, in one padded batch."""
        counts: dict[bytes, int] = {}
        for a in arrays:
            if self._match(a)[1] == 0 and len(a) > 1:
                counts[a.tobytes()] = counts.get(a.tobytes(), 0) + 1
        alone = self.prefill_alone
        first = [np.frombuffer(key, dtype=np.int64)[:-1].copy() for key, n in counts.items() if n > 1 or alone]
        if alone:
            return [row for a in first for row in self._prefill([a])]
        return self._prefill(first) if first else []

    def _prefill(self, prompts: list[np.ndarray]) -> list[RowCache]:
        """One forward pass over ``prompts`` (left-padded when several) for their caches."""
        inputs: dict[str, Any] = {"input_ids": torch.from_numpy(prompts[0])[None]}
        if len(prompts) > 1:
            ids, mask = left_pad([a.tolist() for a in prompts], pad_id=0)
            positions = (mask.cumsum(-1) - 1).clamp(min=0)  # as generate numbers left-padded rows
            inputs = {"input_ids": ids, "attention_mask": mask, "position_ids": positions}
        extra: dict[str, Any] = {"use_cache": True}
        if "logits_to_keep" in inspect.signature(self.model.forward).parameters:
            extra["logits_to_keep"] = 1  # only the cache is wanted, not [rows, length, vocab] logits
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad(), autocast_context(self.device, self.autocast):
                out = self.model(**{k: v.to(self.device) for k, v in inputs.items()}, **extra)
        finally:
            self.model.train(was_training)
        width = inputs["input_ids"].shape[1]
        return [RowCache(a, _gather(out.past_key_values, i, [(width - len(a), width)])) for i, a in enumerate(prompts)]

    def _batch_keys_values(self, matches: list[tuple[RowCache | None, int]], cached: int) -> KeyValues:
        """The rows' caches cropped to their reused prefix and left-padded to ``cached``:
        per layer, keys and values [batch, kv_heads, cached, head_dim]."""
        template = next(row.layers for row, k in matches if row is not None and k)
        data = []
        for layer, (k0, v0) in enumerate(template):
            heads, _, dim = k0.shape
            keys = k0.new_zeros((len(matches), heads, cached, dim))  # [batch, kv_heads, C, head_dim]
            values = v0.new_zeros((len(matches), heads, cached, dim))  # [batch, kv_heads, C, head_dim]
            for i, (row, k) in enumerate(matches):
                if row is not None and k:
                    keys[i, :, cached - k :] = row.layers[layer][0][:, :k]
                    values[i, :, cached - k :] = row.layers[layer][1][:, :k]
            data.append((keys, values))
        return data


def _layout(arrays: Sequence[np.ndarray], ks: Sequence[int], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Row i as ``[pad][its k_i cached tokens][pad][its new tokens]``: (input_ids,
    attention_mask, both [batch, C + N]) and C, the cache's width."""
    cached = max(ks)
    width = cached + max(len(a) - k for a, k in zip(arrays, ks, strict=True))
    ids = torch.full((len(arrays), width), pad_id, dtype=torch.long)  # [batch, C + N]
    mask = torch.zeros((len(arrays), width), dtype=torch.long)  # [batch, C + N]
    for i, (a, k) in enumerate(zip(arrays, ks, strict=True)):
        ids[i, cached - k : cached], mask[i, cached - k : cached] = torch.from_numpy(a[:k]), 1
        new = a[k:]
        ids[i, width - len(new) :], mask[i, width - len(new) :] = torch.from_numpy(new), 1
    return ids, mask, cached


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
