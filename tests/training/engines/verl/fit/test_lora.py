"""veRL's real ``fit()`` with LoRA (``model.lora.rank=8`` -> ``actor_rollout_ref.model.lora_rank``).

ReToolSQL (its KL is on from step 0, so every step has a reference pass), two steps with a
checkpoint each, then the same run resumed for a third. The worker double wraps the model
with veRL's own ``FSDPEngine._build_lora_module`` and follows the FSDP worker under LoRA
(``fsdp_double.py``): veRL's trainer takes the reference from the actor with its adapter
disabled (``ref_in_actor``), the server gets the base once and the adapter at every sync,
the checkpoint holds PEFT's state dict and veRL's ``lora_train_meta.json``, and ``final/``
comes from veRL's merger with the adapter merged (``training/export.py``).

What this shows on CPU: only the adapter trains and the base stays bit-identical; the
log-probs the KL term uses are the base model's; the rollout generates with the adapter
(its log-probs equal the actor's); the checkpoint resumes exactly; the exported model is
a plain HF directory holding base + alpha / r * B A. What it cannot show: vLLM's own LoRA
kernels and adapter loading, FSDP sharding of the adapter, GPU memory (tests/gpu).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.training.engines.verl.fit import harness as H
from tests.training.engines.verl.fit.fsdp_double import sequence_logprobs, weights_changed

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

RECIPE = "retoolsql"
RANK, ALPHA = 8, 16
OVERRIDES = [
    f"model.lora.rank={RANK}",
    f"model.lora.alpha={ALPHA}",
    "algorithm.group_size=2",
    "algorithm.batch_size=2",
    "algorithm.dynamic_sampling.enable=false",
    "trainer.total_steps=2",
    "trainer.save_every=1",
    "trainer.keep_checkpoints=2",
    "trainer.val_every=0",
    "trainer.eval_before_after=false",
    "agent.max_turns=2",
    "agent.num_few_shot=1",
    "+agent.schema_format=compact",
    "rollout.max_prompt_tokens=3072",
    "rollout.max_response_tokens=1024",
    "rollout.max_new_tokens=96",
    "rollout.observation_max_tokens=128",
    "optim.lr=1e-2",
    "optim.warmup_ratio=0.0",
    "logger=[]",
]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("fit_lora")
    train, val = H.examples(root, RECIPE, n_train=2, n_val=1)
    base = H.verl_config(RECIPE, root / "run", H.tiny_model_dir(root), train, val, OVERRIDES)
    session = H.start_session(RECIPE, root, base, writers={"0": "script", "1": "sample"})
    try:
        seen: dict[str, Any] = {}
        first = H.run_fit(session, base, before_fit=lambda t: seen.update(initial=t.actor_rollout_wg.state_dict()))
        end_of_first = first.actor_rollout_wg.state_dict()
        final_of_first = {k: v.clone() for k, v in load_dir(Path(base.sqlagent.final_dir)).items()}
        merged_of_first = merged_weights(first.actor_rollout_wg.model)
        resumed_config = H.with_changes(base, {"trainer.resume_mode": "auto", "trainer.total_training_steps": 3})
        resumed = H.run_fit(
            session,
            resumed_config,
            before_fit=lambda t: seen.update(step=t.global_steps, resumed=t.actor_rollout_wg.state_dict()),
        )
        yield {
            "first": first,
            "resumed_trainer": resumed,
            "config": base,
            "root": root,
            "end_of_first": end_of_first,
            "final_of_first": final_of_first,
            "merged_of_first": merged_of_first,
            **seen,
        }
    finally:
        H.stop_session()


def load_dir(directory: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    out: dict[str, torch.Tensor] = {}
    for path in sorted(directory.glob("*.safetensors")):
        out.update(load_file(str(path)))
    return out


def merged_weights(peft_model: Any) -> dict[str, torch.Tensor]:
    """The policy's weights with the adapter merged (PEFT, fp32), under the plain model's names."""
    import copy

    return {k: v.detach().clone() for k, v in copy.deepcopy(peft_model).merge_and_unload().state_dict().items()}


def test_only_the_adapter_trains(run: dict[str, Any]) -> None:
    initial, after = run["initial"], run["first"].actor_rollout_wg.state_dict()
    assert initial.keys() == after.keys()
    moved = {k for k in initial if not torch.equal(initial[k], after[k])}
    assert moved and all(".lora_A." in k or ".lora_B." in k for k in moved)
    assert any(".lora_B." in k for k in moved)  # B starts at zero: the adapter now changes the output
    group = run["first"].actor_rollout_wg
    trainable = [n for n, p in group.model.named_parameters() if p.requires_grad]
    assert trainable and all(".lora_" in n for n in trainable)
    assert len(group.optimizer.state) == len(trainable)  # AdamW moments for the adapter only
    base = load_dir(Path(run["config"].actor_rollout_ref.model.path))  # the frozen base is the model on disk
    for key, value in base.items():
        peft_key = "base_model.model." + key
        peft_key = peft_key if peft_key in after else peft_key.replace(".weight", ".base_layer.weight")
        peft_key = peft_key if peft_key in after else peft_key.replace(".bias", ".base_layer.bias")
        assert torch.equal(after[peft_key], value), key


def test_the_kl_reference_is_the_base_model(run: dict[str, Any]) -> None:
    """veRL's trainer routes the reference pass to the actor with ``no_lora_adapter``; the
    ``ref_log_prob`` the update's KL term reads equals the base model's log-probs, while the
    policy's own (``old_log_probs``) differ once the adapter has trained."""
    from transformers import AutoModelForCausalLM

    trainer = run["first"]
    group = trainer.actor_rollout_wg
    assert trainer.ref_in_actor and not hasattr(trainer, "ref_policy_wg")
    assert group.reference_passes == 2  # one per step
    temperature = float(run["config"].actor_rollout_ref.rollout.temperature)
    base = AutoModelForCausalLM.from_pretrained(run["config"].actor_rollout_ref.model.path, dtype=torch.float32)
    for step, batch in enumerate(group.batches, start=1):
        assert "ref_log_prob" in batch, "the update got no reference log-probs"
        policy_gap = 0.0
        rows = zip(batch["input_ids"], batch["responses"], batch["ref_log_prob"], batch["old_log_probs"], strict=True)
        for ids, response, ref, old in rows:
            n = len(response)
            with torch.no_grad():
                full, _ = sequence_logprobs(base, torch.tensor(ids), temperature)
            expected = full[len(ids) - n - 1 : len(ids) - 1]
            assert torch.allclose(torch.tensor(ref[:n]), expected, atol=1e-5), step
            policy_gap = max(policy_gap, float((torch.tensor(old[:n]) - expected).abs().max()))
        if step == 1:
            assert policy_gap < 1e-5  # B = 0: the adapter does nothing yet
        else:
            assert policy_gap > 1e-4  # the trained adapter: the policy is no longer the reference
    steps = H.step_metrics(Path(run["config"].sqlagent.run_dir))
    assert steps[1]["actor/kl_loss"] == 0.0  # the update's first forward: adapter still zero, policy = base
    assert steps[2]["actor/kl_loss"] > 0.0  # the KL term sees the trained adapter against the base
    for data in steps.values():
        assert data["actor/kl_coef"] == 0.005
        # the server generated with the adapter: its log-probs are the actor's
        assert abs(data["training/rollout_probs_diff_max"]) < 1e-5


