"""What the local update keeps in memory: the generation copy is set aside while only the
policy trains (the update, SFT) and comes back equal to the policy's new weights, failure
included; the KL reference is loaded for one pass per update, dropped after it, and gives
the log-probs the update's own micro-batches need."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from agents.types import Example
from tests.helpers.local_trainer import trainer
from training.engines.local import policy_models
from training.engines.local import update as upd
from training.engines.local.trainer import LocalTrainer

BF16_COPY = ("algorithm.dynamic_sampling.enable=false", "model.generation_dtype=bf16")


def copy_size(t: LocalTrainer) -> int:
    return sum(p.numel() for p in t.gen_model.parameters())


def assert_copy_is_the_policy_in_bf16(t: LocalTrainer) -> None:
    own = dict(t.model.named_parameters())
    copied = dict(t.gen_model.named_parameters())
    assert copied.keys() == own.keys()
    for name, param in copied.items():
        assert param.dtype == torch.bfloat16 and torch.equal(param, own[name].detach().to(torch.bfloat16)), name
    ids = torch.randint(3, 500, (1, 12))
    fresh = policy_models.generation_copy(t.model, "cpu", "bf16", "off")
    with torch.no_grad():
        assert torch.equal(t.gen_model(input_ids=ids).logits, fresh(input_ids=ids).logits)


def spy_on_optimizer_steps(monkeypatch: pytest.MonkeyPatch, t: LocalTrainer, fail: bool = False) -> list[int]:
    """The generation copy's size at each optimizer step (its gradient clip, just before)."""
    sizes: list[int] = []
    clip = torch.nn.utils.clip_grad_norm_

    def clip_and_look(*args: Any, **kwargs: Any) -> Any:
        sizes.append(copy_size(t))
        if fail:
            raise RuntimeError("the update failed half-way")
        return clip(*args, **kwargs)

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", clip_and_look)
    return sizes


def test_the_generation_copy_is_set_aside_during_the_update_and_refreshed_after(
    tmp_path: Path, examples: list[Example], monkeypatch: pytest.MonkeyPatch
) -> None:
    t = trainer("think2sql", tmp_path, examples, *BF16_COPY, "algorithm.mini_batches=2")
    full = copy_size(t)
    assert t.gen_model is not t.model and full > 0
    sizes = spy_on_optimizer_steps(monkeypatch, t)
    before = {k: v.clone() for k, v in t.model.state_dict().items()}
    t.train_step()
    assert sizes == [0, 0]  # two mini-batches: set aside through both optimizer steps
    assert any(not torch.equal(before[k], v) for k, v in t.model.state_dict().items())  # the weights moved
    assert copy_size(t) == full
    assert_copy_is_the_policy_in_bf16(t)


def test_a_failed_update_still_brings_the_generation_copy_back(
    tmp_path: Path, examples: list[Example], monkeypatch: pytest.MonkeyPatch
) -> None:
    t = trainer("think2sql", tmp_path, examples, *BF16_COPY)
    sizes = spy_on_optimizer_steps(monkeypatch, t, fail=True)
    with pytest.raises(RuntimeError, match="half-way"):
        t.train_step()
    assert sizes == [0]
    assert_copy_is_the_policy_in_bf16(t)


def test_the_warm_start_sets_the_generation_copy_aside(
    tmp_path: Path, examples: list[Example], monkeypatch: pytest.MonkeyPatch
) -> None:
    import training.supervised.fine_tune as ft

    t = trainer("think2sql", tmp_path, examples, *BF16_COPY, "stage.warm_start.enable=true")
    sizes: list[int] = []
    fine_tune = ft.supervised_fine_tune

    def look_then_fine_tune(*args: Any, **kwargs: Any) -> Any:
        sizes.append(copy_size(t))
        return fine_tune(*args, **kwargs)

    monkeypatch.setattr(ft, "supervised_fine_tune", look_then_fine_tune)
    before = {k: v.clone() for k, v in t.model.state_dict().items()}
    t.run_warm_start()
    assert sizes == [0]
    assert any(not torch.equal(before[k], v) for k, v in t.model.state_dict().items())
    assert_copy_is_the_policy_in_bf16(t)


