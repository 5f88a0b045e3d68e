"""Rules veRL and vLLM assert only after Ray, FSDP and the vLLM servers have started.

:func:`check_run` runs them on the finished veRL tree (so ``verl.*`` overrides are
checked too) and a :class:`~training.engines.verl.checks.backbones.ModelCard`, before anything starts:
``prepare()`` raises the first failure as a :class:`ConfigError`; a dry run runs the
same checks and prints what it could not check (a hub model whose config is unreadable
offline). Each message names the number to change.

Where each rule comes from in veRL 0.9.1 / vLLM:
- context: ``vLLMHttpServer._validate_configs`` refuses ``max_model_len`` above the
  model's ``max_position_embeddings`` (rope scaling is not considered);
- mini-batches: ``engine_workers.TrainingWorker.train_mini_batch`` asserts
  ``ppo_mini_batch_size * rollout.n % dp == 0`` (``validate_config`` skips that check
  when ``use_dynamic_bsz`` is on, which it always is here). The project's trainer sizes a
  mini-batch in rows of the batch instead, padded by veRL to a multiple of
  ``mini_batches x dp`` with no-op rows, so this is a note on wasted GPU work, not a failure;
- data parallel: dp = GPUs / Ulysses sequence-parallel size;
- rollout tensor parallel: the rollout world size must divide the GPUs
  (``engine_workers``), and vLLM needs the attention heads divisible by TP and the KV
  heads divisible by TP (or TP by them);
- sequence parallel: ``monkey_patch.apply_monkey_patch`` asserts the same for the heads,
  and only patches flash-attn's forward;
- token budgets: ``seqlen_balancing`` asserts each budget (x the Ulysses size) holds one full sequence;
- LoRA: :mod:`.lora_rules`.
- async modes: :mod:`training.engines.verl.checks.async_rules`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tools.errors import ConfigError
from training.engines.verl.checks.async_rules import async_rule
from training.engines.verl.checks.lora_rules import LORA_RULES

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from training.engines.verl.checks.backbones import ModelCard


@dataclass(frozen=True)
class CheckReport:
    """What :func:`check_run` found: failures (each one a fix), what went unchecked, and
    notes (the run works, but not as well as it could)."""

    failures: tuple[str, ...]
    unchecked: tuple[str, ...]
    notes: tuple[str, ...] = ()

    def raise_first(self) -> None:
        if self.failures:
            more = (
                f" (and {len(self.failures) - 1} more: {'; '.join(self.failures[1:])})"
                if len(self.failures) > 1
                else ""
            )
            raise ConfigError(self.failures[0] + more)


def check_run(cfg: DictConfig, card: ModelCard) -> CheckReport:
    """Every rule below on the veRL tree ``cfg`` for the model ``card`` describes."""
    failures: list[str] = []
    unchecked: list[str] = []
    for rule in RULES:
        failures += rule(cfg, card)
    if not card.known:
        unchecked.append(f"model {card.path}: {card.origin}")
    notes = [note for advice in ADVICE for note in advice(cfg, card)]
    return CheckReport(tuple(failures), tuple(unchecked), tuple(notes))


def _gpus(cfg: DictConfig) -> int:
    return int(cfg.trainer.n_gpus_per_node) * int(cfg.trainer.nnodes)


def _sp(cfg: DictConfig) -> int:
    fsdp = cfg.actor_rollout_ref.actor.get("fsdp_config") or {}
    return int(fsdp.get("ulysses_sequence_parallel_size", 1) or 1)


def context_rule(cfg: DictConfig, card: ModelCard) -> list[str]:
    rollout = cfg.actor_rollout_ref.rollout
    limit = card.max_position_embeddings
    wanted = int(rollout.max_model_len or rollout.prompt_length + rollout.response_length)
    if limit is None or wanted <= limit:
        return []
    factor = -(-wanted // limit)  # ceil
    return [
        f"max_model_len {wanted} = rollout.max_prompt_tokens {rollout.prompt_length} + rollout.max_response_tokens "
        f"{rollout.response_length} exceeds the context of {card.path}, {limit} tokens ({card.origin}); vLLM "
        f"refuses it. Lower rollout.max_prompt_tokens or rollout.max_response_tokens so they sum to <= {limit}, or "
        f"opt in to a longer context with model.context_factor={factor} (a derived model directory with YaRN)"
    ]


def data_parallel_rule(cfg: DictConfig, card: ModelCard) -> list[str]:
    gpus, sp = _gpus(cfg), _sp(cfg)
    if gpus % sp == 0:
        return []
    return [
        f"{gpus} GPU(s) cannot be split into Ulysses groups of {sp}: set "
        f"+verl.actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size to a divisor of {gpus}"
    ]


def padding_note(cfg: DictConfig, card: ModelCard) -> list[str]:
    """Rows per optimizer step that do not split over the data-parallel GPUs are padded."""
    gpus, sp = _gpus(cfg), _sp(cfg)
    if gpus % sp:
        return []
    dp = gpus // sp
    actor = cfg.actor_rollout_ref.actor
    n = int(cfg.actor_rollout_ref.rollout.n)
    rows = int(actor.ppo_mini_batch_size) * n
    if rows % dp == 0:
        return []
    padded = -(-rows // dp) * dp
    ok = [g for g in range(2, 65) if int(actor.ppo_mini_batch_size) * g % dp == 0][:1]
    return [
        f"a mini-batch of {actor.ppo_mini_batch_size} questions x G={n} = {rows} rows does not split over "
        f"{dp} data-parallel GPU(s): each optimizer step is padded to {padded} rows ({padded - rows} no-op). "
        f"Make algorithm.batch_size / algorithm.mini_batches x algorithm.group_size a multiple of {dp}"
        + (f" (e.g. algorithm.group_size={ok[0]})" if ok else "")
        + " to use every GPU"
    ]


def tensor_parallel_rule(cfg: DictConfig, card: ModelCard) -> list[str]:
    tp = int(cfg.actor_rollout_ref.rollout.tensor_model_parallel_size)
    gpus = _gpus(cfg)
    key = "+verl.actor_rollout_ref.rollout.tensor_model_parallel_size"
    out = []
    if gpus % tp:
        out.append(f"rollout tensor parallel size {tp} does not divide the {gpus} GPU(s): set {key} to a divisor")
    out += _heads_divisible(card, tp, f"rollout tensor parallel size {tp}", key)
    return out


def sequence_parallel_rule(cfg: DictConfig, card: ModelCard) -> list[str]:
    sp = _sp(cfg)
    if sp == 1:
        return []
    key = "+verl.actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size"
    out = _heads_divisible(card, sp, f"Ulysses sequence parallel size {sp}", key)
    attn = (cfg.actor_rollout_ref.model.get("override_config") or {}).get("attn_implementation", "flash_attention_2")
    if attn != "flash_attention_2":
        out.append(
            f"Ulysses sequence parallel size {sp} works only with flash-attn (veRL patches its forward), "
            f"not attn_implementation={attn}: set model.attn_implementation=flash_attention_2 (install "
            "flash-attn) or {key}=1"
        )
    return out


def _heads_divisible(card: ModelCard, size: int, what: str, key: str) -> list[str]:
    heads, kv = card.num_attention_heads, card.num_key_value_heads
    if heads is None or size == 1:
        return []
    out = []
    if heads % size:
        out.append(f"{what} does not divide {card.path}'s {heads} attention heads: set {key} to a divisor of {heads}")
    if kv and kv % size and size % kv:
        out.append(f"{what} and {card.path}'s {kv} KV heads: one must divide the other; set {key} accordingly")
    return out


def token_budget_rule(cfg: DictConfig, card: ModelCard) -> list[str]:
    arr = cfg.actor_rollout_ref
    longest = int(arr.rollout.prompt_length) + int(arr.rollout.response_length)
    budgets = {
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": arr.actor.ppo_max_token_len_per_gpu,
        "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu": arr.rollout.log_prob_max_token_len_per_gpu,
        "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu": arr.ref.log_prob_max_token_len_per_gpu,
    }
    sp = _sp(cfg)  # veRL packs budget x sp tokens per Ulysses group
    least = -(-longest // sp)
    over = f" / Ulysses {sp}" if sp > 1 else ""
    return [
        f"{key}={value} is below one full sequence ({longest} = prompt + response tokens{over}); veRL asserts every "
        f"packed micro-batch holds one: set +verl.{key} >= {least}"
        for key, value in budgets.items()
        if value is not None and int(value) * sp < longest
    ]


RULES = (
    context_rule,
    data_parallel_rule,
    tensor_parallel_rule,
    sequence_parallel_rule,
    token_budget_rule,
    *LORA_RULES,
    async_rule,
)
"""Each rule: (veRL tree, model card) -> failure messages; run in order by :func:`check_run`."""
ADVICE = (padding_note,)
"""Each: (veRL tree, model card) -> notes on a run that works but wastes GPU work."""
