"""LoRA on the verl engine, through the real dry-run path (CPU): ``model.lora.*`` reaches
veRL's ``actor_rollout_ref.model`` keys, the settings veRL would reject or ignore are
refused with the key to change, and the memory estimate counts LoRA's frozen weights
(ReToolSQL's Gemma 4 31B: two 8x80 GB nodes for full fine-tuning, one with LoRA)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from tools.errors import ConfigError
from training.config import TrainConfig, compose_tree
from training.engines.verl import launch as L
from training.engines.verl.checks.backbones import BACKBONES
from training.engines.verl.checks.lora_memory import adapter_params
from training.engines.verl.checks.memory import GIB, Knobs, estimate
from training.engines.verl.config import translate as C


def project_config(recipe: str, *overrides: str) -> TrainConfig:
    return TrainConfig.from_mapping(compose_tree("config", [f"recipe={recipe}", "engine=verl", *overrides]))


def test_the_lora_keys_reach_verl_and_the_dry_run() -> None:
    cfg = project_config(
        "retoolsql", "model.lora.rank=32", "model.lora.alpha=64", "model.lora.target_modules=[q_proj,v_proj]"
    )
    model = C.verl_config_for(cfg, num_train_examples=660).actor_rollout_ref.model
    assert (model.lora_rank, model.lora_alpha, list(model.target_modules)) == (32, 64, ["q_proj", "v_proj"])
    off = C.verl_config_for(project_config("retoolsql"), num_train_examples=660).actor_rollout_ref.model
    assert (off.lora_rank, off.target_modules) == (0, "all-linear")  # the default: full fine-tuning
    text = L.describe(project_config("retoolsql", "model.lora.rank=32"))
    assert "    lora_rank: 32\n" in text and "LoRA rank 32: 245M adapter parameters trained" in text


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("model.lora.rank=1024", r"model.lora.rank=1024: vLLM serves LoRA adapters up to rank 512"),
        ("model.lora.dropout=0.05", r"model.lora.dropout=0.05: veRL's FSDP actor builds its LoRA without dropout"),
    ],
)
def test_lora_settings_verl_would_reject_or_ignore_are_refused(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        L.describe(project_config("think2sql", "model.lora.rank=16", override))


def test_a_bad_lora_value_names_the_key() -> None:
    with pytest.raises(ConfigError, match=r"model.lora.rank=-1: 0 \(off\) or a positive integer"):
        project_config("think2sql", "model.lora.rank=-1")
    with pytest.raises(ConfigError, match=r"model.lora.alpha=12.5: expected an integer"):  # veRL's lora_alpha is one
        project_config("think2sql", "model.lora.alpha=12.5")


def test_adapter_size_matches_the_hand_computation() -> None:
    """Qwen3-8B: hidden 4096, q 32x128, k/v 8x128, intermediate 12288, 36 layers."""
    per_layer = (4096 + 4096) + 2 * (4096 + 1024) + (4096 + 4096) + 3 * (4096 + 12288)  # 75,776 x r
    arch = BACKBONES["Qwen/Qwen3-8B"].arch
    assert arch is not None
    assert adapter_params(arch, 32) == 36 * 32 * per_layer == 87_293_952
    assert adapter_params(arch, 0) == 0


def test_gemma_4_31b_needs_two_nodes_in_full_and_one_with_lora() -> None:
    with pytest.raises(
        ConfigError, match=r"actor update needs .* add GPUs: .*train LoRA adapters only \(model.lora.rank=32"
    ):
        L.describe(project_config("retoolsql", "hardware=h100x8"))  # full fine-tuning on one node
    text = L.describe(project_config("retoolsql", "hardware=h100x8", "model.lora.rank=32"))
    assert "8 GPU(s)" in text and "update, per GPU of 79.6 GiB" in text
    (printed,) = re.findall(r"# sizing: update, per GPU of 79.6 GiB: .* = ([\d.]+) GiB\n", text)
    assert float(printed) < 0.9 * 79.6  # the plan shows the update within one 80 GB GPU's usable memory
    assert "LoRA rank 32: 245M adapter parameters trained, the rest frozen" in text
    verl = C.verl_config_for(
        project_config("retoolsql", "hardware=h100x8", "model.lora.rank=32"), num_train_examples=660
    )
    arch, knobs = BACKBONES["google/gemma-4-31B-it"].arch, Knobs.from_verl(verl)
    assert arch is not None
    lora, full = estimate(arch, knobs, None), estimate(arch, dataclasses.replace(knobs, lora_rank=0), None)
    assert lora.grads + lora.optimizer < 0.02 * (full.grads + full.optimizer)  # the adapter's state only
    assert lora.weights == pytest.approx(full.weights, rel=0.01)  # the frozen weights stay sharded in fp32
    assert lora.update_peak < 0.9 * 79.6 * GIB < full.update_peak


@pytest.fixture(scope="module")
def tiny_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The tiny test model (Qwen2 layers: q/k/v/o_proj, gate/up/down_proj) and a LoRA
    adapter of it saved on its own (what a local-engine LoRA checkpoint holds)."""
    from peft import LoraConfig, get_peft_model

    from tests.helpers.tiny_model import tiny_model, tiny_tokenizer

    root = tmp_path_factory.mktemp("lora_checks")
    tiny_tokenizer().save_pretrained(root / "policy")
    tiny_model().save_pretrained(root / "policy")
    get_peft_model(tiny_model(), LoraConfig(r=4, target_modules="all-linear")).save_pretrained(root / "adapter")
    return {"policy": str(root / "policy"), "adapter": str(root / "adapter"), "root": str(root)}


