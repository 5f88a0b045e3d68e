"""The rollout (sampling), data and algorithm sections of the veRL tree, and
the project-config fields they read (moved out of :mod:`training.engines.verl.config.translate`,
which re-exports every public name; the model, actor and trainer sections stay there).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tools.errors import ConfigError
from training.engines.verl.shared import AGENT_LOOP_NAME, REWARD_FUNCTION_MODULE, REWARD_FUNCTION_NAME

if TYPE_CHECKING:
    from training.config import TrainConfig
    from training.engines.verl.config.verl_settings import VerlSettings


def max_tokens_per_gpu(s: VerlSettings) -> int:
    """Per-GPU token budget of a packed micro-batch (dynamic batch size: multi-turn
    responses vary a lot in length, so micro-batches are packed by tokens, not rows).

    With flash-attn the varlen kernel needs no mask: two full-length sequences per GPU.
    With sdpa, transformers builds a block-diagonal boolean mask over the packed row,
    ``budget**2`` bytes (more where a kernel converts it to the compute dtype): one
    full-length sequence per GPU keeps it at ``max_model_len**2`` - 1.7 GB for DualSQL's
    40,960 (tests/training/engines/verl/test_packed_sdpa.py shows the packed mask is exact).
    """
    per_sequence = s.max_model_len
    return per_sequence if s.attn_implementation == "sdpa" else 2 * per_sequence


def rollout_values(s: VerlSettings) -> dict[str, Any]:
    """vLLM in async mode behind our agent loop; G samples per prompt; greedy validation."""
    prefix = "actor_rollout_ref.rollout"
    values = {
        "name": "vllm",
        "mode": "async",
        "n": s.group_size,
        "temperature": s.temperature,
        "top_p": s.top_p,
        "top_k": s.top_k,
        "val_kwargs.temperature": s.val_temperature,
        "val_kwargs.top_p": s.val_top_p,
        "val_kwargs.n": s.val_n,
        "val_kwargs.do_sample": s.val_temperature > 0,
        "prompt_length": s.prompt_length,
        "response_length": s.response_length,
        "max_model_len": s.max_model_len,
        "tensor_model_parallel_size": s.tensor_parallel_size,
        "gpu_memory_utilization": s.gpu_memory_utilization,
        "calculate_log_probs": True,
        "multi_turn.enable": True,
        "agent.default_agent_loop": AGENT_LOOP_NAME,
        "agent.num_workers": s.agent_workers,
        "log_prob_use_dynamic_bsz": True,
        "log_prob_max_token_len_per_gpu": max_tokens_per_gpu(s),
    }
    out = {f"{prefix}.{key}": value for key, value in values.items()}
    out["actor_rollout_ref.ref.log_prob_use_dynamic_bsz"] = True
    out["actor_rollout_ref.ref.log_prob_max_token_len_per_gpu"] = max_tokens_per_gpu(s)
    return out


def data_values(s: VerlSettings) -> dict[str, Any]:
    return {
        "data.train_files": s.train_files,
        "data.val_files": s.val_files,
        "data.train_batch_size": s.train_batch_size,
        "data.max_prompt_length": s.prompt_length,
        "data.max_response_length": s.response_length,
        "data.return_raw_chat": True,
        "data.filter_overlong_prompts": False,  # the agent builds the real prompt; the driver drops long ones
        "data.truncation": "error",
        "data.shuffle": True,
        "data.seed": s.seed,
    }


def algorithm_values(s: VerlSettings) -> dict[str, Any]:
    """GRPO (the trainer subclass computes it), dynamic sampling, our reward function.

    veRL's ``filter_groups`` refills a step with new batches until B groups have reward
    variance; that is only switched on with ``algorithm.dynamic_sampling.refill=true``.
    The default (the papers' DAPO as the papers ran it: draw B x K once, keep up to B groups,
    zero-mask the rest) is the trainer subclass's, from the ``sqlagent`` namespace.
    """
    return {
        "algorithm.adv_estimator": "grpo",
        "algorithm.norm_adv_by_std_in_grpo": s.norm_by_std,
        "algorithm.use_kl_in_reward": False,
        "algorithm.filter_groups.enable": s.dynamic_sampling and s.refill,
        "algorithm.filter_groups.metric": "score" if s.filter_metric == "total" else s.filter_metric,
        "algorithm.filter_groups.max_inflight_gen_batches": s.oversample,
        "reward.custom_reward_function.path": _module_file(REWARD_FUNCTION_MODULE),
        "reward.custom_reward_function.name": REWARD_FUNCTION_NAME,
    }


def _module_file(module: str) -> str:
    """Absolute path of a module's source file (veRL loads reward functions by path)."""
    import importlib.util

    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ConfigError(f"cannot locate module {module!r}; is the project installed (`pip install -e .`)?")
    return spec.origin


