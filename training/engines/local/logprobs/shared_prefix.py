"""Rows that share a prompt prefix, trained in one forward pass with the prefix computed once.

A GRPO group's G rows carry the same prompt; a warm start's demonstrations share their
system prompt and few-shot block (ReToolSQL's laptop warm start: the four demonstrations of
every step share their first 1,012 tokens, about half of all the tokens it trains on). Left
padded, each row runs its own copy of that prefix through every layer, forward, again under
gradient checkpointing, and backward.

Packed, the micro-batch is one sequence: the shared prefix, then each row's remainder,
with position ids that continue the prefix in every remainder and a block mask (a
remainder sees the prefix and itself, causally). Causal attention never lets a prefix
token see what follows it, so the prefix's states are the same for every row, and each
remainder's states equal those of its own row: the log-probs and gradients of the padded
pass, to float rounding (tests/training/engines/local/logprobs/test_shared_prefix.py). The prefix's
gradient arrives once, summed over the rows, as the padded pass sums it over the copies.

Attention: one sdpa call under the block mask would compute the whole T x T square of
the packed sequence (the CPU kernel skips only causal blocks), more than the padded rows'
half squares. The model's sdpa is switched to ``sdpa_shared_prefix`` (``use_packed_attention``,
the same sdpa for any other call), which attends the prefix causally once and each
remainder over the prefix's keys and its own, causally: the padded rows' query-key pairs
less the prefix's repeats. ``worth_packing`` still weighs attention against the linear layers
with the model's own sizes and packs only when the packed pass is clearly cheaper, e.g. not
TRUST-SQL's long multi-turn rows behind a 170-token system prompt. Packing needs the
chunked LM-head path (``chunked.plain_head``), which reads the response states by
index, and sdpa attention (the others take no boolean block mask).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from training.engines.local.logprobs.chunked import plain_head

PACK_GAIN = 0.85
"""Pack only when the packed pass's modelled cost is at most this share of the padded rows'."""
PACK_ROWS_TOKENS = 2
"""A packed pass holds at most this many times the tokens of the longest row it packs (times
the micro-batch size): its layer inputs stay within twice those of the largest padded pass."""


def attention_share(config: Any) -> float:
    """Cost of one query-key pair of attention over the cost of one token through a layer's
    linear weights (multiply-adds; both per layer), from a transformers config."""
    hidden = int(config.hidden_size)
    heads = int(config.num_attention_heads)
    head_dim = int(getattr(config, "head_dim", None) or hidden // heads)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    inner = int(getattr(config, "intermediate_size", None) or 4 * hidden)
    linear = hidden * head_dim * (2 * heads + 2 * kv_heads) + 3 * hidden * inner  # q, o, k, v; gated MLP
    return 2.0 * heads * head_dim / linear  # QK^T and PV


def shared_prefix_length(prompts: Sequence[Sequence[int]]) -> int:
    """Tokens every prompt starts with, leaving each prompt's last token to its row (its state
    predicts the first response token, so it belongs to the row's own remainder)."""
    common = min(_common(prompts[0], p) for p in prompts)
    return max(0, min(common, min(len(p) for p in prompts) - 1))


PACKED_ATTENTION = "sdpa_shared_prefix"
MASKED_ATTENTION = ("sdpa", PACKED_ATTENTION)  # eager adds a mask (it takes no boolean one); flash takes none


def model_share(model: Any) -> float | None:
    """``attention_share`` of a model that can train packed rows (a plain LM head, sdpa
    attention), else None."""
    if plain_head(model) is None:
        return None
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if getattr(base.config, "_attn_implementation", None) not in MASKED_ATTENTION:
        return None
    return attention_share(base.config)