@pytest.mark.parametrize("share_prefix", [False, True], ids=["one row per pass", "each group packed"])
def test_the_kl_reference_is_loaded_for_one_pass_per_update(
    tmp_path: Path, examples: list[Example], monkeypatch: pytest.MonkeyPatch, share_prefix: bool
) -> None:
    """Think2SQL with a KL term from step 0, one row per micro-batch (or each group's rows
    packed behind their prompt): the reference is the given model's initial weights, loaded
    once per update and gone after; at step 1 the policy is that reference, so the KL of every
    micro-batch is 0 only if each one got its own rows' reference log-probs; at step 2 the
    policy has moved."""
    t = trainer(
        "think2sql",
        tmp_path,
        examples,
        "algorithm.dynamic_sampling.enable=false",
        "algorithm.kl_schedule=[[0,0.01]]",
        "optim.micro_batch_size=1",
        f"optim.share_prefix={str(share_prefix).lower()}",
        "trainer.total_steps=2",
    )
    loads: list[int] = []
    initial_policy = policy_models.PolicyModels._initial_policy

    def counted(self: policy_models.PolicyModels, *args: Any, **kwargs: Any) -> Any:
        loads.append(t.step)
        return initial_policy(self, *args, **kwargs)

    monkeypatch.setattr(policy_models.PolicyModels, "_initial_policy", counted)
    kls: list[float] = []
    grpo_loss = upd.lp.grpo_loss

    def loss_and_keep_kl(*args: Any, **kwargs: Any) -> Any:
        loss, metrics = grpo_loss(*args, **kwargs)
        kls.append(metrics["kl"])
        return loss, metrics

    monkeypatch.setattr(upd.lp, "grpo_loss", loss_and_keep_kl)
    first = t.train_step()
    step_one = list(kls)
    assert t.models.ref_model is None and t.models.reference_on
    second = t.train_step()
    assert loads == [0, 1] and t.models.ref_model is None  # one load per update, not per micro-batch
    groups = first["sampling/trajectories_updated"] / t.cfg.algorithm.group_size
    assert len(step_one) == (groups if share_prefix else first["sampling/trajectories_updated"]) > 1
    assert step_one == [0.0] * len(step_one)
    assert max(kls[len(step_one) :]) > 0.0 and second["kl"] > 0.0


def test_the_optimizer_state_is_released_after_the_last_checkpointed_step(
    tmp_path: Path, examples: list[Example]
) -> None:
    """AdamW's moments go before the final evaluation (they are in the last checkpoint): a
    resumed run gets them back; this trainer refuses to train on."""
    extra = ("algorithm.dynamic_sampling.enable=false", "trainer.eval_before_after=true")
    t = trainer("think2sql", tmp_path, examples, *extra)
    t.fit()
    assert len(t.optimizer.state) == 0
    with pytest.raises(RuntimeError, match=r"resume=auto"):
        t.train_step()
    resumed = trainer("think2sql", tmp_path, examples, *extra, "resume=auto", "trainer.total_steps=2")
    assert resumed.restore() and resumed.step == 1
    trainable = [p for p in resumed.model.parameters() if p.requires_grad]
    assert len(resumed.optimizer.state) == len(trainable)
    assert all(float(resumed.optimizer.state[p]["exp_avg_sq"].abs().sum()) > 0 for p in trainable[:3])


