"""The SFT warm start: teach the policy its design's turn protocol before GRPO.

Supervised fine-tuning on demonstrations (``training/supervised/demonstrations.py``): token-mean
negative log-likelihood over the policy tokens of each demonstration (response mask 1;
observation and template tokens carry no loss, exactly as in the RL update), AdamW with
linear warmup, gradient clipping, micro-batches grouped by length.

Why it exists: GRPO learns only from reward differences within a group. A small model
that never writes the protocol gets reward 0 on every sample, so every group has zero
variance and no gradient. ReToolSQL and Think2SQL both fine-tune before RL; on the CPU
laptop profile this warm start is on by default (``stage.warm_start.enable``), on GPU
recipes it is off (they start from ``model.path`` or ``stage.init_from``).

The demonstrations come from the *training* split only; they never see the held-out split.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from training.engines.local import loss as lp
from training.engines.local.logprobs.shared_prefix import model_share, plan_micro_batches, worth_packing
from training.engines.local.optimizer_spill import MomentSpill
from training.runs.usage import release_free_memory

Say = Callable[[str], None]


@dataclass(frozen=True)
class WarmStartSettings:
    epochs: int = 2
    lr: float = 1e-4
    batch_size: int = 8  # demonstrations per optimizer step
    micro_batch_size: int = 2
    warmup_ratio: float = 0.1
    grad_clip: float = 1.0
    weight_decay: float = 0.0


def nll_sum(
    model: Any, trajectories: Sequence[Any], pad_id: int, device: str, autocast: Any, share: float | None = None
) -> tuple[torch.Tensor, float]:
    """Summed NLL over the policy tokens of ``trajectories`` and how many tokens that is
    (``share``: ``shared_prefix.model_share`` of the model, to pack rows behind a shared prefix)."""
    masks = [[float(m) for m in t.response_mask] for t in trajectories]
    prompts = [t.prompt_ids for t in trajectories]
    batch = lp.build_policy_batch(
        prompts,
        [t.response_ids for t in trajectories],
        {"full": masks},
        {"full": [0.0] * len(trajectories)},
        pad_id,
        pack=worth_packing(prompts, [_length(t) for t in trajectories], share),
    )
    logp, _ = lp.response_log_probs(model, batch, device, autocast, recompute_head=False)  # backward follows
    mask = batch.masks["full"].to(logp.device)  # [batch, resp_len]
    return -(logp * mask).sum(), float(mask.sum())


def _length(trajectory: Any) -> int:
    return len(trajectory.prompt_ids) + len(trajectory.response_ids)


def _batches(n: int, size: int, epochs: int, seed: int) -> list[list[int]]:
    """Seeded shuffles per epoch, cut into optimizer batches (the last one may be short)."""
    out: list[list[int]] = []
    for epoch in range(epochs):
        order = torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch)).tolist()
        out += [order[i : i + size] for i in range(0, n, size)]
    return out


def supervised_fine_tune(
    model: Any,
    trajectories: Sequence[Any],
    settings: WarmStartSettings,
    pad_id: int,
    device: str = "cpu",
    autocast: Any = None,
    seed: int = 0,
    progress: bool = False,
    on_step: Callable[[int, dict[str, float]], None] | None = None,
    spill_dir: str | Path | None = None,
    share_prefix: bool = True,
) -> dict[str, float]:
    """Fine-tune ``model`` in place; returns first/last-step NLL, steps, tokens and duration_s (seconds).
    ``spill_dir``: AdamW's moments wait there during each step's forward and backward passes
    (training/engines/local/optimizer_spill.py). ``share_prefix``: a step's demonstrations that
    share a prompt prefix train in one packed pass where that is cheaper (``optim.share_prefix``)."""
    if not trajectories:
        raise ValueError("no demonstrations to fine-tune on")
    batches = _batches(len(trajectories), settings.batch_size, settings.epochs, seed)
    trainable = [p for p in model.parameters() if p.requires_grad]  # under LoRA: the adapter
    optimizer = torch.optim.AdamW(trainable, lr=settings.lr, weight_decay=settings.weight_decay)
    spill = MomentSpill(optimizer, spill_dir)
    warm = math.ceil(len(batches) * settings.warmup_ratio)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / (warm + 1)) if warm else 1.0)
    share = model_share(model) if share_prefix else None
    model.train()
    start, losses, tokens_seen = time.perf_counter(), [], 0.0
    bar = _bar(len(batches)) if progress else None
    for step, rows in enumerate(batches):
        items = [trajectories[i] for i in rows]
        total = float(sum(sum(t.response_mask) for t in items)) or 1.0
        optimizer.zero_grad(set_to_none=True)
        step_loss = 0.0
        prompts, lengths = [t.prompt_ids for t in items], [_length(t) for t in items]
        micros = plan_micro_batches(
            range(len(items)), prompts.__getitem__, lengths.__getitem__, settings.micro_batch_size, share
        )
        with spill.away():  # a long demonstration's activations peak here, not beside the moments
            for micro in micros:
                loss_sum, _ = nll_sum(model, [items[k] for k in micro], pad_id, device, autocast, share)
                (loss_sum / total).backward()
                release_free_memory()
                step_loss += float(loss_sum.detach()) / total
        norm = torch.nn.utils.clip_grad_norm_(trainable, settings.grad_clip)
        optimizer.step()
        scheduler.step()
        losses.append(step_loss)
        tokens_seen += total
        if on_step is not None:
            on_step(
                step,
                {
                    "warm_start/nll": step_loss,
                    "warm_start/grad_norm": float(norm),
                    "warm_start/lr": float(scheduler.get_last_lr()[0]),
                },
            )
        if bar is not None:
            bar.set_postfix(nll=f"{step_loss:.3f}")
            bar.update(1)
    if bar is not None:
        bar.close()
    optimizer.zero_grad(set_to_none=True)
    return {
        "nll_first": losses[0],
        "nll_last": losses[-1],
        "steps": float(len(batches)),
        "policy_tokens": tokens_seen,
        "duration_s": time.perf_counter() - start,
    }


def _bar(total: int) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="warm start (SFT)", unit="step", dynamic_ncols=True)
