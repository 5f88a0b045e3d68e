"""The local engine's updater: AdamW, the old / reference log-prob passes and the GRPO loss
over one step's buffer.

One optimizer pass per buffer: ``algorithm.mini_batches`` optimizer steps, gradient
accumulation over micro-batches. Old log-probs come from a forward pass of their own only
when they can differ from the update's (more than one mini-batch); with one mini-batch the
policy has not moved since the rollout, so they are the detached log-probs of the update's
forward pass. The rollout correction needs the whole buffer's before the first backward
(its rejection mask changes every loss normaliser): with one mini-batch and gradient
checkpointing the update then runs every micro-batch's forward first and holds their
graphs (the layer inputs only, ``HELD_FORWARD_BYTES`` at most), so no extra pass runs.
A micro-batch whose loss has no gradient (zero advantage or mask on every weighted track,
no KL or entropy term) skips its backward pass; the optimizer still steps on the zeros.
Reference log-probs are computed only while beta > 0, in one pass before the first
optimizer step (the reference is frozen), with the reference model loaded for that pass
only. The generation copy is set aside for the whole update and brought back at its end:
neither sits beside the gradients and AdamW state, where the run's memory peaks.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

import torch

from training.config import AlgorithmConfig, OptimConfig, warmup_steps
from training.engines.local import loss as lp
from training.engines.local.buffer import StepBuffer
from training.engines.local.logprobs.shared_prefix import model_share, plan_micro_batches
from training.engines.local.optimizer_spill import MomentSpill
from training.engines.local.policy_models import PolicyModels
from training.runs.usage import release_free_memory


class Stopwatch:
    """Accumulates named durations for the step-time breakdown."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = {}

    def reset(self) -> None:
        self.totals = {}

    def add(self, name: str, seconds: float) -> None:
        self.totals[name] = self.totals.get(name, 0.0) + seconds

    def measure(self, name: str) -> _Timer:
        return _Timer(self, name)


@dataclass
class _Timer:
    watch: Stopwatch
    name: str
    start: float = 0.0

    def __enter__(self) -> _Timer:
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.watch.add(self.name, time.perf_counter() - self.start)