def test_adamw_moments_wait_on_disk_but_for_the_optimizer_step(
    tmp_path: Path, examples: list[Example], monkeypatch: pytest.MonkeyPatch
) -> None:
    """optim.spill_state: from the second step on (the first optimizer step made the
    moments), every generate call and the update's backward passes (up to the gradient clip)
    see no optimizer state and the spill file; the optimizer step gets the same moments back,
    bit for bit, and the file is gone after the step."""
    from training.engines.local.optimizer_spill import SPILL_NAME

    t = trainer("think2sql", tmp_path, examples, "algorithm.dynamic_sampling.enable=false", "optim.spill_state=true")
    spill = tmp_path / SPILL_NAME
    seen: list[tuple[int, bool]] = []
    clipped: list[tuple[int, bool]] = []
    generate, clip = t.generate, torch.nn.utils.clip_grad_norm_

    def look_then_generate(*args: Any, **kwargs: Any) -> Any:
        seen.append((len(t.optimizer.state), spill.exists()))
        return generate(*args, **kwargs)

    def look_then_clip(*args: Any, **kwargs: Any) -> Any:
        clipped.append((len(t.optimizer.state), spill.exists()))
        return clip(*args, **kwargs)

    t.generate = look_then_generate
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", look_then_clip)
    t.train_step()
    assert seen and set(seen) == {(0, False)} and clipped == [(0, False)]  # no moments yet: nothing to spill
    moments = {p: {k: v.clone() for k, v in s.items()} for p, s in t.optimizer.state.items()}
    assert moments
    seen.clear()
    clipped.clear()
    with t.updater.moments_set_aside():
        assert len(t.optimizer.state) == 0 and spill.exists()
    assert not spill.exists() and t.optimizer.state.keys() == moments.keys()
    for p, state in moments.items():
        assert all(torch.equal(v, t.optimizer.state[p][k]) for k, v in state.items())
    t.train_step()
    assert seen and set(seen) == {(0, True)}  # every generate call of step 2
    assert clipped == [(0, True)]  # the backward passes too
    assert not spill.exists() and len(t.optimizer.state) == len(moments)
    assert all(int(t.optimizer.state[p]["step"]) == 2 for p in moments)  # the step continued from them


def test_a_failed_rollout_still_brings_the_moments_back(tmp_path: Path, examples: list[Example]) -> None:
    """...and a spill file a killed run left behind is deleted by the next run's trainer."""
    from training.engines.local.optimizer_spill import SPILL_NAME

    tmp_path.joinpath(SPILL_NAME).write_bytes(b"moments of a run killed during its rollout")
    t = trainer("think2sql", tmp_path, examples, "algorithm.dynamic_sampling.enable=false", "optim.spill_state=true")
    assert not tmp_path.joinpath(SPILL_NAME).exists()
    t.train_step()
    count = len(t.optimizer.state)

    def fail(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("generation failed")

    t.generate = fail
    with pytest.raises(RuntimeError, match="generation failed"):
        t.train_step()
    assert len(t.optimizer.state) == count and not list(tmp_path.glob("*.spill"))


def test_the_warm_start_spills_its_moments_and_trains_the_same_weights(
    tmp_path: Path, examples: list[Example], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SFT's own AdamW: on disk during each step's forward and backward passes after the
    first; the fine-tuned weights equal those of the same warm start without spilling."""
    import training.supervised.fine_tune as ft
    from training.engines.local.optimizer_spill import SPILL_NAME

    warm = ("algorithm.dynamic_sampling.enable=false", "stage.warm_start.enable=true")
    small_steps = (  # one pass per demonstration, two per step
        "stage.warm_start.batch_size=2",
        "stage.warm_start.micro_batch_size=1",
        "optim.share_prefix=false",
    )
    nll_sum = ft.nll_sum
    weights = {}
    for spill in (False, True):
        run_dir = tmp_path / f"spill_{spill}"
        t = trainer("think2sql", run_dir, examples, *warm, *small_steps, f"optim.spill_state={spill}")
        seen: list[bool] = []

        def look_then_nll(*args: Any, **kwargs: Any) -> Any:
            seen.append((run_dir / SPILL_NAME).exists())  # noqa: B023 - called within this iteration
            return nll_sum(*args, **kwargs)

        monkeypatch.setattr(ft, "nll_sum", look_then_nll)
        t.run_warm_start()
        assert len(seen) >= 4 and seen[:2] == [False, False]  # the first step has no moments yet
        assert set(seen[2:]) == {spill} and not (run_dir / SPILL_NAME).exists()
        weights[spill] = {k: v.clone() for k, v in t.model.state_dict().items()}
    assert all(torch.equal(v, weights[True][k]) for k, v in weights[False].items())