def test_the_checkpoint_holds_the_adapter_as_verl_writes_it(run: dict[str, Any]) -> None:
    ckpt = Path(run["config"].trainer.default_local_dir)
    actor = ckpt / "global_step_2" / "actor"
    assert "hf_model" not in run["config"].actor_rollout_ref.actor.checkpoint.save_contents
    meta = json.loads((actor / "lora_train_meta.json").read_text())
    assert meta == {"r": RANK, "lora_alpha": ALPHA, "task_type": "CAUSAL_LM"}
    shard = torch.load(actor / "model_world_size_1_rank_0.pt", weights_only=True)
    assert shard.keys() == run["end_of_first"].keys()  # PEFT's whole state dict (save_lora_only is off)
    assert any(k.endswith(".lora_A.default.weight") for k in shard)
    assert not list((actor / "huggingface").glob("*.safetensors"))  # config and tokenizer only


def test_resume_restores_the_adapter_and_continues(run: dict[str, Any]) -> None:
    assert run["step"] == 2
    assert weights_changed(run["end_of_first"], run["resumed"]) == 0.0  # the adapter and the frozen base
    trainer = run["resumed_trainer"]
    assert trainer.global_steps == 3 and trainer.actor_rollout_wg.reference_passes == 1
    after = trainer.actor_rollout_wg.state_dict()
    moved = {k for k in after if not torch.equal(after[k], run["end_of_first"][k])}
    assert moved and all(".lora_" in k for k in moved)
    assert sorted(H.step_metrics(Path(run["config"].sqlagent.run_dir))) == [1, 2, 3]


def test_final_is_a_plain_model_with_the_adapter_merged(run: dict[str, Any]) -> None:
    """``final/`` after each fit: veRL's merger on the last checkpoint, the adapter merged:
    the base model's tensor names (what vLLM and ``eval.run`` load), no adapter files,
    weights = base + alpha / r * B A up to bf16 rounding."""
    from transformers import AutoModelForCausalLM

    final = Path(run["config"].sqlagent.final_dir)
    base = load_dir(Path(run["config"].actor_rollout_ref.model.path))
    exported = run["final_of_first"]
    assert exported.keys() == base.keys()
    assert not (final / "adapter_config.json").exists() and not (final / "lora_adapter").exists()
    merged = run["merged_of_first"]
    adapted = [k for k in base if k.endswith("proj.weight")]
    assert adapted
    for key in adapted:
        moved = float((merged[key] - base[key]).abs().max())
        error = float((exported[key].float() - merged[key]).abs().max())
        assert moved > 0 and error < 0.25 * moved, (key, error, moved)
    later = AutoModelForCausalLM.from_pretrained(final).state_dict()  # rewritten by the resumed fit
    assert any(not torch.equal(later[k], exported[k]) for k in adapted)