SMALL = ("data.limit=4", "algorithm.batch_size=2", "rollout.max_prompt_tokens=2048", "rollout.max_response_tokens=1024")
"""Sizes the tiny model's 4,096 positions and a 4-question data limit hold."""

REFUSED = [
    (
        ("model.lora.rank=8", "model.lora.target_modules=[q_proj,qproj]"),
        r"target_modules=\[q_proj,qproj\]: qproj names no linear layer of .*PEFT would skip them silently.*"
        r"Its linear layers: down_proj, gate_proj, k_proj, lm_head, o_proj, q_proj, up_proj, v_proj",
    ),
    (
        ("model.lora.rank=8", "model.lora.target_modules=[attn]"),
        r"target_modules=\[attn\]: attn names no linear layer of .*\(PEFT refuses the run\)",
    ),
    (("model.lora.alpha=64",), r"model.lora.alpha=64 with model.lora.rank=0: rank 0 trains every weight"),
    (
        ("model.lora.target_modules=[q_proj]",),
        r"model.lora.target_modules=\[q_proj\] with model.lora.rank=0: .*e\.g\. model.lora.rank=32",
    ),
    (
        ("+verl.actor_rollout_ref.model.lora.rank=8",),
        r"actor_rollout_ref.model.lora.rank=8 makes veRL's trainer take the KL reference from the actor with its "
        r"adapter disabled.*Set model.lora.rank=8 \(the project's key\)",
    ),
    (
        ("+verl.actor_rollout_ref.model.lora_adapter_path=/adapters/sft",),
        r"lora_adapter_path=/adapters/sft makes veRL's trainer take the KL reference .*Set model.lora.rank to "
        r"that adapter's rank",
    ),
    (
        ("model.lora.rank=8", "+verl.actor_rollout_ref.rollout.layered_summon=true"),
        r"layered_summon=true with load_format=dummy under LoRA.*layered_summon=false",
    ),
]


@pytest.mark.parametrize(("overrides", "message"), REFUSED)
def test_lora_settings_that_would_fail_later_are_refused_by_dry_run_and_prepare(
    overrides: tuple[str, ...], message: str, tiny_dirs: dict[str, str], tmp_path: Path
) -> None:
    cfg = project_config(
        "think2sql",
        f"model.path={tiny_dirs['policy']}",
        f"run_dir={tmp_path / 'run'}",
        "data.limit=4",
        "algorithm.batch_size=2",
        *overrides,
    )
    with pytest.raises(ConfigError, match=message):
        L.describe(cfg)  # dry_run=true
    with pytest.raises(ConfigError, match=message):
        L.prepare(cfg, say=lambda _line: None, check_devices=False)
    assert not (tmp_path / "run").exists()  # refused before anything is written


def test_an_adapter_only_directory_is_refused_as_the_model(tiny_dirs: dict[str, str], tmp_path: Path) -> None:
    cfg = project_config("think2sql", f"model.path={tiny_dirs['adapter']}", "model.lora.rank=8", *SMALL)
    with pytest.raises(ConfigError, match=r"holds a LoRA adapter only .*python -m training.export"):
        L.describe(cfg)


def test_lora_on_existing_layers_passes(tiny_dirs: dict[str, str]) -> None:
    text = L.describe(
        project_config(
            "think2sql",
            f"model.path={tiny_dirs['policy']}",
            "model.lora.rank=8",
            "model.lora.target_modules=[q_proj,v_proj]",
            *SMALL,
        )
    )
    assert "    lora_rank: 8\n" in text and "- q_proj\n" in text