def _algorithm_fields(cfg: TrainConfig) -> dict[str, Any]:
    """GRPO, the optimizer, dynamic sampling and the advantage estimator."""
    alg, opt, adv, ds = cfg.algorithm, cfg.optim, cfg.advantage, cfg.algorithm.dynamic_sampling
    return {
        "group_size": alg.group_size,
        "train_batch_size": alg.batch_size,
        "ppo_mini_batch_size": alg.batch_size // alg.mini_batches,
        "lr": opt.lr,
        "betas": (float(opt.betas[0]), float(opt.betas[1])),
        "warmup_ratio": opt.warmup_ratio,
        "weight_decay": opt.weight_decay,
        "grad_clip": opt.grad_clip,
        "clip_ratio_low": alg.clip_ratio_low,
        "clip_ratio_high": alg.clip_ratio_high,
        "clip_ratio_c": alg.clip_ratio_c,
        "entropy_coeff": alg.entropy_coeff,
        "loss_agg_mode": alg.loss_agg_mode,
        "kl_schedule": tuple((int(a), float(b)) for a, b in alg.kl_schedule),
        "kl_loss_type": alg.kl_type,
        "dynamic_sampling": ds.enable,
        "refill": ds.refill,
        "filter_metric": ds.metric,
        "filter_min_std": ds.min_std,
        "flagged_positive_as_unknown": ds.flagged_positive_as_unknown,
        "return_unkept": ds.return_unkept,
        "oversample": ds.oversample,
        "advantage": adv.estimator,
        "schema_weight": adv.schema_weight,
        "schema_track": adv.schema_track,
        "advantage_clip": adv.clamp,
        "advantage_epsilon": adv.epsilon,
        "norm_by_std": adv.norm_by_std,
        "group_by": adv.group_by,
    }


def _rollout_fields(cfg: TrainConfig) -> dict[str, Any]:
    """Sampling and lengths (the prompt budget is the design's drop rule)."""
    roll = cfg.rollout
    return {
        "temperature": roll.temperature,
        "top_p": roll.top_p,
        "top_k": roll.top_k if roll.top_k > 0 else -1,
        "val_temperature": roll.eval_temperature,
        "prompt_length": roll.max_prompt_tokens,
        "response_length": roll.max_response_tokens,
        "max_new_tokens_per_turn": roll.max_new_tokens,
        "observation_max_tokens": roll.observation_max_tokens,
    }


def async_values(s: VerlSettings) -> dict[str, Any]:
    """veRL's keys of an async mode (none for ``sync``): the staleness bound, the batches
    generating ahead, the IS correction of the lag, and for ``separate_async`` the
    standalone rollout pool (its own GPUs, weights sent over NCCL, no rollout on the
    training GPUs) and one weight sync per step of ``mini_batches`` optimizer steps."""
    if s.trainer_mode == "sync":
        return {}
    values: dict[str, Any] = {
        "trainer.v1.sampler.max_off_policy_threshold": s.staleness + 1,
        "trainer.v1.sampler.max_off_policy_strategy": s.stale_rollouts,
        f"trainer.v1.{s.trainer_mode}.num_warmup_batches": s.warmup_batches,
    }
    if s.async_correction is not None and not s.has_rollout_correction:
        values["algorithm.rollout_correction.rollout_is"] = s.async_correction
    if s.trainer_mode == "separate_async":
        mini = s.ppo_mini_batch_size or s.train_batch_size
        values.update(
            {
                "trainer.v1.separate_async.parameter_sync_step": s.train_batch_size // mini,
                "actor_rollout_ref.hybrid_engine": False,
                "actor_rollout_ref.rollout.checkpoint_engine.backend": "nccl",
                "actor_rollout_ref.rollout.n_gpus_per_node": s.rollout_gpus,
                "actor_rollout_ref.rollout.nnodes": s.rollout_nodes,
            }
        )
    return values
