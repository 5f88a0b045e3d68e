"""The local engine's importance-sampling correction of the generation/training mismatch
(veRL's rollout correction), its mismatch metric, and over-long prompts leaving the group."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from agents.types import Example
from tests.helpers.local_trainer import config, tiny_inputs, trainer
from tests.helpers.tiny_model import tiny_model, tiny_tokenizer
from training.config import RolloutCorrectionConfig
from training.engines.local import loss as lp
from training.engines.local.buffer import build_buffer
from training.engines.local.trainer import LocalTrainer
from training.engines.local.update import apply_rollout_correction
from training.generation.hf import batched_generate


def test_generation_log_probs_are_the_models_raw_log_probs() -> None:
    """The recorder sees raw logits (before temperature / top-k): a sampled row's log-probs
    equal a teacher-forced forward pass of the same model."""
    torch.manual_seed(0)
    model, tok = tiny_model(seed=3), tiny_tokenizer()
    prompts = [tok.encode("SELECT name FROM"), tok.encode("SELECT COUNT(*) FROM schools WHERE")]
    rows = batched_generate(model, tok, prompts, max_new_tokens=12, temperature=0.7, top_k=5, logprobs=True)
    for prompt, row in zip(prompts, rows, strict=True):
        assert row.logprobs is not None and len(row.logprobs) == len(row.token_ids) > 0
        batch = lp.build_policy_batch(
            [prompt], [row.token_ids], {"full": [[1.0] * len(row.token_ids)]}, {"full": [0.0]}, tok.pad_token_id
        )
        with torch.no_grad():
            forced, _ = lp.response_log_probs(model, batch)  # [1, resp_len]
        assert torch.allclose(forced[0], torch.tensor(row.logprobs), atol=1e-4)


def _buffer_with_injected_mismatch(
    tmp_path: Path, examples: list[Example], shift: list[float]
) -> tuple[Any, Any, dict]:
    """A real trustsql buffer whose rollout log-probs are the training log-probs minus
    ``shift[i]`` per token of row i (so the token IS ratio of row i is exp(shift[i]))."""
    t = trainer("trustsql", tmp_path, examples, "algorithm.dynamic_sampling.enable=false")
    trajectories = t.rollout(examples[:2], 4, t.agent, t.sampling)
    rewards = [t._score(tr, examples[int(tr.example_id[1:])]) for tr in trajectories]
    buffer = build_buffer(trajectories, rewards, t.cfg, target_questions=2)
    old = t.updater.old_log_probs(buffer)
    for i, tr in enumerate(buffer.trajectories):
        n = len(tr.response_ids)
        injected = [float(old[i][j]) - shift[i] * tr.response_mask[j] for j in range(n)]
        buffer.trajectories[i] = dataclasses.replace(tr, logprobs=injected)
    return t, buffer, old


def test_token_level_is_weights_are_truncated_ratios(tmp_path: Path, examples: list[Example]) -> None:
    shift = [math.log(3.0), math.log(1.5), -math.log(2.0)] + [0.0] * 5  # ratios 3 (clamped to 2), 1.5, 0.5, 1
    t, buffer, old = _buffer_with_injected_mismatch(tmp_path, examples, shift)
    policy_before = [list(m) for m in buffer.masks["full"]]
    weights, metrics = apply_rollout_correction(buffer, old, RolloutCorrectionConfig(rollout_is="token"))
    assert weights is not None
    for i in range(len(buffer.trajectories)):
        on = torch.tensor(policy_before[i]) > 0
        expected = min(math.exp(shift[i]), 2.0)  # veRL's default threshold 2.0 (TIS)
        assert torch.allclose(weights[i][on], torch.full((int(on.sum()),), expected), atol=1e-4), i
    assert buffer.masks["full"] == policy_before  # IS only: nothing rejected
    # the mismatch metric: veRL's kl = mean(rollout - training) over policy tokens
    tokens = [sum(m) for m in policy_before]
    kl = -sum(s * n for s, n in zip(shift, tokens, strict=True)) / sum(tokens)
    assert metrics["rollout_corr/kl"] == pytest.approx(kl, abs=1e-4)
    assert metrics["rollout_corr/rejected_tokens"] == 0.0


def test_sequence_level_masked_is_rejects_and_weights_whole_rows(tmp_path: Path, examples: list[Example]) -> None:
    """DualSQL's preset: sequence IS (clamped at 2) + seq_sum_k1 rejection outside [0.5, 2]."""
    tiny = 0.02
    shift = [tiny, -tiny, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    t, buffer, old = _buffer_with_injected_mismatch(tmp_path, examples, shift)
    policy_before = [list(m) for m in buffer.masks["full"]]
    corr = RolloutCorrectionConfig(
        rollout_is="sequence", rollout_is_threshold=2.0, rollout_rs="seq_sum_k1", rollout_rs_threshold="0.5_2.0"
    )
    weights, metrics = apply_rollout_correction(buffer, old, corr)
    assert weights is not None
    for i in range(len(buffer.trajectories)):
        n_tokens = sum(policy_before[i])
        ratio = math.exp(shift[i] * n_tokens)  # the product of the row's token ratios
        on = torch.tensor(policy_before[i]) > 0
        if 0.5 <= ratio <= 2.0:
            assert buffer.masks["full"][i] == policy_before[i], i
            assert torch.allclose(weights[i][on], torch.full((int(on.sum()),), min(ratio, 2.0)), rtol=1e-3), i
        else:  # rejected: the row leaves every track's mask, so the loss normalisers skip it
            assert sum(buffer.masks["full"][i]) == 0 and sum(buffer.masks["schema"][i]) == 0, i
    assert metrics["rollout_corr/rejected_tokens"] > 0  # 0.02 x ~100 tokens is far outside [0.5, 2]


def test_is_weights_scale_the_policy_gradient(tmp_path: Path, examples: list[Example]) -> None:
    shift = [math.log(1.5)] * 8
    t, buffer, old = _buffer_with_injected_mismatch(tmp_path, examples, shift)
    weights, _ = apply_rollout_correction(buffer, old, RolloutCorrectionConfig(rollout_is="token"))
    rows = list(range(buffer.size))
    batch = buffer.policy_batch(rows, t.tokenizer.pad_token_id)
    totals = lp.track_totals(buffer.mask_tensors(rows))
    logp, _ = lp.response_log_probs(t.model, batch)
    width = logp.shape[1]
    isw = torch.stack([torch.cat([weights[i], weights[i].new_zeros(width - len(weights[i]))]) for i in rows])
    plain, _ = lp.grpo_loss(logp, logp.detach(), batch.masks, batch.advantages, totals, t.loss_settings)
    weighted, _ = lp.grpo_loss(
        logp, logp.detach(), batch.masks, batch.advantages, totals, t.loss_settings, rollout_is_weights=isw
    )
    assert plain.abs().item() > 0
    assert weighted.item() == pytest.approx(1.5 * plain.item(), rel=1e-3)


def _model_generate_trainer(tmp_path: Path, examples: list[Example], *extra: str) -> LocalTrainer:
    """A trainer that generates with the tiny model itself (log-probs recorded)."""
    cfg = config(
        "dualsql",
        tmp_path,
        "algorithm.dynamic_sampling.enable=false",
        "rollout.max_new_tokens=8",
        "rollout.max_response_tokens=64",
        *extra,
    )
    return LocalTrainer(cfg, tiny_inputs(examples, examples[:2]), say=lambda _: None)


@pytest.mark.slow
def test_mismatch_metric_is_zero_when_generation_and_training_share_weights(
    tmp_path: Path, examples: list[Example]
) -> None:
    t = _model_generate_trainer(tmp_path, examples, "model.generation_dtype=fp32", "model.autocast=off")
    assert t.gen_model is t.model
    metrics = t.train_step()
    assert metrics["rollout_corr/kl"] == pytest.approx(0.0, abs=1e-4)
    assert metrics["rollout_corr/k3_kl"] == pytest.approx(0.0, abs=1e-4)


@pytest.mark.slow
def test_dualsql_recipe_runs_sequence_masked_is_with_a_bf16_generation_copy(
    tmp_path: Path, examples: list[Example]
) -> None:
    t = _model_generate_trainer(tmp_path, examples, "model.generation_dtype=bf16", "model.autocast=off")
    assert t.cfg.algorithm.rollout_correction.rollout_is == "sequence"
    assert t.cfg.algorithm.rollout_correction.rollout_rs == "seq_sum_k1"
    assert t.gen_model is not t.model
    metrics = t.train_step()
    assert metrics["rollout_corr/kl"] != 0.0  # bf16 sampling vs fp32 training: a real mismatch
    assert "rollout_corr/rollout_is_mean" in metrics and "rollout_corr/rejected_tokens" in metrics


def test_an_update_whose_every_sequence_is_rejected_leaves_the_weights(tmp_path: Path, examples: list[Example]) -> None:
    """DualSQL's sequence rejection with a band no sequence falls in (the int8 copy's main
    job met this: every row rejected): the step ends and no weight moves."""
    t = _model_generate_trainer(
        tmp_path,
        examples,
        "model.generation_dtype=bf16",
        "model.autocast=off",
        "algorithm.rollout_correction.rollout_rs_threshold='1e-9_2e-9'",
    )
    before = {k: v.clone() for k, v in t.model.state_dict().items()}
    metrics = t.train_step()
    assert metrics["rollout_corr/rejected_tokens"] > 0 and metrics["sampling/trajectories_updated"] > 0
    assert all(torch.equal(v, before[k]) for k, v in t.model.state_dict().items())


def test_over_long_prompts_leave_the_group(tmp_path: Path, examples: list[Example]) -> None:
    t = trainer(
        "think2sql", tmp_path, examples, "algorithm.dynamic_sampling.enable=false", "rollout.max_prompt_tokens=50"
    )
    metrics = t.train_step()
    assert metrics["sampling/prompts_too_long"] == 2.0  # both questions' prompts exceed 50 tokens
    assert metrics["sampling/trajectories_updated"] == 0 and metrics.get("update/skipped") == 1.0


@pytest.mark.parametrize("mode,returned", [("varying", 2), ("none", 0)])
def test_dynamic_sampling_hands_unkept_candidates_back_to_the_pool(
    tmp_path: Path, examples: list[Example], mode: str, returned: int
) -> None:
    """B=2 groups kept out of B*K=4 candidates that all vary: the other two go back to the
    "backup pool" (``return_unkept=varying``) and are drawn first at the next step."""
    alternate = lambda ex, k: k % 2 == 0  # noqa: E731 - every group mixes right and wrong answers
    t = trainer(
        "think2sql",
        tmp_path,
        examples,
        "algorithm.dynamic_sampling.enable=true",
        "algorithm.dynamic_sampling.metric=total",
        f"algorithm.dynamic_sampling.return_unkept={mode}",
        always_good=alternate,
    )
    metrics = t.train_step()
    assert metrics["sampling/groups_kept"] == 2
    kept = {tr.example_id for tr in t.last_buffer.trajectories}
    assert len(t.sampler.returned) == returned
    back = {examples[i].id for i in t.sampler.returned}
    assert not back & kept
    state = t.sampler.state_dict()
    assert state["returned"] == t.sampler.returned  # part of the checkpoint
    if returned:
        assert [examples[i].id for i in t.sampler.take(2)] == [examples[i].id for i in state["returned"]]


@pytest.mark.slow
def test_the_update_s_held_forwards_give_the_separate_passes_weights(
    tmp_path: Path, examples: list[Example], monkeypatch: pytest.MonkeyPatch
) -> None:
    """DualSQL's sequence correction with one mini-batch and gradient checkpointing: the old
    log-probs come from the update's own forward passes (held until the rejection mask is
    known), not from a pass of their own, and the step moves the weights exactly as the
    separate pass does (the same buffer, the same starting weights)."""
    from training.engines.local import update as U

    def run(hold_bytes: float) -> tuple[dict[str, torch.Tensor], dict[str, float], int]:
        monkeypatch.setattr(U, "HELD_FORWARD_BYTES", hold_bytes)
        t = _model_generate_trainer(
            tmp_path / str(hold_bytes),
            examples,
            "model.generation_dtype=bf16",
            "model.autocast=off",
            "model.gradient_checkpointing=true",
        )
        passes = []
        real = t.updater.old_log_probs
        monkeypatch.setattr(t.updater, "old_log_probs", lambda buffer: passes.append(1) or real(buffer))
        metrics = t.train_step()
        return {k: v.clone() for k, v in t.model.state_dict().items()}, metrics, len(passes)

    held_weights, held_metrics, held_passes = run(U.HELD_FORWARD_BYTES)
    separate_weights, separate_metrics, separate_passes = run(0.0)  # nothing may be held: the separate pass
    assert (held_passes, separate_passes) == (0, 1)
    assert held_metrics["time/logprob"] == 0.0 < separate_metrics["time/logprob"]
    assert held_metrics["rollout_corr/rollout_is_mean"] == separate_metrics["rollout_corr/rollout_is_mean"]
    assert held_metrics["rollout_corr/kl"] != 0.0  # bf16 generation: real IS weights and rejection tests
    initial = tiny_model().state_dict()
    assert any(not torch.equal(held_weights[k], initial[k]) for k in initial)  # the step trained
    for key, value in held_weights.items():
        assert torch.allclose(value, separate_weights[key], atol=1e-7, rtol=0), key


def test_a_model_without_gradient_checkpointing_holds_no_forwards(tmp_path: Path, examples: list[Example]) -> None:
    from training.engines.local.update import held_forward_bytes

    t = trainer("dualsql", tmp_path, examples, "algorithm.dynamic_sampling.enable=false")
    trajectories = t.rollout(examples[:1], 2, t.agent, t.sampling)
    rewards = [t._score(tr, examples[0]) for tr in trajectories]
    buffer = build_buffer(trajectories, rewards, t.cfg, target_questions=1)
    t.model.gradient_checkpointing_disable()
    assert held_forward_bytes(t.model, buffer) == math.inf  # every activation would be held
    t.model.gradient_checkpointing_enable()
    tokens = sum(buffer.length(i) for i in range(buffer.size))
    assert held_forward_bytes(t.model, buffer) == 4 * 64 * (2 + 2) * tokens  # the tiny model: hidden 64, 2 layers
