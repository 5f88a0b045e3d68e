"""Loss masks as pure tensor functions (shapes in the comments), plus batching.

A trainer multiplies the masks it needs (``combine_masks``):
- ``observation_mask``: policy tokens only (observations and template tokens get no loss
  and no ratio) — the trajectory's ``response_mask``;
- ``phase_prefix_mask``: TRUST-SQL's schema track, tokens up to the end of the last valid
  propose turn (fallback: the last valid explore turn; neither: empty) — designs/trustsql/README.md;
- ``error_turn_mask``: DualSQL's guardrail, when a trajectory ends in a format-error
  turn only that turn keeps its loss — designs/dualsql/README.md;
- ``padding_mask``: real (not padded, not truncated) response positions.
Per-trajectory turn numbers come from ``Trajectory.turn_index`` and ``result.turns``.
``track_masks`` builds every advantage track's mask for a list of trajectories (both
engines' loss masks come from it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from agents.types import Trajectory, span_flag

PAD_TURN = -1  # turn index of padding positions


def observation_mask(response_mask: torch.Tensor) -> torch.Tensor:
    """1.0 on policy tokens, 0.0 on observation / template tokens."""
    return (response_mask > 0).float()  # [batch, resp_len]


def padding_mask(lengths: torch.Tensor, length: int) -> torch.Tensor:
    """1.0 on the first ``lengths[b]`` positions of each row (right padding)."""
    positions = torch.arange(length, device=lengths.device)  # [resp_len]
    return (positions[None, :] < lengths[:, None]).float()  # [batch, resp_len]


def phase_prefix_mask(turn_index: torch.Tensor, span_end_turn: torch.Tensor) -> torch.Tensor:
    """1.0 on tokens of turns ``<= span_end_turn[b]``; an all-zero row when it is -1."""
    end = span_end_turn[:, None]  # [batch, 1]
    inside = (turn_index >= 0) & (turn_index <= end)  # [batch, resp_len]
    return (inside & (end >= 0)).float()  # [batch, resp_len]


def error_turn_mask(turn_index: torch.Tensor, error_turn: torch.Tensor) -> torch.Tensor:
    """Rows whose trajectory ended in a format-error turn keep only that turn (and any
    later tokens); rows with ``error_turn == -1`` are all ones."""
    err = error_turn[:, None]  # [batch, 1]
    keep = (turn_index >= err) | (err < 0)  # [batch, resp_len]
    return keep.float()  # [batch, resp_len]


def combine_masks(*masks: torch.Tensor) -> torch.Tensor:
    """The elementwise product of masks of one shape."""
    if not masks:
        raise ValueError("combine_masks needs at least one mask")
    out = masks[0].float()  # [batch, resp_len]
    for mask in masks[1:]:
        if mask.shape != out.shape:
            raise ValueError(f"mask shapes differ: {tuple(out.shape)} vs {tuple(mask.shape)}")
        out = out * mask.float()  # [batch, resp_len]
    return out


# ------------------------------------------------------ per-trajectory turn numbers


def span_end_turns(trajectories: Sequence[Trajectory], track: str) -> torch.Tensor:
    """For each trajectory, the turn ending track ``track``'s span, as its episode recorded it
    (``flags["<track>_span_turn"]``, ``agents.types.span_flag``); -1: none."""
    key = span_flag(track)
    return torch.tensor([int(t.result.flags.get(key, -1)) for t in trajectories], dtype=torch.long)  # [batch]


def final_error_turn(trajectory: Trajectory) -> int:
    """The index of the format-error turn the trajectory ends in, else -1.

    "Ends in" means it is the last turn record and no tokens of a later turn follow it.
    """
    turns = trajectory.result.turns
    if not turns or turns[-1].format_ok:
        return -1
    last = turns[-1].index
    if max(trajectory.turn_index, default=-1) > last:
        return -1
    return last


def final_error_turns(trajectories: Sequence[Trajectory]) -> torch.Tensor:
    return torch.tensor([final_error_turn(t) for t in trajectories], dtype=torch.long)  # [batch]


# --------------------------------------------------------------------- batching


@dataclass
class PaddedBatch:
    """Trajectories as tensors: prompts left-padded, responses right-padded."""

    prompt_ids: torch.Tensor  # [batch, prompt_len]
    prompt_attention: torch.Tensor  # [batch, prompt_len]
    response_ids: torch.Tensor  # [batch, resp_len]
    response_mask: torch.Tensor  # [batch, resp_len] 1 = policy token
    padding: torch.Tensor  # [batch, resp_len] 1 = real token
    turn_index: torch.Tensor  # [batch, resp_len] PAD_TURN on padding
    logprobs: torch.Tensor  # [batch, resp_len] 0.0 where unknown
    truncated: torch.Tensor  # [batch] bool, response cut at max_response_len

    @property
    def input_ids(self) -> torch.Tensor:
        return torch.cat([self.prompt_ids, self.response_ids], dim=1)  # [batch, prompt_len + resp_len]

    @property
    def attention_mask(self) -> torch.Tensor:
        return torch.cat([self.prompt_attention, self.padding.long()], dim=1)  # [batch, prompt_len + resp_len]


def pad_trajectories(
    trajectories: Sequence[Trajectory], pad_token_id: int, max_response_len: int | None = None
) -> PaddedBatch:
    """Pad a list of trajectories into ``[batch, len]`` tensors (responses cut to
    ``max_response_len`` when given; cut rows are flagged in ``truncated``)."""
    if not trajectories:
        raise ValueError("pad_trajectories needs at least one trajectory")
    batch = len(trajectories)
    prompt_len = max(len(t.prompt_ids) for t in trajectories)
    lengths = [
        len(t.response_ids) if max_response_len is None else min(len(t.response_ids), max_response_len)
        for t in trajectories
    ]
    resp_len = max(max(lengths), 1)
    prompt_ids = torch.full((batch, prompt_len), pad_token_id, dtype=torch.long)  # [batch, prompt_len]
    prompt_attention = torch.zeros((batch, prompt_len), dtype=torch.long)  # [batch, prompt_len]
    response_ids = torch.full((batch, resp_len), pad_token_id, dtype=torch.long)  # [batch, resp_len]
    response_mask = torch.zeros((batch, resp_len), dtype=torch.long)  # [batch, resp_len]
    turn_index = torch.full((batch, resp_len), PAD_TURN, dtype=torch.long)  # [batch, resp_len]
    logprobs = torch.zeros((batch, resp_len), dtype=torch.float)  # [batch, resp_len]
    for row, (traj, n) in enumerate(zip(trajectories, lengths, strict=True)):
        p = len(traj.prompt_ids)
        prompt_ids[row, prompt_len - p :] = torch.tensor(traj.prompt_ids, dtype=torch.long)
        prompt_attention[row, prompt_len - p :] = 1
        if n:
            response_ids[row, :n] = torch.tensor(traj.response_ids[:n], dtype=torch.long)
            response_mask[row, :n] = torch.tensor(traj.response_mask[:n], dtype=torch.long)
            turn_index[row, :n] = torch.tensor(traj.turn_index[:n], dtype=torch.long)
            if traj.logprobs is not None:
                logprobs[row, :n] = torch.tensor(traj.logprobs[:n], dtype=torch.float)
    length_t = torch.tensor(lengths, dtype=torch.long)  # [batch]
    truncated = torch.tensor([len(t.response_ids) > n for t, n in zip(trajectories, lengths, strict=True)])  # [batch]
    return PaddedBatch(
        prompt_ids=prompt_ids,
        prompt_attention=prompt_attention,
        response_ids=response_ids,
        response_mask=response_mask,
        padding=padding_mask(length_t, resp_len),
        turn_index=turn_index,
        logprobs=logprobs,
        truncated=truncated,
    )


def track_masks(
    trajectories: Sequence[Trajectory], tracks: Sequence[str], schema_track: str, guardrails: bool
) -> tuple[dict[str, list[list[float]]], dict[str, float]]:
    """Per-track 0/1 token masks for each trajectory (unpadded lists) and mask stats."""
    padded = pad_trajectories(trajectories, pad_token_id=0)
    policy = combine_masks(observation_mask(padded.response_mask), padded.padding)  # [n, resp_len]
    error_turns = final_error_turns(trajectories)  # [n]
    if guardrails:
        policy = combine_masks(policy, error_turn_mask(padded.turn_index, error_turns))  # [n, resp_len]
    per_track = {"full": policy}
    flags = {
        "mask/policy_tokens": float(policy.sum()),
        "mask/error_turn_rows": float((error_turns >= 0).sum()) if guardrails else 0.0,
    }
    if schema_track in tracks:
        span = span_end_turns(trajectories, schema_track)  # [n]
        prefix = phase_prefix_mask(padded.turn_index, span)  # [n, resp_len]
        per_track[schema_track] = combine_masks(policy, prefix)  # [n, resp_len]
        flags["mask/schema_tokens"] = float(per_track[schema_track].sum())
        flags["mask/empty_schema_rows"] = float((span < 0).sum())
    lengths = [len(t.response_ids) for t in trajectories]
    return {k: [row[:n].tolist() for row, n in zip(v, lengths, strict=True)] for k, v in per_track.items()}, flags
