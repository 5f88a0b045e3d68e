"""Advantages from each veRL row's own reward tracks: per-role GRPO groups, TRUST-SQL's two tracks.

veRL's v1 ``_compute_advantage`` fetches only uid, masks, ``rm_scores`` and log-probs, and
its multi-output GRPO uses only the last output of each session and broadcasts it, so
DualSQL's linker rows would inherit the generator's advantage. The trainer replaces that
step with :func:`phase_aware_advantages`: it reads each row's own reward breakdown and
episode record (written by the agent loop into ``extra_fields``), groups rows by (prompt
uid, role) or by prompt, and computes advantages with the project's estimators
(``training.algorithm.assembly.sequence_advantages``), so the local and verl engines share
one reward -> advantage assembly.

Two-track (TRUST-SQL): loss = lambda * PG_schema + PG_full. veRL's loss is one clipped
surrogate, token-mean over ``response_mask``; the two tracks are folded into one
per-token advantage ``A_full * mask + lambda * (N_mask / N_schema) * A_schema *
schema_mask``, where the ratio of the batch's token counts makes the schema term a mean
over the schema mask's own tokens, as the paper normalises it. (This equals the sum of
the two surrogates exactly where the ratio is not clipped.)

Also here: the project-format step and evaluation records (``metrics.jsonl``) and the
sampled-trajectory records (``samples.jsonl``, :func:`sample_rows`, with the masks and
advantages of the update that :func:`phase_aware_advantages` leaves in ``meta_info``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from verl.protocol import DataProto

from training.algorithm.reward_trust import trust_metrics
from training.engines.verl.shared import EPISODE_KEY, REWARD_KEY, TRAINER_MODE, AdvantageSettings

__all__ = ["AdvantageSettings", "eval_record", "phase_aware_advantages", "sample_rows", "step_record"]


def _padded(rows: Sequence[Sequence[int]], width: int) -> torch.Tensor:
    """Right-pad 0/1 lists to ``[n, width]`` (longer rows are cut)."""
    out = torch.zeros(len(rows), width, dtype=torch.float32)  # [n, width]
    for i, row in enumerate(rows):
        values = list(row)[:width]
        if values:
            out[i, : len(values)] = torch.tensor(values, dtype=torch.float32)
    return out


def phase_aware_advantages(
    data: DataProto, settings: AdvantageSettings, excluded: Sequence[bool] | None = None
) -> tuple[DataProto, dict[str, float]]:
    """Per-row advantages from each row's own reward tracks; writes ``advantages`` and ``returns``.

    ``data.batch["response_mask"]`` is ``[n, resp_len]``; ``data.non_tensor_batch`` holds
    ``uid`` (the prompt id shared by its ``rollout.n`` sessions) and ``extra_fields`` (a
    dict per row, as the agent loop wrote it). ``excluded`` rows (veRL's synthetic padding
    rows, slots zero-masked by dynamic sampling) and rows whose episode was dropped for
    its prompt length get zero advantage and stay out of the group statistics.
    """
    from training.algorithm.advantages import group_keys
    from training.algorithm.assembly import sequence_advantages

    mask = data.batch["response_mask"].float()  # [n, resp_len]
    n, width = mask.shape
    extra = data.non_tensor_batch["extra_fields"]
    skip = list(excluded) if excluded is not None else [False] * n
    dropped = [i for i in range(n) if not skip[i] and extra_field(extra[i], EPISODE_KEY, i).get("dropped")]
    real = [i for i in range(n) if not skip[i] and i not in dropped]
    advantages = torch.zeros(n, width, dtype=torch.float32)  # [n, resp_len]
    metrics: dict[str, float] = {"sqlagent/dropped_rows": float(len(dropped))}
    if real:
        records = [extra_field(extra[i], EPISODE_KEY, i) for i in real]
        rewards = [extra_field(extra[i], REWARD_KEY, i) for i in real]
        uids = [str(data.non_tensor_batch["uid"][i]) for i in real]
        groups = group_keys(uids, [r["role"] for r in records], settings.group_by)
        seq_adv = sequence_advantages(rewards, groups, settings)
        schema_masks = [r["schema_mask"] for r in records]
        advantages[real], metrics = _token_level(seq_adv, mask[real], schema_masks, settings)
        data.meta_info[UPDATE_KEY] = update_rows(real, seq_adv, mask[real], schema_masks, settings)
        metrics.update(_reward_metrics(records, rewards, seq_adv))
        metrics["sqlagent/dropped_rows"] = float(len(dropped))
    data.batch["advantages"] = advantages
    data.batch["returns"] = advantages.clone()
    return data, metrics


UPDATE_KEY = "sqlagent_update"
"""``DataProto.meta_info`` key of :func:`update_rows` (read back for samples.jsonl)."""


def update_rows(
    real: Sequence[int],
    seq_adv: Mapping[str, torch.Tensor],
    mask: torch.Tensor,
    schema_masks: Sequence[Sequence[int]],
    settings: AdvantageSettings,
) -> dict[int, tuple[dict[str, list[float]], dict[str, float]]]:
    """Row -> (per-track token masks, per-track sequence advantages) of the rows in the
    update, as :func:`_token_level` uses them: ``full`` is the loss mask, the schema track
    (when the estimator made one) the phase-prefix mask times it."""
    tracks = {"full": mask}  # [n_real, resp_len]
    if settings.schema_track in seq_adv:
        tracks[settings.schema_track] = _padded(schema_masks, mask.shape[1]) * mask  # [n_real, resp_len]
    return {
        row: ({k: v[j].tolist() for k, v in tracks.items()}, {k: float(v[j]) for k, v in seq_adv.items()})
        for j, row in enumerate(real)
    }


def _token_level(
    seq_adv: Mapping[str, torch.Tensor],  # track -> [n]
    mask: torch.Tensor,  # [n, resp_len] loss mask
    schema_masks: Sequence[Sequence[int]],
    settings: AdvantageSettings,
) -> tuple[torch.Tensor, dict[str, float]]:
    """``A_full * mask (+ lambda * N_mask / N_schema * A_schema * schema_mask)``."""
    from training.algorithm.advantages import token_advantages

    adv = token_advantages(seq_adv["full"], mask)  # [n, resp_len]
    metrics: dict[str, float] = {}
    if settings.schema_track in seq_adv:
        schema_mask = _padded(schema_masks, mask.shape[1]) * mask  # [n, resp_len]
        n_mask, n_schema = float(mask.sum()), float(schema_mask.sum())
        weight = settings.schema_weight * n_mask / max(n_schema, 1.0)
        adv = adv + weight * token_advantages(seq_adv[settings.schema_track], schema_mask)  # [n, resp_len]
        metrics["sqlagent/schema_track/token_fraction"] = n_schema / max(n_mask, 1.0)
        metrics["sqlagent/schema_track/empty_masks"] = float((schema_mask.sum(-1) == 0).sum())
    return adv, metrics


def nested_like(padded: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``padded`` ``[n, resp_len]`` in the layout TransferQueue gave ``mask`` in: jagged rows
    (the usual case) or one dense tensor (when every row had the same length)."""
    from verl.workers.utils.padding import response_to_nested

    if mask.is_nested:
        return response_to_nested(padded, mask)
    return padded[:, : mask.shape[-1]]  # [n, resp_len]