class Updater:
    """AdamW with linear warmup over ``total_steps * mini_batches`` optimizer steps, and the
    loss passes of one buffer (timed into ``watch`` as ``logprob`` and ``update``)."""

    def __init__(
        self,
        models: PolicyModels,
        optim: OptimConfig,
        algorithm: AlgorithmConfig,
        loss_settings: lp.LossSettings,
        total_steps: int,
        watch: Stopwatch,
        spill_dir: str | None = None,
    ) -> None:
        self.models, self.optim, self.algorithm = models, optim, algorithm
        self.loss_settings, self.watch = loss_settings, watch
        self.spill_dir = spill_dir if optim.spill_state else None  # the warm start's SFT spills there too
        self.released = False  # AdamW's moments were dropped after the run's last step
        self.optimizer = torch.optim.AdamW(  # under LoRA the base is frozen: the adapter's weights only
            [p for p in models.model.parameters() if p.requires_grad],
            lr=optim.lr,
            betas=(optim.betas[0], optim.betas[1]),
            weight_decay=optim.weight_decay,
        )
        self.spill = MomentSpill(self.optimizer, self.spill_dir)
        self.share = model_share(models.model) if optim.share_prefix else None  # None: rows never packed
        warm = warmup_steps(total_steps * algorithm.mini_batches, optim.warmup_ratio)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: min(1.0, (s + 1) / (warm + 1)) if warm else 1.0
        )

    def moments_set_aside(self) -> contextlib.AbstractContextManager[None]:
        """AdamW's moments on disk for the block but for its optimizer steps (``optim.spill_state``;
        a no-op when it is off, before the first optimizer step, and nested):
        training/engines/local/optimizer_spill.py."""
        return self.spill.away()

    def release_optimizer_state(self) -> None:
        """Drop AdamW's moments after the run's last step, which is checkpointed with them:
        the final evaluation's KV caches then take their room (1.0 GiB on SmolLM2-135M, the
        run's peak otherwise). This process trains no more; a later update is refused."""
        self.optimizer.state.clear()
        self.released = True
        release_free_memory()

    def update(self, buffer: StepBuffer, beta: float) -> dict[str, float]:
        """One optimizer pass over the buffer (``mini_batches`` optimizer steps).

        With ``algorithm.rollout_correction`` on, the old (fp32 training) log-probs of the
        whole buffer come first, then veRL's IS weights / rejection mask against the
        generating (bf16) model's log-probs; rejected tokens leave every track's mask."""
        if self.released:
            raise RuntimeError(
                "an update after the run's last step: AdamW's moments were released for the final "
                "evaluation; continue training from the last checkpoint in a new run (resume=auto "
                "with a larger trainer.total_steps)"
            )
        with self.models.generation_copy_set_aside():
            return self._update(buffer, beta)

    def _update(self, buffer: StepBuffer, beta: float) -> dict[str, float]:
        corr = self.algorithm.rollout_correction
        chunks = _split(list(range(buffer.size)), self.algorithm.mini_batches)
        correct = corr.enabled and all(t.logprobs is not None for t in buffer.trajectories)
        ref = self.reference_log_probs(buffer, chunks) if beta > 0 else None
        held = self._held_forwards(buffer) if correct and len(chunks) == 1 else None
        old: dict[int, torch.Tensor] | None
        if held is not None:  # the update's own forward passes give the old log-probs
            old = {i: logp[j].detach().cpu() for micro, (logp, _) in held.items() for j, i in enumerate(micro)}
        else:
            old = self.old_log_probs(buffer) if len(chunks) > 1 or correct else None
        sums: Counter[str] = Counter()
        is_weights: dict[int, torch.Tensor] | None = None
        if correct and old is not None:
            is_weights, corr_metrics = apply_rollout_correction(buffer, old, corr)
            sums.update(corr_metrics)
            sums = Counter({k: v * len(chunks) for k, v in sums.items()})  # divided by len(chunks) below
        for rows in chunks:
            sums.update(self._optimizer_step(buffer, rows, beta, old, is_weights, ref, held))
        return {k: v / len(chunks) for k, v in sums.items()}

    def _optimizer_step(
        self,
        buffer: StepBuffer,
        rows: list[int],
        beta: float,
        old: dict[int, torch.Tensor] | None,
        is_weights: dict[int, torch.Tensor] | None = None,
        ref_log_probs: dict[tuple[int, ...], torch.Tensor] | None = None,
        held: dict[tuple[int, ...], tuple[torch.Tensor, torch.Tensor | None]] | None = None,
    ) -> dict[str, float]:
        """Accumulate gradients over micro-batches, then clip and step once (``held``: the
        micro-batches' forward passes, already run by ``_held_forwards``)."""
        m = self.models
        totals = lp.track_totals(buffer.mask_tensors(rows))
        losses: Counter[str] = Counter()  # per-micro losses are already globally normalised: sum them
        weighted: defaultdict[str, float] = defaultdict(float)  # token-weighted averages (clip fraction, entropy)
        n_full = totals.tokens.get("full", 0.0) or 1.0
        self.optimizer.zero_grad(set_to_none=True)
        stepped = False  # a loss depended on the weights: the optimizer steps on its (maybe zero) gradient
        for micro in micro_batches(rows, buffer, self.optim.micro_batch_size, self.share):
            batch = buffer.policy_batch(micro, m.tokenizer.pad_token_id, self.share)
            ref = ref_log_probs[tuple(micro)] if ref_log_probs is not None else None  # [micro, resp_len]
            with self.watch.measure("update"):
                logp, entropy = held.pop(tuple(micro)) if held is not None else self._forward(batch, held=False)
                old_lp = (
                    torch.stack([_pad_to(old[i], logp.shape[1]) for i in micro]).to(logp.device)
                    if old
                    else logp.detach()
                )  # [micro, resp_len]
                isw = (
                    torch.stack([_pad_to(is_weights[i], logp.shape[1]) for i in micro]) if is_weights else None
                )  # [micro, resp_len]
                loss, metrics = lp.grpo_loss(
                    logp,
                    old_lp,
                    batch.masks,
                    batch.advantages,
                    totals,
                    self.loss_settings,
                    beta=beta,
                    ref_log_probs=ref,
                    entropy=entropy,
                    rollout_is_weights=isw,
                )
                if loss.requires_grad:  # constant when rejection masked every token of the update
                    stepped = True
                    if lp.loss_has_gradient(batch.masks, batch.advantages, self.loss_settings, beta, ref):
                        loss.backward()
            release_free_memory()
            full = batch.masks["full"].to(logp.device)  # [micro, resp_len]
            share = float(full.sum()) / n_full
            if batch.rollout_log_probs is not None and share > 0:
                for key, value in mismatch_metrics(old_lp, batch.rollout_log_probs, full).items():
                    weighted[key] += value * share
            losses.update({k: v for k, v in metrics.items() if k.startswith("pg_loss/") or k == "kl"})
            weighted["policy/clip_frac"] += metrics.get("clip_frac/full", 0.0) * share
            weighted["policy/ppo_kl"] += metrics.get("ppo_kl/full", 0.0) * share
            if entropy is not None:
                weighted["policy/entropy"] += float((entropy.detach() * full).sum()) / n_full
        with self.watch.measure("update"):
            trainable = [p for p in m.model.parameters() if p.requires_grad]
            if stepped:  # the gradient the skipped backward passes would have added: zeros
                for p in trainable:
                    if p.grad is None:
                        p.grad = torch.zeros_like(p)
            norm = torch.nn.utils.clip_grad_norm_(trainable, self.optim.grad_clip)
            with self.spill.back():
                self.optimizer.step()
            self.scheduler.step()
            self.optimizer.zero_grad(set_to_none=True)
        return {**losses, **weighted, "policy/grad_norm": float(norm)}

    def _forward(self, batch: lp.PolicyBatch, held: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The update's forward pass of one micro-batch: log-probs and entropy, [micro, resp_len] each.
        ``held``: its graph waits for the other micro-batches' passes, so the LM head's logits are
        recomputed in the backward pass rather than kept."""
        m = self.models
        return lp.response_log_probs(
            m.model,
            batch,
            m.device,
            m.autocast,
            with_entropy=True,
            entropy_grad=self.loss_settings.entropy_coeff > 0,
            recompute_head=held,
        )

    def _held_forwards(
        self, buffer: StepBuffer
    ) -> dict[tuple[int, ...], tuple[torch.Tensor, torch.Tensor | None]] | None:
        """Every micro-batch's forward pass of a one-mini-batch update, graphs held for the
        backward passes that follow the rollout correction; None when holding them would
        cost more than ``HELD_FORWARD_BYTES`` (then a separate pass gives the old log-probs)."""
        m = self.models
        if held_forward_bytes(m.model, buffer) > HELD_FORWARD_BYTES:
            return None
        out: dict[tuple[int, ...], tuple[torch.Tensor, torch.Tensor | None]] = {}
        with self.watch.measure("update"):
            for micro in micro_batches(list(range(buffer.size)), buffer, self.optim.micro_batch_size, self.share):
                out[tuple(micro)] = self._forward(
                    buffer.policy_batch(micro, m.tokenizer.pad_token_id, self.share), held=True
                )
                release_free_memory()  # the pass's freed temporaries, between the held layer inputs
        return out

    def old_log_probs(self, buffer: StepBuffer) -> dict[int, torch.Tensor]:
        """Log-probs of the rollout policy, before any optimizer step of this buffer."""
        m = self.models
        out: dict[int, torch.Tensor] = {}
        with self.watch.measure("logprob"), torch.no_grad():
            for micro in micro_batches(list(range(buffer.size)), buffer, self.optim.micro_batch_size, self.share):
                batch = buffer.policy_batch(micro, m.tokenizer.pad_token_id, self.share)
                logp, _ = lp.response_log_probs(m.model, batch, m.device, m.autocast)
                for j, i in enumerate(micro):
                    out[i] = logp[j].cpu()
        return out

    def reference_log_probs(self, buffer: StepBuffer, chunks: list[list[int]]) -> dict[tuple[int, ...], torch.Tensor]:
        """The KL reference's log-probs for each micro-batch the update will run (keyed by its
        rows; the same batches, so the same padding and values as a pass inside the loop)."""
        m = self.models
        out: dict[tuple[int, ...], torch.Tensor] = {}
        with self.watch.measure("logprob"), torch.no_grad(), m.reference() as ref_model:
            for rows in chunks:
                for micro in micro_batches(rows, buffer, self.optim.micro_batch_size, self.share):
                    batch = buffer.policy_batch(micro, m.tokenizer.pad_token_id, self.share)
                    out[tuple(micro)], _ = lp.response_log_probs(ref_model, batch, m.device, m.autocast)
        return out


HELD_FORWARD_BYTES = 1 << 30
"""Most memory the held forward passes of one update may take (``Updater._held_forwards``):
SmolLM2-135M keeps ~74 KB per token under gradient checkpointing (a 576-wide fp32 input to
each of its 30 layers and the head), so DualSQL's laptop step of 8 rows of ~900 tokens holds ~0.5 GB."""


