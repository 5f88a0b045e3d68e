"""LoRA on the local engine (PEFT), on CPU with the tiny model: a step trains the adapter
only, the KL reference is the base on the same weights, checkpoints hold the adapter and
resume restores it with its optimizer state exactly, and ``final/`` / ``training.export``
merge it into a plain HF directory that transformers loads with the PEFT model's logits.
All ``slow``: each builds a trainer and runs a step (30-60 s on two busy cores)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from agents.types import Example
from tests.helpers.local_trainer import config, trainer
from tests.helpers.schools import ScriptedPolicy
from tests.helpers.tiny_model import tiny_model, tiny_tokenizer
from tools.errors import ConfigError
from training.engines.local import state as st
from training.engines.local.lora import ADAPTER_WEIGHTS, adapter_state, is_lora
from training.engines.local.trainer import LocalTrainer, TrainerInputs
from training.export import export_step

LORA = ("model.lora.rank=4", "model.lora.alpha=8")
TOKENS = torch.tensor([[5, 17, 42, 7, 99, 3, 64, 12]])


def base_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items() if "lora_" not in k}


def logits(model: torch.nn.Module) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        return model(input_ids=TOKENS).logits


@pytest.mark.slow
def test_a_lora_step_trains_the_adapter_only_and_the_reference_is_the_base(
    tmp_path: Path, examples: list[Example]
) -> None:
    t = trainer("retoolsql", tmp_path / "run", examples, *LORA)  # ReToolSQL: beta 0.005 from step 0
    assert is_lora(t.model) and t.models.ref_model is None and t.models.initial is None  # no second copy
    base, adapter = base_weights(t.model), adapter_state(t.model)
    trainable = [p for p in t.model.parameters() if p.requires_grad]
    assert trainable and all(p.requires_grad == ("lora_" in n) for n, p in t.model.named_parameters())
    metrics = t.train_step()
    assert metrics["kl/beta"] == pytest.approx(0.005) and t.models.reference_on
    after = base_weights(t.model)
    assert after.keys() == base.keys() and all(torch.equal(base[k], after[k]) for k in base)  # bit-identical
    moved = adapter_state(t.model)
    assert any(not torch.equal(adapter[k], moved[k]) for k in adapter)  # lora_B leaves its zero init
    assert len(t.optimizer.state) == len(trainable)  # AdamW moments for the adapter only
    plain = tiny_model(seed=1)  # the weights the trainer was given
    with t.models.reference() as ref:
        assert torch.allclose(logits(ref), logits(plain), atol=1e-6)
    assert t.model.training and not torch.allclose(logits(t.model), logits(plain), atol=1e-6)


@pytest.mark.slow
def test_a_checkpoint_holds_the_adapter_and_resume_restores_it_exactly(tmp_path: Path, examples: list[Example]) -> None:
    run = tmp_path / "run"
    first = trainer("think2sql", run, examples, *LORA)
    first.train_step()
    first.step = 1
    saved = first.save()
    assert (saved / ADAPTER_WEIGHTS).is_file() and not (saved / "model.safetensors").exists()
    resumed = trainer("think2sql", run, examples, *LORA, "resume=auto", seed=3)  # another adapter init
    assert resumed.restore() and resumed.step == 1
    a, b = adapter_state(first.model), adapter_state(resumed.model)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    opt_a, opt_b = first.optimizer.state_dict()["state"], resumed.optimizer.state_dict()["state"]
    assert opt_a.keys() == opt_b.keys() and opt_a
    assert all(torch.equal(opt_a[i][m], opt_b[i][m]) for i in opt_a for m in ("exp_avg", "exp_avg_sq"))
    with pytest.raises(ConfigError, match=r"holds a LoRA adapter: resume it with the model.lora.rank"):
        trainer("think2sql", run, examples, "resume=auto").restore()


@pytest.mark.slow
def test_final_and_export_merge_the_adapter_into_a_plain_hf_directory(tmp_path: Path, examples: list[Example]) -> None:
    base_dir = tmp_path / "base"  # a model directory: the adapter's base_model_name_or_path
    tiny_model(seed=1).save_pretrained(base_dir)
    tiny_tokenizer().save_pretrained(base_dir)
    run = tmp_path / "run"
    cfg = config("think2sql", run, *LORA, f"model.path={base_dir}")
    policy = ScriptedPolicy("think2sql", examples, False)
    inputs = TrainerInputs(train_examples=examples, eval_examples=examples[:2], generate=policy)
    t = LocalTrainer(cfg, inputs, say=lambda _: None)  # loads the base from model.path
    summary = t.fit()
    assert summary["steps"] == 1
    peft_logits = logits(t.model)
    for directory in (run / "final", export_step(run, out=tmp_path / "exported", say=lambda _: None)):
        assert (directory / "model.safetensors").is_file() and not (directory / "adapter_config.json").exists()
        plain = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)
        assert not is_lora(plain)
        assert torch.allclose(logits(plain), peft_logits, atol=1e-5)
    assert not torch.allclose(logits(tiny_model(seed=1)), peft_logits, atol=1e-6)  # the adapter is in
    latest = st.latest_checkpoint(run)
    assert latest is not None and st.has_weights(latest)


@pytest.mark.slow
def test_a_lora_warm_start_is_saved_merged_and_is_the_kl_reference(tmp_path: Path, examples: list[Example]) -> None:
    from training.engines.local.warm_start import warm_start_dir

    on = ("stage.warm_start.enable=true", "stage.warm_start.examples=4", "stage.warm_start.epochs=2")
    t = trainer("retoolsql", tmp_path, examples, *LORA, *on, "stage.warm_start.lr=1e-2")
    base = base_weights(t.model)
    t.fit()
    warm = warm_start_dir(tmp_path)
    assert (warm / "model.safetensors").is_file() and (warm / "adapter" / ADAPTER_WEIGHTS).is_file()
    after = base_weights(t.model)
    assert all(torch.equal(base[k], after[k]) for k in base)  # SFT and RL moved the adapter only
    warm_logits = logits(AutoModelForCausalLM.from_pretrained(warm, dtype=torch.float32))
    assert not torch.allclose(warm_logits, logits(tiny_model(seed=1)), atol=1e-4)  # the warm start moved it
    with t.models.reference() as ref:  # the KL reference: the warm-started weights, not the base
        assert torch.allclose(logits(ref), warm_logits, atol=1e-5)
    resumed = trainer("retoolsql", tmp_path, examples, *LORA, *on, "resume=auto")
    assert resumed.restore()  # a resumed run finds the reference in warm_start/adapter/
    resumed.models.keep_reference(True, resumed._reference_path())
    with resumed.models.reference() as ref:
        assert torch.allclose(logits(ref), warm_logits, atol=1e-5)


@pytest.mark.slow
def test_a_lora_step_on_the_bundled_model_exports_to_a_plain_directory(tmp_path: Path, examples: list[Example]) -> None:
    """The embedded SmolLM2-135M, one LoRA step on CPU, then ``training.export``: transformers
    loads the merged directory with the PEFT model's logits."""
    run = tmp_path / "run"
    extra = (*LORA, "algorithm.group_size=2", "algorithm.batch_size=1", "algorithm.dynamic_sampling.enable=false")
    cfg = config("think2sql", run, *extra)
    policy = ScriptedPolicy("think2sql", examples, True)
    t = LocalTrainer(cfg, TrainerInputs(train_examples=examples, eval_examples=[], generate=policy), say=print)
    policy.tok = t.tokenizer  # the scripted turns in SmolLM2's tokens (the same chat markers)
    base = base_weights(t.model)
    assert t.fit()["steps"] == 1
    assert all(torch.equal(base[k], v) for k, v in base_weights(t.model).items())
    exported = export_step(run, out=tmp_path / "exported", say=print)
    plain = AutoModelForCausalLM.from_pretrained(exported, dtype=torch.float32)
    assert not is_lora(plain) and (exported / "tokenizer_config.json").is_file()
    assert torch.allclose(logits(plain), logits(t.model), atol=1e-4)
