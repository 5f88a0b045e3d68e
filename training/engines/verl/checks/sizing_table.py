"""The sizing table per backbone and machine: how each backbone of ``backbones.py`` runs on
each ``hardware`` group; :mod:`training.engines.verl.checks.memory` prints the estimate and
refuses what cannot fit (``dry_run=true`` shows both).

How the rows were chosen (bytes per GPU from ``training/engines/verl/checks/memory.py``'s arithmetic, which
the dry run prints; the update's fp32 weights + gradients + AdamW are 16 bytes/parameter
sharded over all GPUs, logits are tokens x vocab):

- Qwen3-8B (8.19B, vocab 151,936) on 8x H100-80G: 16 B x 8.19B / 8 = 15.3 GiB of sharded
  state; DualSQL's 40,960-token sequences at one GPU each would add ~37 GiB of logits
  and ~24 GiB of activations (~84 GiB): Ulysses 2 (flash-attn, which veRL's sequence
  parallel patch needs) halves the tokens per GPU (~48 GiB). The weights stay on the GPU
  during rollout (11.4 GiB), so vLLM gets 0.7 of the GPU (TP 1: 8 replicas).
- Qwen2.5-Coder-7B (7.6B) on 8x H100: Think2SQL's 12,288 tokens fit one GPU with sdpa
  (~41 GiB at a 16,384-token budget): no sequence parallelism, no flash-attn.
- Gemma 4 31B (30.7B, vocab 262,144, tied) on 8x H100: 57 GiB of sharded state alone
  plus the root unit's 8 GiB of embeddings: one node cannot update it (the check says so
  and names hardware.nnodes=2); on 2 nodes, Ulysses 4 and offload of everything during
  rollout (vLLM TP 4, 0.6 of the GPU).
- On 8x H200-141G the Qwen models need no sequence parallelism (DualSQL ~84 GiB of
  140.4) and vLLM gets 0.75; Gemma fits one node with Ulysses 2, parameter and optimizer
  offload during rollout (43 GiB otherwise) and vLLM at TP 2 (4 replicas), 0.6.
- Qwen3-4B (4.0B) runs with Qwen3-8B's rows (the same context, half the state).
- Gemma 4 E4B (7.4B stored with its per-layer embeddings, vocab 262,144, tied): ReToolSQL's
  23,500-token sequences give ~24 GiB of bf16 logits and their gradient at one GPU each;
  on H100 Ulysses 2 halves that, on H200 one GPU per sequence fits; no offload, vLLM TP 1.
- One GPU (``gpu1``) is for smoke runs with a small model (``model.path=<dir>``): a 7-8B
  backbone's 16 B/parameter alone exceed 80 GB, and the check says so.

``max_num_seqs`` is vLLM's sequences per replica; the live episodes of a step are capped
to the replicas' slots by the agent loop (``training/engines/verl/checks/memory.py``, ``InFlight``).
"""

from __future__ import annotations

import dataclasses

from training.config.hardware import HardwareConfig, Sizing

GENERIC = Sizing()
"""A model the table does not know (a small model for a smoke run): vLLM at half the GPU."""

_QWEN3_H100 = Sizing(1, 0.7, 256, 2, 16_384, None, True, True, False, False, "flash_attention_2")
_QWEN3_H200 = Sizing(1, 0.75, 256, 1, 40_960)
_CODER_H100 = Sizing(1, 0.7, 256, 1, 16_384)
_CODER_H200 = Sizing(1, 0.75, 256, 1, 32_768)
_GEMMA_H100 = Sizing(4, 0.6, 256, 4, 8_192, None, True, True, True, True, "flash_attention_2")
_GEMMA_H200 = Sizing(2, 0.6, 256, 2, 12_288, None, True, True, True, True, "flash_attention_2")
_E4B_H100 = Sizing(1, 0.6, 256, 2, 12_288, None, True, True, False, False, "flash_attention_2")
_E4B_H200 = Sizing(1, 0.7, 256, 1, 24_576)

TABLE: dict[str, dict[str, Sizing]] = {
    "h100x8": {
        "Qwen/Qwen3-8B": _QWEN3_H100,
        "Qwen/Qwen3-4B": _QWEN3_H100,
        "google/gemma-4-E4B-it": _E4B_H100,
        "Qwen/Qwen2.5-Coder-7B-Instruct": _CODER_H100,
        "google/gemma-4-31B-it": _GEMMA_H100,
    },
    "h200x8": {
        "Qwen/Qwen3-8B": _QWEN3_H200,
        "Qwen/Qwen3-4B": _QWEN3_H200,
        "google/gemma-4-E4B-it": _E4B_H200,
        "Qwen/Qwen2.5-Coder-7B-Instruct": _CODER_H200,
        "google/gemma-4-31B-it": _GEMMA_H200,
    },
    "gpu1": {},
}
"""hardware name -> backbone hub name -> sizing; a model not listed gets :data:`GENERIC`."""


def sizing_for(hw: HardwareConfig, model: str) -> Sizing | None:
    """The table row of ``model`` on ``hw`` with ``hardware.*`` values applied; None on
    ``hardware=cpu`` (the veRL engine's generic sizes stand, unchecked)."""
    if not hw.sized:
        return None
    row = TABLE.get(hw.name, {}).get(model, GENERIC)
    return dataclasses.replace(row, **hw.overrides)