def extra_field(extra: Any, key: str, row: int) -> dict[str, Any]:
    """One row's record under ``key`` in the agent loop's ``extra_fields``; a clear error when absent."""
    extra = getattr(extra, "data", extra)
    if not isinstance(extra, Mapping) or key not in extra:
        raise ValueError(
            f"row {row} has no extra_fields[{key!r}]: the {TRAINER_MODE!r} trainer needs rows made by the "
            "project's 'sqlagent' agent loop (set actor_rollout_ref.rollout.agent.default_agent_loop=sqlagent)"
        )
    return dict(extra[key])


def _reward_metrics(
    records: Sequence[Mapping[str, Any]], rewards: Sequence[Mapping[str, Any]], seq_adv: Mapping[str, torch.Tensor]
) -> dict[str, float]:
    """Per-role reward, component and advantage means, plus reward errors (logged, counted)."""
    metrics: dict[str, float] = {}
    roles = sorted({r["role"] for r in records})
    for role in roles:
        idx = [i for i, r in enumerate(records) if r["role"] == role]
        prefix = f"sqlagent/{role}"
        metrics[f"{prefix}/reward/mean"] = float(np.mean([rewards[i]["total"] for i in idx]))
        for name in sorted({k for i in idx for k in rewards[i]["components"]}):
            metrics[f"{prefix}/component/{name}"] = float(
                np.mean([rewards[i]["components"].get(name, 0.0) for i in idx])
            )
        metrics[f"{prefix}/turns/mean"] = float(np.mean([records[i]["num_turns"] for i in idx]))
        for track, adv in seq_adv.items():
            metrics[f"{prefix}/advantage/{track}/abs_mean"] = float(adv[idx].abs().mean())
    metrics["sqlagent/reward_errors"] = float(sum(1 for r in rewards if r.get("error")))
    return metrics


