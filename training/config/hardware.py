"""The ``hardware`` group (``recipes/hardware/*.yaml``): the machine, and any value of its
sizing row (``Sizing``).

The YAML file says what the machine is (GPUs per node, nodes, memory per GPU as
``torch.cuda.get_device_properties(i).total_memory`` reports it); the veRL engine's table
(``training/engines/verl/checks/sizing_table.py``) says how each backbone runs on it. Any
``hardware.<key>`` set on the command line replaces the table's value.
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