def held_forward_bytes(model: Any, buffer: StepBuffer) -> float:
    """Estimated bytes of the buffer's forward graphs held at once: each layer's input per
    token under gradient checkpointing; without it, every activation (infinite: not held)."""
    if not getattr(model, "is_gradient_checkpointing", False):
        return math.inf
    config = getattr(model, "config", None)
    hidden, layers = getattr(config, "hidden_size", None), getattr(config, "num_hidden_layers", None)
    if hidden is None or layers is None:  # a model of another shape: not estimated, not held
        return math.inf
    per_token = 4 * int(hidden) * (int(layers) + 2)  # fp32 layer inputs, the final norm's and the head's
    return float(per_token * sum(buffer.length(i) for i in range(buffer.size)))


def mismatch_metrics(train_lp: torch.Tensor, rollout_lp: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """Rollout/training mismatch on ``mask``'s tokens (all [rows, resp_len]): veRL's
    ``compute_offpolicy_metrics`` (kl = mean(rollout - training log-prob), k3_kl, the two
    perplexities), prefixed ``rollout_corr/`` as veRL logs them. 0 when generation and
    training share weights and precision."""
    from verl.trainer.ppo.rollout_corr_helper import compute_offpolicy_metrics

    mask = mask.to(train_lp.device)
    if float(mask.sum()) == 0:
        return {}
    out = compute_offpolicy_metrics(
        old_log_prob=train_lp.detach(), rollout_log_prob=rollout_lp.to(train_lp.device), response_mask=mask
    )
    return {f"rollout_corr/{k}": float(v) for k, v in out.items()}


def apply_rollout_correction(
    buffer: StepBuffer, old: dict[int, torch.Tensor], corr: Any
) -> tuple[dict[int, torch.Tensor] | None, dict[str, float]]:
    """veRL's IS weights and rejection mask for the whole buffer, from the training model's
    log-probs ``old`` and the generating model's (``trajectory.logprobs``).

    The rejection mask is applied to every track's mask in the buffer (so the loss
    normalisers count only accepted tokens, as veRL's modified ``response_mask`` does);
    returns per-row IS weights (None when IS is off) and veRL's ``rollout_corr/*`` metrics.
    """
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_rejection_mask

    rows = list(range(buffer.size))
    mask = buffer.mask_tensors(rows)["full"]  # [n, W]
    if float(mask.sum()) == 0:
        return None, {}
    width = mask.shape[1]
    old_t = torch.stack([_pad_to(old[i], width) for i in rows])  # [n, W]
    roll_t = torch.stack(
        [_pad_to(torch.tensor(buffer.trajectories[i].logprobs, dtype=torch.float32), width) for i in rows]
    )  # [n, W]
    weights, kept, metrics = compute_rollout_correction_and_rejection_mask(
        old_t,
        roll_t,
        mask,
        rollout_is=corr.rollout_is,
        rollout_is_threshold=corr.rollout_is_threshold,
        rollout_is_batch_normalize=corr.rollout_is_batch_normalize,
        rollout_rs=corr.rollout_rs,
        rollout_rs_threshold=corr.rollout_rs_threshold,
    )
    kept = kept.float()  # [n, W]
    for _track, per_row in buffer.masks.items():
        for i in rows:
            n = len(per_row[i])
            per_row[i] = [a * b for a, b in zip(per_row[i], kept[i, :n].tolist(), strict=True)]
    metrics["rollout_corr/rejected_tokens"] = float((mask - kept * mask).sum())
    if weights is None:
        return None, metrics
    w = weights.batch["rollout_is_weights"]  # [n, W]
    return {i: w[i, : len(buffer.trajectories[i].response_ids)].clone() for i in rows}, metrics


def _split(rows: list[int], parts: int) -> list[list[int]]:
    parts = max(1, min(parts, len(rows)))
    size = math.ceil(len(rows) / parts)
    return [rows[i : i + size] for i in range(0, len(rows), size)]


def micro_batches(rows: list[int], buffer: StepBuffer, size: int, share: float | None = None) -> list[list[int]]:
    """Rows packed behind a shared prompt prefix where that is cheaper (``share``:
    training/engines/local/logprobs/shared_prefix.py), the others grouped by total length (less
    padding), ``size`` per micro-batch."""
    return plan_micro_batches(rows, lambda i: buffer.trajectories[i].prompt_ids, buffer.length, size, share)


def _pad_to(t: torch.Tensor, width: int) -> torch.Tensor:
    if t.shape[0] >= width:
        return t[:width]
    return torch.cat([t, t.new_zeros(width - t.shape[0])])