def step_record(records: Sequence[Mapping[str, Any]], rewards: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """The headline numbers of one step in the project's ``metrics.jsonl`` terms (the keys
    the local engine writes and ``eval.compare`` plots): mean total reward, per-component
    means, EX on the batch (final answers only: DualSQL's linker rows have no SQL), the
    suspect-positive and unscored rates (``training.algorithm.reward_trust``)."""
    if not rewards:
        return {}
    out = {"reward/total": float(np.mean([r["total"] for r in rewards]))}
    for name in sorted({c for r in rewards for c in r["components"]}):
        out[f"reward/{name}"] = float(np.mean([r["components"].get(name, 0.0) for r in rewards]))
    out["reward/errors"] = float(sum(1 for r in rewards if r.get("error")))
    roles = {rec["role"] for rec in records}
    finals = [r for rec, r in zip(records, rewards, strict=True) if rec.get("final_sql") is not None or len(roles) == 1]
    out["ex/batch"] = (
        float(np.mean([r["components"].get("exec", 0.0) >= 1.0 - 1e-9 for r in finals])) if finals else 0.0
    )
    out.update(
        trust_metrics(
            [r["components"].get("exec", 0.0) for r in finals],
            [r.get("flags") or () for r in finals],
            [r.get("error") for r in rewards],
        )
    )
    out["episode/turns"] = float(np.mean([rec["num_turns"] for rec in records]))
    return out


def eval_record(val_metrics: Mapping[str, Any], exec_metric: str) -> dict[str, float]:
    """veRL's validation metrics as a project ``eval_*`` record: ``ex`` is the mean of the
    ``exec`` column (greedy, final outputs) when the run's execution metric is EX; other
    metrics are written under ``exec/<metric>`` so no number is mislabelled as EX."""
    names = {"exec": "ex" if exec_metric == "ex" else f"exec/{exec_metric}", "reward": "reward/total"}
    out: dict[str, float] = {}
    for key, value in val_metrics.items():
        parts = key.split("/")  # val-core|val-aux / data source / variable / mean@N
        if len(parts) == 4 and parts[2] in names and parts[3].startswith("mean@"):
            out[names[parts[2]]] = float(value)
    return out


def _decoded(tokenizer: Any, ids: Sequence[int]) -> list[str]:
    """One string per token (``batch_decode([])`` would give one empty string)."""
    return tokenizer.batch_decode([[x] for x in ids]) if len(ids) else []


def row_key(key: str) -> tuple[str, int, int]:
    """(prompt uid, session, output index) of a veRL row key ``{uid}_{session}_{index}``.

    >>> row_key("9f2c-41_1_0")
    ('9f2c-41', 1, 0)
    """
    uid, session, index = str(key).rsplit("_", 2)
    return uid, int(session), int(index)


def sample_rows(
    *,
    step: int,
    design: str,
    extra: Sequence[Any],
    keys: Sequence[str],
    prompts: Sequence[Sequence[int]],
    responses: Sequence[Sequence[int]],
    update: Mapping[int, tuple[dict[str, list[float]], dict[str, float]]],
    examples: Mapping[str, Any],
    tokenizer: Any,
    count: int,
    tables: Any = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """samples.jsonl records (``training.runs.samples.sample_record``, as the local engine writes
    them) of the step's first ``count`` rows, whole groups in order (veRL's row keys
    ``{uid}_{session}_{index}``: prompt uid, then session, then output), and their prompts.
    A record's ``sample`` is the session (the rollout's number in its GRPO group).
    ``update[row]`` holds the masks and advantages the update used (absent: not in the
    update); ``tables(example, final_sql)`` the result tables and outcome. The prompt is
    veRL's (chat template applied), recorded as one message.

    The episode record carries each turn's phase and format flag, not its tool call: a
    turn's ``tool`` / ``arguments`` / ``tool_outcome`` are None here (the call and its
    observation are in the tokens).
    """
    from training.runs.samples import prompt_id, sample_record

    order = sorted(range(len(extra)), key=lambda i: (*row_key(keys[i]), i))
    records: list[dict[str, Any]] = []
    prompt_texts: dict[str, Any] = {}
    for i in order[:count]:
        ep, reward = extra_field(extra[i], EPISODE_KEY, i), extra_field(extra[i], REWARD_KEY, i)
        n = min(len(responses[i]), len(ep["policy_mask"]), len(ep["turn_index"]))  # dropped rows: n = 0
        key = prompt_id(prompts[i])
        prompt_texts.setdefault(key, [{"role": "prompt", "content": tokenizer.decode(list(prompts[i]))}])
        masks, adv = update.get(i, (None, None))
        example = examples[ep["example_id"]]
        found = dict(tables(example, ep["final_sql"]) if tables is not None else {})
        versions = ep.get("turn_versions") or []
        turns = [
            {"index": t, "phase": phase, "format_ok": ok, **({"versions": versions[t]} if t < len(versions) else {})}
            for t, (phase, ok) in enumerate(zip(ep["phases"], ep["format_ok"], strict=True))
        ]
        records.append(
            sample_record(
                step=step,
                engine="verl",
                design=design,
                example=example,
                role=ep["role"],
                group=ep["group"],
                sample=row_key(keys[i])[1],
                prompt=key,
                tokens=_decoded(tokenizer, responses[i][:n]),
                turn_index=ep["turn_index"][:n],
                response_mask=ep["policy_mask"][:n],
                loss_masks={k: v[:n] for k, v in masks.items()} if masks is not None else None,
                advantages=adv,
                reward=reward["total"],
                components=reward.get("components") or {},
                tracks=reward.get("tracks") or {},
                reward_error=reward.get("error"),
                trust_flags=reward.get("flags") or (),
                outcome=found.pop("outcome", None),
                final_sql=ep["final_sql"],
                end_reason=ep["end_reason"],
                turns=turns,
                tables=found,
            )
        )
    return records, prompt_texts
