"""Response log-probs without a [batch, resp_len, vocab] logits tensor.

The plain path (``loss.response_log_probs``' fallback) lets the model's LM head produce the
logits of every response position, then copies them to fp32, gathers them into response
order and keeps them for the backward pass: with SmolLM2's 49,152-token vocabulary, two
2,000-token responses hold about 0.8 GB per copy, and forward plus backward make several
copies. Here the decoder's last hidden states are gathered at the positions that predict a
response token (the real ones only, not padding), and the LM head runs on chunks of those
positions under activation checkpointing: a chunk's logits live only while its log-probs are
computed, and again while its gradient is, so the peak holds one chunk's logits instead of
the whole response's. The values are the LM head's own (same weights, same autocast), so
log-probs agree with the plain path to float rounding (tests/training/engines/local/logprobs/test_chunked.py).

The head runs only at the positions some track's mask trains (``trained_positions``): an
observation's or a template's tokens carry no loss, weight or metric, and in a multi-turn
demonstration they are half of the response (TRUST-SQL's laptop warm start: 8,044 of 15,011
positions). Their log-probs are 0, as beyond a response. A single chunk whose backward pass
follows at once (``recompute_head=False``: the warm start, an update's own micro-batch) keeps
its logits instead of recomputing them: the backward pass would rebuild the same tensor at
the same moment, so checkpointing it saves no memory.

Only models whose causal-LM head is exactly ``lm_head(final hidden state)`` qualify (no logit
soft-capping or scaling): the model types in ``PLAIN_HEAD_TYPES``. Any other model takes the
plain path.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

from training.generation.hf import AutocastDtype, autocast_context

PLAIN_HEAD_TYPES = frozenset({"llama", "mistral", "qwen2", "qwen3"})
"""Causal-LM types whose logits are ``lm_head(norm(h))`` with nothing after it (checked in
transformers 5.10's modeling files: Gemma soft-caps, Cohere scales, so they are left out)."""
CHUNK_POSITIONS = 512
"""Response positions per LM-head chunk: 512 x 49,152 fp32 logits is 100 MB."""


def plain_head(model: Any) -> tuple[Any, Any] | None:
    """The (decoder, lm_head) of a model whose logits are ``lm_head(decoder(...))``, also
    under a PEFT wrapper (its LoRA layers live inside these modules); None otherwise."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = getattr(base, "config", None)
    if getattr(config, "model_type", None) not in PLAIN_HEAD_TYPES:
        return None
    if getattr(config, "final_logit_softcapping", None) or getattr(config, "logit_scale", None):
        return None
    decoder = base.get_decoder() if hasattr(base, "get_decoder") else None
    head = base.get_output_embeddings() if hasattr(base, "get_output_embeddings") else None
    if decoder is None or not isinstance(head, torch.nn.Linear):
        return None
    return decoder, head


def chunked_response_log_probs(
    decoder: Any,
    head: torch.nn.Linear,
    batch: Any,
    device: str,
    autocast: AutocastDtype,
    with_entropy: bool,
    entropy_grad: bool,
    recompute_head: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``loss.response_log_probs`` for a plain-head model: ([batch, resp_len], entropy or None)."""
    packed = {"shared_prefix": batch.segments} if batch.packed else {}  # read by shared_prefix.py's attention
    with autocast_context(device, autocast):
        hidden = decoder(
            input_ids=batch.input_ids.to(device),
            attention_mask=batch.attention_mask.to(device),
            position_ids=batch.position_ids.to(device),
            use_cache=False,
            **packed,
        ).last_hidden_state  # [batch, seq_len, hidden]; packed: [1, T, hidden]
    rows, resp_len = batch.responses.shape
    valid = trained_positions(batch).to(hidden.device)  # [batch, resp_len]
    row_idx, col_idx = valid.nonzero(as_tuple=True)  # [tokens] each
    index = batch.state_index.to(hidden.device)[row_idx, col_idx]  # [tokens] the state predicting each token
    states = hidden.flatten(0, 1)[index]  # [tokens, hidden]
    targets = batch.responses.to(hidden.device)[row_idx, col_idx]  # [tokens]
    picked, entropies = [], []
    recompute = recompute_head or states.shape[0] > CHUNK_POSITIONS  # several chunks: one at a time
    for start in range(0, states.shape[0], CHUNK_POSITIONS):
        stop = start + CHUNK_POSITIONS
        args = (states[start:stop], targets[start:stop], head, device, autocast, with_entropy, entropy_grad)
        logp, ent = checkpoint(_chunk, *args, use_reentrant=False) if recompute else _chunk(*args)
        picked.append(logp)
        if ent is not None:
            entropies.append(ent)
    log_probs = _scatter(picked, row_idx, col_idx, rows, resp_len, hidden)
    entropy = _scatter(entropies, row_idx, col_idx, rows, resp_len, hidden) if with_entropy else None
    return log_probs, entropy


def trained_positions(batch: Any) -> torch.Tensor:
    """[batch, resp_len] bool: the response positions some track's mask trains (every
    response position when the batch has no masks)."""
    resp_len = batch.responses.shape[1]
    valid = torch.arange(resp_len).unsqueeze(0) < batch.resp_lens.unsqueeze(1)  # [batch, resp_len]
    if batch.masks:
        valid &= torch.stack([mask != 0 for mask in batch.masks.values()]).any(0)
    return valid


def _chunk(
    states: torch.Tensor,
    targets: torch.Tensor,
    head: torch.nn.Linear,
    device: str,
    autocast: AutocastDtype,
    with_entropy: bool,
    entropy_grad: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-prob of each target (and entropy) from one chunk of hidden states: [chunk] each."""
    with autocast_context(device, autocast):
        logits = head(states)  # [chunk, vocab]
    logits = logits.float()
    log_norm = torch.logsumexp(logits, dim=-1)  # [chunk]
    logp = torch.gather(logits, -1, targets.unsqueeze(-1)).squeeze(-1) - log_norm  # [chunk]
    if not with_entropy:
        return logp, None
    with contextlib.nullcontext() if entropy_grad else torch.no_grad():
        probs = torch.softmax(logits, dim=-1)  # [chunk, vocab]
        entropy = log_norm - (probs * logits).sum(-1)  # [chunk]
    return logp, entropy


def _scatter(
    parts: list[torch.Tensor], row_idx: torch.Tensor, col_idx: torch.Tensor, rows: int, width: int, like: torch.Tensor
) -> torch.Tensor:
    """Per-token values back into a zero [rows, width] grid (zero beyond each response)."""
    out = torch.zeros((rows, width), dtype=torch.float32, device=like.device)  # [batch, resp_len]
    if not parts:
        return out
    return out.index_put((row_idx, col_idx), torch.cat(parts))
