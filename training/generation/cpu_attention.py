"""Faster CPU decoding for the local engine's generation copy.

Measured on 2 cores with SmolLM2-135M in bf16, 8 rows of 1,200-token prompts: torch's CPU
flash-attention kernel (``sdpa``) takes 4.8 ms per layer for a *single* query token, 70 %
of a 231 ms decode step; the plain matmul/softmax path ("eager") decodes at 122 ms per
step but prefills 2.5x slower (25.6 s vs 10.2 s). The hybrid registered here uses sdpa
for prefill (many query tokens) and a plain matmul/softmax for one-token decode steps,
with the query heads of each KV head folded into rows (no KV copies): 65 ms per step.

The math is the same attention (fp32 test: next-token logits within 1e-5); in bf16 the
rounding differs, so greedy decoding can flip at a near-tie: 7 of 8 warm-started think2sql
dev prompts gave identical tokens, one diverged at token 13.

Only for standard causal GQA attention (no sliding window, no logit soft-capping): the
model types in ``SUPPORTED``. Anything else keeps its own attention.
"""

from __future__ import annotations

from typing import Any

import torch

NAME = "sdpa_prefill_matmul_decode"
SUPPORTED = ("llama", "qwen2", "qwen3", "mistral")


def _hybrid_attention(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if query.shape[2] != 1 or module.training:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs
        )
    # one query token: fold the query heads sharing a KV head into rows, no KV copies
    batch, heads, _, dim = query.shape  # query [batch, heads, 1, dim]
    kv_heads = key.shape[1]  # key/value [batch, kv_heads, kv_len, dim]
    q = query.reshape(batch, kv_heads, heads // kv_heads, dim)  # [batch, kv_heads, groups, dim]
    scale = scaling if scaling is not None else dim**-0.5
    scores = torch.matmul(q, key.transpose(2, 3)) * scale  # [batch, kv_heads, groups, kv_len]
    if attention_mask is not None:
        mask = attention_mask[..., : key.shape[-2]]  # [batch, 1, 1, kv_len]
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    out = torch.matmul(probs, value)  # [batch, kv_heads, groups, dim]
    return out.reshape(batch, 1, heads, dim), None


def use_hybrid_cpu_attention(model: Any) -> bool:
    """Switch ``model`` (a generation-only copy) to the hybrid; False when unsupported."""
    config = model.config
    if (
        config.model_type not in SUPPORTED
        or getattr(config, "sliding_window", None)
        or getattr(config, "_attn_implementation", None) != "sdpa"
    ):
        return False
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(NAME, _hybrid_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)
    model.set_attn_implementation(NAME)
    return True
