"""What LoRA (``model.lora.rank > 0`` -> ``actor_rollout_ref.model.lora_rank``) changes in
the per-GPU estimate of :mod:`training.engines.verl.checks.memory`.

veRL 0.9.1's FSDP actor with LoRA (``workers/engine/fsdp/transformer_impl.py``) wraps the
model with PEFT before FSDP: the base weights stay as loaded (fp32 master weights,
``fsdp_config.model_dtype``), frozen, and only the adapter has gradients and AdamW
moments. So the sharded state falls from 16 bytes per parameter (weights, gradients, two
moments) to 4 (the frozen weights) plus 16 per adapter parameter, and the gathered units
carry no fp32 gradient. The reference model is the actor with its adapter disabled
(veRL's ``ref_in_actor``): no reference weights at all. vLLM keeps the base weights and
serves the adapter (bf16, beside them).

The adapter is counted as if every linear layer of a decoder layer had one (``all-linear``,
the default): r x (inputs + outputs) per projection. A narrower ``target_modules`` has
fewer adapter weights, so the count is an upper bound; it is a few hundredths of the
model at the ranks people use (rank 32 on Gemma 4 31B: 245M, 0.8 %).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from training.engines.verl.checks.backbones import Architecture


def layer_adapter_params(a: Architecture, rank: int, global_layer: bool) -> int:
    """Adapter weights of one decoder layer: A (r x inputs) and B (outputs x r) of q, k, v,
    o and the gated MLP's three projections."""
    kv_heads, head_dim = a.num_key_value_heads, a.head_dim
    if global_layer and a.sliding_layers:  # Gemma 4's global layers: their own KV heads and head size
        kv_heads, head_dim = a.global_key_value_heads or kv_heads, a.global_head_dim or head_dim
    h, q_dim, kv_dim = a.hidden_size, a.num_attention_heads * head_dim, kv_heads * head_dim
    v = 0 if global_layer and a.global_k_eq_v else h + kv_dim
    attention = (h + q_dim) + (h + kv_dim) + v + (q_dim + h)
    mlp = 3 * (h + a.intermediate_size)
    return rank * (attention + mlp)


def adapter_params(a: Architecture, rank: int) -> int:
    """All adapter weights at ``rank`` (0: none, full fine-tuning)."""
    if rank <= 0:
        return 0
    return a.sliding_layers * layer_adapter_params(a, rank, False) + a.global_layers * layer_adapter_params(
        a, rank, True
    )