def use_packed_attention(decoder: Any) -> None:
    """Switch a model on sdpa to ``sdpa_shared_prefix`` (for good: a gradient-checkpointed
    layer runs again in the backward pass, after the call that packed it returns)."""
    if getattr(decoder.config, "_attn_implementation", None) != "sdpa":
        return
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(PACKED_ATTENTION, _shared_prefix_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(PACKED_ATTENTION, sdpa_mask)
    decoder.set_attn_implementation(PACKED_ATTENTION)


def _shared_prefix_attention(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    shared_prefix: tuple[int, tuple[int, ...]] | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """sdpa, or for a packed sequence (``shared_prefix``: the prefix's length and each
    remainder's) the prefix causally, then each remainder over the prefix and itself."""
    from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward

    if shared_prefix is None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs
        )
    prefix, remainders = shared_prefix
    groups = query.shape[1] // key.shape[1]
    key, value = repeat_kv(key, groups), repeat_kv(value, groups)  # [1, heads, T, dim] each
    attend = functools.partial(
        torch.nn.functional.scaled_dot_product_attention, scale=scaling, dropout_p=dropout if module.training else 0.0
    )
    parts = [attend(query[:, :, :prefix], key[:, :, :prefix], value[:, :, :prefix], is_causal=True)] if prefix else []
    start = prefix
    for n in remainders:
        stop = start + n
        keys = torch.cat([key[:, :, :prefix], key[:, :, start:stop]], dim=2)  # [1, heads, prefix + n, dim]
        values = torch.cat([value[:, :, :prefix], value[:, :, start:stop]], dim=2)
        mask = torch.ones(n, prefix + n, dtype=torch.bool, device=query.device)  # [n, prefix + n]
        mask[:, prefix:] = torch.ones(n, n, dtype=torch.bool, device=query.device).tril()
        parts.append(attend(query[:, :, start:stop], keys, values, attn_mask=mask))
        start = stop
    return torch.cat(parts, dim=2).transpose(1, 2).contiguous(), None  # [1, T, heads, dim]


def worth_packing(prompts: Sequence[Sequence[int]], lengths: Sequence[int], share: float | None) -> bool:
    """Whether one packed pass over these rows is cheaper than padded rows (``share``:
    ``model_share`` of the model; None: never)."""
    if share is None or len(prompts) < 2:
        return False
    return _pays(shared_prefix_length(prompts), lengths, share)


def _pays(prefix: int, lengths: Sequence[int], share: float) -> bool:
    """Modelled cost, in tokens through the linear layers: causal rows compute half their
    square of query-key pairs; packed, the prefix half its square and each remainder (under a
    mask, in full) its rows over the prefix and itself."""
    packed_pairs = prefix * prefix / 2 + sum((n - prefix) * n for n in lengths)
    padded_cost = sum(n + share * n * n / 2 for n in lengths)
    return _packed_tokens(prefix, lengths) + share * packed_pairs <= PACK_GAIN * padded_cost


def _packed_tokens(prefix: int, lengths: Sequence[int]) -> int:
    return prefix + sum(n - prefix for n in lengths)


def _common(a: Sequence[int], b: Sequence[int]) -> int:
    n, shortest = 0, min(len(a), len(b))
    while n < shortest and a[n] == b[n]:
        n += 1
    return n


def plan_micro_batches(
    rows: Sequence[int],
    prompt_of: Callable[[int], Sequence[int]],
    length_of: Callable[[int], int],
    size: int,
    share: float | None,
) -> list[list[int]]:
    """Micro-batches of ``rows``: runs of rows with a shared prefix that are ``worth_packing``
    (``share`` None: none), then the others ``size`` at a time, grouped by length.

    Rows are taken in prompt order, so those that share the longest prefixes are adjacent (the
    prefix a run shares is the least of its neighbours' common prefixes); from each row the
    longest run that pays and holds at most ``PACK_ROWS_TOKENS`` times the longest row's
    tokens is packed (a run can pay where its first two rows alone would not)."""
    if share is None:
        return _by_length(list(rows), length_of, size)
    order = sorted(rows, key=lambda i: (list(prompt_of(i)), length_of(i)))
    lengths = [length_of(i) for i in order]
    prompt_lengths = [len(prompt_of(i)) for i in order]
    neighbours = [_common(prompt_of(a), prompt_of(b)) for a, b in zip(order, order[1:], strict=False)]
    budget = PACK_ROWS_TOKENS * max(1, size) * max(lengths, default=0)
    packs: list[list[int]] = []
    singles: list[int] = []
    start = 0
    while start < len(order):
        end, common, shortest = start, math.inf, prompt_lengths[start]
        for j in range(start + 1, len(order)):
            common, shortest = min(common, neighbours[j - 1]), min(shortest, prompt_lengths[j])
            prefix = int(min(common, shortest - 1))
            if _packed_tokens(prefix, lengths[start : j + 1]) > budget:
                break
            if _pays(prefix, lengths[start : j + 1], share):
                end = j
        if end > start:
            packs.append(order[start : end + 1])
        else:
            singles.append(order[start])
        start = end + 1
    return packs + _by_length(singles, length_of, size)


def _by_length(rows: list[int], length_of: Callable[[int], int], size: int) -> list[list[int]]:
    """``size`` rows per micro-batch, grouped by total length (less padding)."""
    ordered = sorted(rows, key=length_of)
    return [ordered[k : k + size] for k in range(0, len(ordered), size)]


def packed_inputs(prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]]) -> dict[str, Any]:
    """One packed sequence: ``input_ids`` and ``position_ids`` [1, T], ``attention_mask``
    [1, 1, T, T] (True: may attend), ``state_index`` [rows, resp_len] (the packed position whose
    state predicts response token j of row i; 0 beyond a response), ``segments`` (the prefix's
    length and each remainder's, for ``sdpa_shared_prefix``)."""
    prefix = shared_prefix_length(prompts)
    ids = list(prompts[0][:prefix])
    positions = list(range(prefix))
    segment = [-1] * prefix  # the prefix: seen by every row
    resp_len = max(1, max(len(r) for r in responses))
    state_index = torch.zeros((len(prompts), resp_len), dtype=torch.long)  # [rows, resp_len]
    for i, (p, r) in enumerate(zip(prompts, responses, strict=True)):
        start = len(ids)
        rest = [*p[prefix:], *r]
        ids += rest
        positions += range(prefix, prefix + len(rest))
        segment += [i] * len(rest)
        # response token j sits at unpacked position len(p) + j, predicted by the state one before it
        state_index[i, : len(r)] = start + len(p) - 1 - prefix + torch.arange(len(r))
    remainders = tuple(len(p) - prefix + len(r) for p, r in zip(prompts, responses, strict=True))
    seg = torch.tensor(segment)  # [T]
    causal = torch.ones(len(ids), len(ids), dtype=torch.bool).tril()  # [T, T]
    visible = (seg.unsqueeze(0) == -1) | (seg.unsqueeze(0) == seg.unsqueeze(1))  # [T, T] key seen by query
    return {
        "input_ids": torch.tensor([ids], dtype=torch.long),
        "position_ids": torch.tensor([positions], dtype=torch.long),
        "attention_mask": (causal & visible)[None, None],
        "state_index": state_index,
        "segments": (prefix, remainders),
    }
