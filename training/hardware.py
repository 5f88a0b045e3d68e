"""The ``hardware`` group (``recipes/hardware/*.yaml``) and the sizing table per backbone.

The YAML file says what the machine is (GPUs per node, nodes, memory per GPU as
``torch.cuda.get_device_properties(i).total_memory`` reports it); this module's table
says how each backbone of ``training/backbones.py`` runs on it. Any ``hardware.<key>`` set
on the command line replaces the table's value; :mod:`training.sizing` prints the
estimate and refuses what cannot fit (``dry_run=true`` shows both).

How the rows were chosen (bytes per GPU from ``training/sizing.py``'s arithmetic, which
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
- One GPU (``gpu1``) is for smoke runs with a small model (``model.path=<dir>``): a 7-8B
  backbone's 16 B/parameter alone exceed 80 GB, and the check says so.

``max_num_seqs`` is vLLM's sequences per replica; the live episodes of a step are capped
to the replicas' slots by the agent loop (``training/sizing.py``, ``InFlight``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from tools.errors import ConfigError


@dataclass(frozen=True)
class Sizing:
    """How one model runs on one kind of machine (a row of :data:`TABLE`)."""

    tensor_parallel_size: int = 1  # vLLM TP; replicas = GPUs / TP
    gpu_memory_utilization: float = 0.5  # vLLM's share of each GPU
    max_num_seqs: int = 256  # vLLM sequences per replica
    ulysses_sp: int = 1  # Ulysses sequence parallel size (> 1 needs flash-attn)
    tokens_per_gpu: int | None = None  # update budget; None = one full sequence; never below max_model_len / sp
    log_prob_tokens_per_gpu: int | None = None  # log-prob passes; None = as tokens_per_gpu
    gradient_checkpointing: bool = True
    entropy_chunking: bool = True  # entropy over 2,048-row chunks of the logits
    param_offload: bool = False  # actor weights (and the reference's) on CPU between phases
    optimizer_offload: bool = False  # AdamW moments on CPU between updates
    attn_implementation: str | None = None  # None = the model group's; flash_attention_2 where Ulysses runs


GENERIC = Sizing()
"""A model the table does not know (a small model for a smoke run): vLLM at half the GPU."""

_QWEN3_H100 = Sizing(1, 0.7, 256, 2, 16_384, None, True, True, False, False, "flash_attention_2")
_QWEN3_H200 = Sizing(1, 0.75, 256, 1, 40_960)
_CODER_H100 = Sizing(1, 0.7, 256, 1, 16_384)
_CODER_H200 = Sizing(1, 0.75, 256, 1, 32_768)
_GEMMA_H100 = Sizing(4, 0.6, 256, 4, 8_192, None, True, True, True, True, "flash_attention_2")
_GEMMA_H200 = Sizing(2, 0.6, 256, 2, 12_288, None, True, True, True, True, "flash_attention_2")

TABLE: dict[str, dict[str, Sizing]] = {
    "h100x8": {
        "Qwen/Qwen3-8B": _QWEN3_H100,
        "Qwen/Qwen2.5-Coder-7B-Instruct": _CODER_H100,
        "google/gemma-4-31B-it": _GEMMA_H100,
    },
    "h200x8": {
        "Qwen/Qwen3-8B": _QWEN3_H200,
        "Qwen/Qwen2.5-Coder-7B-Instruct": _CODER_H200,
        "google/gemma-4-31B-it": _GEMMA_H200,
    },
    "gpu1": {},
}
"""hardware name -> backbone hub name -> sizing; a model not listed gets :data:`GENERIC`."""

OVERRIDABLE = tuple(f.name for f in dataclasses.fields(Sizing))


@dataclass
class HardwareConfig:
    """``hardware`` group: the machine, and (null = the table's) any value of its row."""

    name: str = "cpu"
    gpus_per_node: int | None = None  # None (cpu): veRL's own 8, not sized
    nnodes: int = 1
    gpu_memory_gib: float | None = None  # total_memory per GPU; None: no GPU to size against
    gpu: str | None = None  # the GPU model, as torch.cuda.get_device_name reports it (preflight)
    tensor_parallel_size: int | None = None
    gpu_memory_utilization: float | None = None
    max_num_seqs: int | None = None
    ulysses_sp: int | None = None
    tokens_per_gpu: int | None = None
    log_prob_tokens_per_gpu: int | None = None
    gradient_checkpointing: bool | None = None
    entropy_chunking: bool | None = None
    param_offload: bool | None = None
    optimizer_offload: bool | None = None
    attn_implementation: str | None = None

    def __post_init__(self) -> None:
        if self.gpus_per_node is not None and self.gpus_per_node < 1:
            raise ConfigError(f"hardware.gpus_per_node={self.gpus_per_node}: a positive integer (or null on CPU)")
        if self.nnodes < 1:
            raise ConfigError(f"hardware.nnodes={self.nnodes}: a positive integer")
        for key in ("tensor_parallel_size", "max_num_seqs", "ulysses_sp", "tokens_per_gpu", "log_prob_tokens_per_gpu"):
            value = getattr(self, key)
            if value is not None and value < 1:
                raise ConfigError(f"hardware.{key}={value}: a positive integer, or null for the table's value")
        util = self.gpu_memory_utilization
        if util is not None and not 0.0 < util < 1.0:
            raise ConfigError(f"hardware.gpu_memory_utilization={util}: a fraction in (0, 1), or null")
        if not self.sized and self.overrides:
            raise ConfigError(
                f"hardware={self.name} sizes nothing, so {sorted(self.overrides)} would be ignored: "
                "pick the machine first (hardware=h100x8 | h200x8 | gpu1)"
            )

    @property
    def sized(self) -> bool:
        """Whether there is a GPU to size against (every group but ``cpu``)."""
        return self.gpus_per_node is not None

    @property
    def overrides(self) -> dict[str, Any]:
        """The table values this group or the command line replaces."""
        return {name: getattr(self, name) for name in OVERRIDABLE if getattr(self, name) is not None}


def sizing_for(hw: HardwareConfig, model: str) -> Sizing | None:
    """The table row of ``model`` on ``hw`` with ``hardware.*`` values applied; None on
    ``hardware=cpu`` (the veRL engine's generic sizes stand, unchecked)."""
    if not hw.sized:
        return None
    row = TABLE.get(hw.name, {}).get(model, GENERIC)
    return dataclasses.replace(row, **hw.overrides)
