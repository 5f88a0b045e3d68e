"""Async-mode settings (``trainer.mode=colocate_async|separate_async``) that veRL 0.9.1
rejects only once Ray and the trainer have started, or that would run wrong; each message
names the project key (or the ``verl.*`` key) to change and the value that works.

Where each rule comes from in veRL 0.9.1:
- staleness: ``ReplayBuffer.__init__`` asserts ``max_off_policy_threshold`` is a positive
  integer or null; a threshold of 1 (``trainer.staleness=0``) drops every rollout generated
  ahead (``drop``) or waits for all of them every step (``wait``): the sync trainer's
  behaviour at more cost, so it is refused;
- separate_async: ``PPOTrainerSeparateAsync.__init__`` asserts ``train_batch_size ==
  parameter_sync_step x ppo_mini_batch_size``, a standalone rollout pool
  (``rollout.nnodes``, ``rollout.n_gpus_per_node`` > 0) and a checkpoint engine other
  than ``naive``; ``LLMServerManager`` splits that pool into replicas of the rollout
  tensor-parallel size;
- dynamic sampling: the papers' one draw (``refill=false``) waits until every prompt of
  its draw has finished and none is in flight, which never happens while an async trainer
  keeps the next batches generating (the project's replay buffer, not veRL's).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from training.engines.verl.shared import VERL_MODE_OF, WorkerSettings

if TYPE_CHECKING:
    from omegaconf import DictConfig


def verl_mode(cfg: DictConfig) -> str:
    """veRL's mode of the run's trainer: sync | colocate_async | separate_async."""
    return VERL_MODE_OF.get(str(cfg.trainer.v1.trainer_mode), "sync")


def async_rule(cfg: DictConfig, card: Any = None) -> list[str]:
    """Every async failure of the veRL tree ``cfg`` (none for the sync trainer)."""
    mode = verl_mode(cfg)
    if mode == "sync":
        return []
    out = _staleness(cfg, mode) + _dynamic_sampling(cfg, mode)
    if mode == "separate_async":
        out += _separate(cfg)
    return out


def _staleness(cfg: DictConfig, mode: str) -> list[str]:
    sampler = cfg.trainer.v1.sampler
    threshold = sampler.get("max_off_policy_threshold")
    if threshold is None:
        return []
    if not isinstance(threshold, int) or threshold < 1:
        return [
            f"verl.trainer.v1.sampler.max_off_policy_threshold={threshold!r}: veRL asserts a positive integer or "
            "null; set trainer.staleness=N (the threshold is N + 1) and leave the veRL key unset"
        ]
    if threshold == 1:
        return [
            f"trainer.staleness=0 with trainer.mode={mode}: every rollout generated ahead is past the bound "
            f"(stale_rollouts={sampler.max_off_policy_strategy}: drop throws each one away, wait makes every step "
            "wait for all generation, the sync trainer at more cost); set trainer.staleness=1 or more, or "
            "trainer.mode=sync"
        ]
    return []


def _dynamic_sampling(cfg: DictConfig, mode: str) -> list[str]:
    dynamic = WorkerSettings.from_config(cfg).dynamic_sampling
    if not dynamic.enable or dynamic.refill:
        return []
    return [
        f"trainer.mode={mode} with algorithm.dynamic_sampling.refill=false: the papers' one draw waits until every "
        "prompt of its draw has finished with none in flight, which never happens while the next batches keep "
        "generating; set algorithm.dynamic_sampling.refill=true (each group without spread is replaced by one "
        "fresh prompt, no slot zero-masked) or trainer.mode=sync"
    ]


def _separate(cfg: DictConfig) -> list[str]:
    out: list[str] = []
    rollout = cfg.actor_rollout_ref.rollout
    batch = int(cfg.data.train_batch_size)
    mini = int(cfg.actor_rollout_ref.actor.ppo_mini_batch_size)
    sync_step = int(cfg.trainer.v1.separate_async.parameter_sync_step)
    if batch != sync_step * mini:
        out.append(
            f"separate_async: train_batch_size {batch} != parameter_sync_step {sync_step} x ppo_mini_batch_size "
            f"{mini} (veRL asserts it); leave verl.trainer.v1.separate_async.parameter_sync_step unset: the verl "
            "engine sets it to algorithm.mini_batches"
        )
    nodes, gpus = int(rollout.nnodes), int(rollout.n_gpus_per_node)
    if nodes <= 0 or gpus <= 0:
        out.append(
            f"separate_async needs its own rollout GPUs (rollout.nnodes={nodes}, rollout.n_gpus_per_node={gpus}): "
            "set trainer.rollout_gpus=N (GPUs per node, e.g. 8) and trainer.rollout_nodes=M"
        )
    else:
        tp = int(rollout.tensor_model_parallel_size)
        if (nodes * gpus) % tp:
            out.append(
                f"separate_async: the rollout pool's {nodes} x {gpus} GPU(s) do not split into vLLM replicas of "
                f"tensor parallel size {tp}: set trainer.rollout_gpus to a multiple of {tp}"
            )
    if str(rollout.checkpoint_engine.backend) == "naive":
        out.append(
            "separate_async sends weights to its own rollout GPUs: verl.actor_rollout_ref.rollout.checkpoint_engine."
            "backend=naive is refused by veRL; set it to nccl (the verl engine's default for this mode)"
        )
    return out
