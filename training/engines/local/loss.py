"""The local engine's update side: log-prob passes and the GRPO loss (generation is
``training.generation.hf``).

Log-probs: one forward pass over left-padded ``prompt + response`` rows with explicit
position ids; ``logits_to_keep`` restricts the LM head to the response span.

Loss: veRL's ``compute_policy_loss_vanilla`` (clip low/high, dual clip, token-mean via
``agg_loss``) once per advantage track, each normalised over its own mask's tokens across
the whole mini-batch (so gradient accumulation over micro-batches equals one big batch),
plus veRL's KL penalty when beta > 0.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from training.engines.local.logprobs.chunked import chunked_response_log_probs, plain_head, trained_positions
from training.engines.local.logprobs.shared_prefix import packed_inputs, use_packed_attention
from training.generation.hf import AutocastDtype, autocast_context, left_pad

# ----------------------------------------------------------------------------- generation


# ----------------------------------------------------------------------------- log-probs


@dataclass
class PolicyBatch:
    """Tensors of a micro-batch of trajectories (responses right-aligned in ``input_ids``,
    or packed behind their shared prompt prefix: training/engines/local/logprobs/shared_prefix.py).

    ``masks`` hold one 0/1 float mask per advantage track (``full``: policy tokens; the
    schema track: policy tokens up to the propose turn), all [batch, resp_len], with
    response token j of row i at column j (right padding within the response block).
    """

    input_ids: torch.Tensor  # [batch, seq_len] left-padded prompt + response; packed: [1, T]
    attention_mask: torch.Tensor  # [batch, seq_len]; packed: [1, 1, T, T] bool block mask
    position_ids: torch.Tensor  # [batch, seq_len]; packed: [1, T]
    responses: torch.Tensor  # [batch, resp_len] response ids, right-padded with pad_id
    resp_lens: torch.Tensor  # [batch]
    masks: dict[str, torch.Tensor]  # track -> [batch, resp_len]
    advantages: dict[str, torch.Tensor]  # track -> [batch]
    state_index: torch.Tensor  # [batch, resp_len] flat index of the state predicting each response token
    old_log_probs: torch.Tensor | None = None  # [batch, resp_len]
    ref_log_probs: torch.Tensor | None = None  # [batch, resp_len]
    rollout_log_probs: torch.Tensor | None = None  # [batch, resp_len] the generating model's, 0 beyond
    rollout_is_weights: torch.Tensor | None = None  # [batch, resp_len] IS correction weights
    rows: list[int] = field(default_factory=list)  # indices into the step's trajectory list
    packed: bool = False
    segments: tuple[int, tuple[int, ...]] | None = None  # packed: the prefix's length and each remainder's


def build_policy_batch(
    prompts: Sequence[Sequence[int]],
    responses: Sequence[Sequence[int]],
    masks: Mapping[str, Sequence[Sequence[float]]],
    advantages: Mapping[str, Sequence[float]],
    pad_id: int,
    rows: Sequence[int] = (),
    rollout_log_probs: Sequence[Sequence[float] | None] | None = None,
    pack: bool = False,
) -> PolicyBatch:
    """Pack trajectories so that every response ends at the last column (left padding), or
    with ``pack`` into one sequence behind their shared prompt prefix (shared_prefix.py; the
    chunked LM-head path reads it). ``rollout_log_probs``: per row, the generating model's
    log-probs (or None for all rows when any row lacks them)."""
    resp_len = max(1, max(len(r) for r in responses))
    resp_lens = torch.tensor([len(r) for r in responses], dtype=torch.long)  # [batch]
    if pack:
        inputs = packed_inputs(prompts, responses)
        input_ids, attention_mask = inputs["input_ids"], inputs["attention_mask"]
        position_ids, state_index = inputs["position_ids"], inputs["state_index"]
        segments = inputs["segments"]
    else:
        seqs = [list(p) + list(r) for p, r in zip(prompts, responses, strict=True)]
        input_ids, attention_mask = left_pad(seqs, pad_id)  # [batch, seq_len]
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # [batch, seq_len]
        state_index = _padded_state_index(resp_lens, resp_len, input_ids.shape[1])
        segments = None
    resp = torch.full((len(responses), resp_len), pad_id, dtype=torch.long)  # [batch, resp_len]
    for i, r in enumerate(responses):
        resp[i, : len(r)] = torch.tensor(list(r), dtype=torch.long)
    packed = {track: _pad_float(rows_, resp_len) for track, rows_ in masks.items()}  # track -> [batch, resp_len]
    adv = {track: torch.tensor(list(v), dtype=torch.float32) for track, v in advantages.items()}
    return PolicyBatch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        responses=resp,
        resp_lens=resp_lens,
        masks=packed,
        advantages=adv,
        rows=list(rows),
        state_index=state_index,
        packed=pack,
        segments=segments,
        rollout_log_probs=(
            _pad_float(rollout_log_probs, resp_len)  # type: ignore[arg-type]
            if rollout_log_probs is not None and all(r is not None for r in rollout_log_probs)
            else None
        ),
    )


def _padded_state_index(resp_lens: torch.Tensor, resp_len: int, seq_len: int) -> torch.Tensor:
    """[batch, resp_len]: row i's response token j sits at column seq_len - L_i + j of its
    left-padded row, predicted by the state one before it (flat index over [batch, seq_len])."""
    j = torch.arange(resp_len).unsqueeze(0)  # [1, resp_len]
    column = (seq_len - 1 - resp_lens.unsqueeze(1) + j).clamp(min=0)  # [batch, resp_len]
    return torch.arange(len(resp_lens)).unsqueeze(1) * seq_len + column


def _pad_float(rows: Sequence[Sequence[float]], width: int) -> torch.Tensor:
    out = torch.zeros((len(rows), width), dtype=torch.float32)  # [batch, resp_len]
    for i, row in enumerate(rows):
        if len(row):
            out[i, : len(row)] = torch.tensor(list(row), dtype=torch.float32)
    return out


def response_log_probs(
    model: Any,
    batch: PolicyBatch,
    device: str = "cpu",
    autocast: AutocastDtype = None,
    with_entropy: bool = False,
    entropy_grad: bool = False,
    recompute_head: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs of the response tokens under ``model`` (and entropy if asked).

    Returns ([batch, resp_len], [batch, resp_len] | None), zero beyond each response and at
    the positions no track's mask trains (``chunked.trained_positions``). Models
    whose logits are ``lm_head(hidden)`` run the LM head in chunks (logprobs/chunked.py), so
    no [batch, resp_len, vocab] tensor is held; others take the plain path.
    ``recompute_head=False``: the backward pass follows at once (a single chunk keeps its logits).
    """
    parts = plain_head(model)
    if parts is not None:
        if batch.packed:
            use_packed_attention(parts[0])
        return chunked_response_log_probs(
            *parts, batch, device, autocast, with_entropy, entropy_grad, recompute_head=recompute_head
        )
    return plain_response_log_probs(model, batch, device, autocast, with_entropy, entropy_grad)


