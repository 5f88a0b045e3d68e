"""The backbone table, model cards and the derived long-context model directory (tiny model, CPU)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tools.errors import ConfigError
from training.engines.verl.checks.backbones import BACKBONES, backbone_for_group, derive_long_context_model, model_card


@pytest.fixture()
def tiny_dir(tmp_path: Path) -> Path:
    from tests.helpers.tiny_model import tiny_model, tiny_tokenizer

    path = tmp_path / "tiny"
    tiny_tokenizer().save_pretrained(path)
    tiny_model().save_pretrained(path)
    return path


def test_table_rows_are_consistent() -> None:
    for hub, row in BACKBONES.items():
        assert row.hub_name == hub and backbone_for_group(row.group) is row
        assert row.num_attention_heads % row.tensor_parallel_size == 0
        assert row.num_key_value_heads % row.tensor_parallel_size == 0
        assert 8 % row.tensor_parallel_size == 0  # rollout replicas on one 8-GPU node
        assert row.source.startswith("huggingface.co/" + hub)
    assert BACKBONES["Qwen/Qwen3-8B"].max_position_embeddings == 8192 + 32768
    assert BACKBONES["Qwen/Qwen3-4B"].max_position_embeddings == BACKBONES["Qwen/Qwen3-8B"].max_position_embeddings
    e4b = BACKBONES["google/gemma-4-E4B-it"]  # ReToolSQL's scale ablation (§6.3)
    assert (e4b.group, e4b.chat_template, e4b.max_position_embeddings) == ("gemma4_e4b", "gemma4", 131_072)
    with pytest.raises(ConfigError, match="no backbone for model group 'llama'"):
        backbone_for_group("llama")


def test_model_card_reads_a_local_config_then_the_table_then_says_it_knows_nothing(tiny_dir: Path) -> None:
    local = model_card(str(tiny_dir))
    assert (local.max_position_embeddings, local.num_attention_heads, local.num_key_value_heads) == (4096, 4, 2)
    assert local.origin.startswith("config.json at")
    hub = model_card("Qwen/Qwen3-8B")
    assert hub.known and hub.max_position_embeddings == 40960 and "backbone table" in hub.origin
    unknown = model_card("nobody/nothing")
    assert not unknown.known and unknown.origin.startswith("unknown:")


def test_long_context_directory_carries_yarn_and_the_raised_length(tiny_dir: Path, tmp_path: Path) -> None:
    from transformers import AutoConfig, AutoModelForCausalLM

    long_dir = derive_long_context_model(tiny_dir, tmp_path / "long", 4.0)
    written = json.loads((long_dir / "config.json").read_text())
    assert written["max_position_embeddings"] == 4 * 4096
    assert written["rope_scaling"] == {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}
    assert (long_dir / "model.safetensors").is_symlink()  # weights linked, not copied
    assert json.loads((tiny_dir / "config.json").read_text())["max_position_embeddings"] == 4096  # source intact
    config = AutoConfig.from_pretrained(long_dir)
    assert config.max_position_embeddings == 16384
    assert config.rope_parameters["rope_type"] == "yarn" and config.rope_parameters["factor"] == 4.0
    model = AutoModelForCausalLM.from_pretrained(long_dir).eval()
    assert model.model.rotary_emb.rope_type == "yarn"
    ids = torch.arange(8)[None] % model.config.vocab_size  # [1, 8]
    with torch.no_grad():
        assert torch.isfinite(model(input_ids=ids).logits).all()
    assert model_card(str(long_dir)).max_position_embeddings == 16384  # what the context check reads
    with pytest.raises(ConfigError, match="already scales rope"):
        derive_long_context_model(long_dir, tmp_path / "longer", 2.0)
    with pytest.raises(ConfigError, match="must be > 1"):
        derive_long_context_model(tiny_dir, tmp_path / "same", 1.0)
    with pytest.raises(ConfigError, match="needs a local model directory"):
        derive_long_context_model(tmp_path / "missing", tmp_path / "x", 2.0)
