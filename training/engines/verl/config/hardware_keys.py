"""The ``hardware`` group's row -> veRL keys, and the sizing report of a finished veRL tree.

:func:`hardware_fields` maps the project's ``hardware`` group onto
:class:`~training.engines.verl.config.verl_settings.VerlSettings` (GPUs, nodes, the table row of the
model); :func:`sizing_values` is the last section :func:`~training.engines.verl.config.translate
.fill_from_settings` writes (so the row wins over the generic sizes before it, and
``verl.*`` overrides still win over the row); :func:`sizing_report` runs
:mod:`training.engines.verl.checks.memory` on the tree a run will launch. With ``hardware=cpu`` nothing is
written: the veRL engine's generic sizes stand and the estimate has no GPU to compare with.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from training.config.hardware import Sizing
from training.engines.verl.checks.memory import per_worker_cap
from training.engines.verl.checks.sizing_table import sizing_for

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from training.config import TrainConfig
    from training.engines.verl.checks.memory import SizingReport
    from training.engines.verl.config.verl_settings import VerlSettings

ENTROPY_CHUNK = 2048  # rows per entropy chunk (veRL's default chunk size)


def hardware_fields(cfg: TrainConfig, model: str) -> dict[str, Any]:
    """GPUs per node, nodes and the sizing row of ``model`` (None on ``hardware=cpu``)."""
    hw = cfg.hardware
    out: dict[str, Any] = {"sizing": sizing_for(hw, model), "nnodes": hw.nnodes}
    if hw.gpus_per_node is not None:
        out["n_gpus_per_node"] = hw.gpus_per_node
    return out


def token_budgets(s: VerlSettings, row: Sizing) -> tuple[int, int]:
    """(update, log-prob) tokens per GPU: the row's, never below one full sequence split
    over the Ulysses group (veRL asserts a packed micro-batch holds one)."""
    least = math.ceil(s.max_model_len / row.ulysses_sp)
    update = max(row.tokens_per_gpu or least, least)
    return update, max(row.log_prob_tokens_per_gpu or update, least)


def episode_cap(s: VerlSettings) -> int | None:
    """Live episodes per agent-loop worker so a step's episodes fit vLLM's slots (None: no cap needed)."""
    if s.sizing is None:
        return None
    questions = s.train_batch_size * (s.oversample if s.dynamic_sampling else 1)
    replicas = max(1, s.n_gpus_per_node * s.nnodes // s.sizing.tensor_parallel_size)
    return per_worker_cap(questions, s.group_size, s.agent_workers, replicas, s.sizing.max_num_seqs)


def sizing_values(s: VerlSettings) -> dict[str, Any]:
    row = s.sizing
    if row is None:
        return {}
    update, log_prob = token_budgets(s, row)
    arr = "actor_rollout_ref"
    values: dict[str, Any] = {
        f"{arr}.rollout.tensor_model_parallel_size": row.tensor_parallel_size,
        f"{arr}.rollout.gpu_memory_utilization": row.gpu_memory_utilization,
        f"{arr}.rollout.max_num_seqs": row.max_num_seqs,
        f"{arr}.actor.ppo_max_token_len_per_gpu": update,
        f"{arr}.rollout.log_prob_max_token_len_per_gpu": log_prob,
        f"{arr}.ref.log_prob_max_token_len_per_gpu": log_prob,
        f"{arr}.model.enable_gradient_checkpointing": row.gradient_checkpointing,
        f"{arr}.actor.fsdp_config.param_offload": row.param_offload,
        f"{arr}.actor.fsdp_config.optimizer_offload": row.optimizer_offload,
        f"{arr}.ref.fsdp_config.param_offload": row.param_offload,
    }
    for part in ("actor", "ref"):
        values[f"{arr}.{part}.ulysses_sequence_parallel_size"] = row.ulysses_sp
        values[f"{arr}.{part}.fsdp_config.ulysses_sequence_parallel_size"] = row.ulysses_sp
        values[f"{arr}.{part}.entropy_from_logits_with_chunking"] = row.entropy_chunking
        values[f"{arr}.{part}.entropy_from_logits_chunk_size"] = ENTROPY_CHUNK
    if row.attn_implementation:
        values[f"{arr}.model.override_config.attn_implementation"] = row.attn_implementation
    return values


def sizing_report(cfg: TrainConfig, verl_cfg: DictConfig) -> SizingReport:
    """The estimate and verdicts for the tree a run launches (the model's sizes from its
    local ``config.json`` or the backbone table)."""
    from training.engines.verl.checks.backbones import architecture_of
    from training.engines.verl.checks.memory import size_run

    arch, origin = architecture_of(str(verl_cfg.actor_rollout_ref.model.path))
    return size_run(verl_cfg, arch, origin, cfg.hardware.gpu_memory_gib, cfg.hardware.name)