def plain_response_log_probs(
    model: Any,
    batch: PolicyBatch,
    device: str = "cpu",
    autocast: AutocastDtype = None,
    with_entropy: bool = False,
    entropy_grad: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``response_log_probs`` through the model's own forward and full response logits."""
    if batch.packed:
        raise ValueError("a packed micro-batch needs the chunked LM-head path (logprobs.chunked.plain_head)")
    resp_len = batch.responses.shape[1]
    keep = resp_len + 1  # logits at position t predict token t+1
    with autocast_context(device, autocast):
        out = model(
            input_ids=batch.input_ids.to(device),
            attention_mask=batch.attention_mask.to(device),
            position_ids=batch.position_ids.to(device),
            logits_to_keep=keep,
            use_cache=False,
        )
    logits = out.logits[:, :-1, :].float()  # [batch, keep-1, vocab] predicts the last keep-1 tokens
    seq_len = batch.input_ids.shape[1]
    # Row i's response occupies the last L_i columns of input_ids; shift it to start at column 0.
    idx = _response_columns(batch.resp_lens, resp_len, seq_len, keep).to(logits.device)  # [batch, resp_len]
    logits = torch.gather(logits, 1, idx.unsqueeze(-1).expand(-1, -1, logits.shape[-1]))  # [batch, resp_len, vocab]
    targets = batch.responses.to(logits.device)  # [batch, resp_len]
    log_norm = torch.logsumexp(logits, dim=-1)  # [batch, resp_len]
    picked = torch.gather(logits, -1, targets.unsqueeze(-1)).squeeze(-1)  # [batch, resp_len]
    valid = trained_positions(batch).float().to(logits.device)  # [batch, resp_len]
    log_probs = (picked - log_norm) * valid  # [batch, resp_len]
    entropy = None
    if with_entropy:
        with contextlib.nullcontext() if entropy_grad else torch.no_grad():
            probs = torch.softmax(logits, dim=-1)  # [batch, resp_len, vocab]
            entropy = (log_norm - (probs * logits).sum(-1)) * valid  # [batch, resp_len]
    return log_probs, entropy


def _response_columns(resp_lens: torch.Tensor, resp_len: int, seq_len: int, keep: int) -> torch.Tensor:
    """Column in the kept-logits block predicting response token j of each row.

    Kept logits cover positions seq_len-keep .. seq_len-2 (predicting seq_len-keep+1 ..
    seq_len-1). Row i's response token j sits at seq_len - L_i + j, predicted by the logit
    at seq_len - L_i + j - 1, i.e. kept column keep - 1 - L_i + j.
    """
    j = torch.arange(resp_len).unsqueeze(0)  # [1, resp_len]
    cols = keep - 1 - resp_lens.unsqueeze(1) + j  # [batch, resp_len]
    return cols.clamp(0, keep - 2)


# ----------------------------------------------------------------------------- loss


@dataclass(frozen=True)
class LossSettings:
    """What the loss needs from the config (not the config itself)."""

    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.28
    clip_ratio_c: float = 3.0
    loss_agg_mode: str = "token-mean"
    track_weights: tuple[tuple[str, float], ...] = (("full", 1.0),)  # (track, weight) pairs
    kl_type: str = "low_var_kl"
    entropy_coeff: float = 0.0


@functools.lru_cache(maxsize=8)
def _actor_config(s: LossSettings) -> Any:
    """A veRL ActorConfig carrying the clip settings (only the loss reads it)."""
    from verl.workers.config import ActorConfig

    return ActorConfig(
        strategy="fsdp",
        rollout_n=2,
        ppo_micro_batch_size_per_gpu=1,
        clip_ratio=s.clip_ratio_low,
        clip_ratio_low=s.clip_ratio_low,
        clip_ratio_high=s.clip_ratio_high,
        clip_ratio_c=s.clip_ratio_c,
        loss_agg_mode=s.loss_agg_mode,
    )


@dataclass(frozen=True)
class TrackTotals:
    """Per-track normalisers over the whole mini-batch (tokens and sequences in its mask)."""

    tokens: Mapping[str, float]
    sequences: Mapping[str, float]


def track_totals(masks: Mapping[str, torch.Tensor]) -> TrackTotals:
    """Totals from full-mini-batch masks (track -> [batch, resp_len])."""
    return TrackTotals(
        tokens={t: float(m.sum()) for t, m in masks.items()},
        sequences={t: float((m.sum(-1) > 0).sum()) for t, m in masks.items()},
    )


def loss_has_gradient(
    masks: Mapping[str, torch.Tensor],  # track -> [batch, resp_len]
    advantages: Mapping[str, torch.Tensor],  # track -> [batch]
    settings: LossSettings,
    beta: float = 0.0,
    ref_log_probs: torch.Tensor | None = None,
) -> bool:
    """Whether ``grpo_loss`` on these rows can have a non-zero gradient. With no KL or entropy
    term each weighted track's term is advantage x mask per token (clipped or not), so rows
    whose every weighted track is zero there (zero-variance groups, rejected rows) add exactly
    zero: the update skips their backward pass."""
    if settings.entropy_coeff != 0.0 or (beta > 0 and ref_log_probs is not None):
        return True
    weights = dict(settings.track_weights)
    return any(
        weights.get(track, 0.0) != 0.0 and bool((advantages[track].unsqueeze(-1) * mask).abs().sum() > 0)
        for track, mask in masks.items()
    )


def grpo_loss(
    log_probs: torch.Tensor,  # [batch, resp_len]
    old_log_probs: torch.Tensor,  # [batch, resp_len]
    masks: Mapping[str, torch.Tensor],  # track -> [batch, resp_len]
    advantages: Mapping[str, torch.Tensor],  # track -> [batch]
    totals: TrackTotals,
    settings: LossSettings,
    beta: float = 0.0,
    ref_log_probs: torch.Tensor | None = None,  # [batch, resp_len]
    entropy: torch.Tensor | None = None,  # [batch, resp_len]
    rollout_is_weights: torch.Tensor | None = None,  # [batch, resp_len] IS correction (veRL's)
) -> tuple[torch.Tensor, dict[str, float]]:
    """Sum over tracks of weight * clipped PG loss (+ beta * KL, - entropy bonus).

    Tokens outside a track's mask contribute nothing: veRL multiplies the loss matrix by
    the mask before summing, so an observation token's log-prob and advantage cannot
    change the loss.
    """
    from verl.trainer.ppo.core_algos import agg_loss, compute_policy_loss_vanilla, kl_penalty

    config = _actor_config(settings)
    device = log_probs.device
    total = torch.zeros((), device=device)
    metrics: dict[str, float] = {}
    for track, mask in masks.items():
        weight = dict(settings.track_weights).get(track, 0.0)
        n_tokens = totals.tokens.get(track, 0.0)
        if weight == 0.0 or n_tokens == 0.0:
            continue
        mask = mask.to(device)  # [batch, resp_len]
        adv = advantages[track].to(device).unsqueeze(-1) * mask  # [batch, resp_len]
        config.global_batch_info.clear()
        config.global_batch_info.update(
            dp_size=1, batch_num_tokens=n_tokens, global_batch_size=max(totals.sequences[track], 1.0)
        )
        isw = rollout_is_weights.to(device) if rollout_is_weights is not None else None  # [batch, resp_len]
        loss, pg = compute_policy_loss_vanilla(
            old_log_probs, log_probs, adv, mask, settings.loss_agg_mode, config, rollout_is_weights=isw
        )  # type: ignore[call-arg]  # veRL's registering decorator hides this keyword from mypy
        total = total + weight * loss
        metrics[f"pg_loss/{track}"] = float(loss.detach())
        metrics[f"clip_frac/{track}"] = pg["actor/pg_clipfrac"]
        metrics[f"ppo_kl/{track}"] = pg["actor/ppo_kl"]
    full = masks.get("full")
    n_full = totals.tokens.get("full", 0.0)
    if full is not None and n_full > 0:
        full = full.to(device)  # [batch, resp_len]
        if beta > 0 and ref_log_probs is not None:
            kld = kl_penalty(log_probs, ref_log_probs.to(device), settings.kl_type)  # type: ignore[arg-type]  # veRL types it FloatTensor; [batch, resp_len]
            kl = agg_loss(
                kld,
                full,
                settings.loss_agg_mode,
                batch_num_tokens=int(n_full),
                global_batch_size=int(max(totals.sequences["full"], 1.0)),
            )
            total = total + beta * kl
            metrics["kl"] = float(kl.detach())
        if settings.entropy_coeff and entropy is not None:
            ent = agg_loss(
                entropy,
                full,
                settings.loss_agg_mode,
                batch_num_tokens=int(n_full),
                global_batch_size=int(max(totals.sequences["full"], 1.0)),
            )
            total = total - settings.entropy_coeff * ent
    return total, metrics
