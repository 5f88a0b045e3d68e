"""``python -m training.export``: real FSDP checkpoints (veRL's ``FSDPCheckpointManager`` on an
FSDP2-wrapped tiny model, CPU, gloo, one rank; ``tests/helpers/fsdp_checkpoint.py``) merged
by veRL's own model merger into a HF directory that transformers and ``eval.run`` load; and a
local-engine checkpoint exported by hard links.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=str(REPO), WANDB_MODE="offline", TOKENIZERS_PARALLELISM="false")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def run(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, *args], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{args}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def verl_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two steps saved through veRL's FSDP checkpoint manager, without HF weights (the
    merger must rebuild them from the DTensor shards)."""
    run_dir = tmp_path_factory.mktemp("export") / "run"
    run("-m", "tests.helpers.fsdp_checkpoint", str(run_dir), "--steps", "2")
    return run_dir


def test_any_saved_step_becomes_a_hf_model_through_verls_merger(verl_run: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    shard = torch.load(verl_run / "checkpoints/global_step_1/actor/model_world_size_1_rank_0.pt", weights_only=False)
    assert type(next(iter(shard.values()))).__name__ == "DTensor"  # FSDP's sharded layout, as on a GPU node
    out = run("-m", "training.export", str(verl_run), "step=1").stdout
    target = verl_run / "export" / "step_1"
    assert f"[export] done: {target}" in out and not (verl_run / "export" / "step_1.tmp").exists()
    model = AutoModelForCausalLM.from_pretrained(target)
    expected = torch.load(verl_run / "expected_step_1.pt")
    exported = model.state_dict()
    assert model.dtype == torch.bfloat16  # veRL's merger writes bf16
    for key, value in expected.items():
        assert torch.equal(exported[key], value.to(torch.bfloat16)), key
    later = torch.load(verl_run / "expected_step_2.pt")
    assert any(not torch.equal(later[k], expected[k]) for k in expected)  # step 1 is not just the newest
    tokenizer = AutoTokenizer.from_pretrained(target)
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert prompt == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert (target / "generation_config.json").is_file()


def test_the_newest_step_by_default_and_a_missing_step_named(verl_run: Path, tmp_path: Path) -> None:
    from tools.errors import ConfigError
    from training.export import export_step

    said: list[str] = []
    path = export_step(verl_run, out=tmp_path / "newest", say=said.append)
    assert "step 2" in said[0] and (path / "model.safetensors").is_file()
    with pytest.raises(ConfigError, match=r"no complete checkpoint of step 7; saved steps with weights: 1, 2"):
        export_step(verl_run, step=7)
    bad = subprocess.run(
        [sys.executable, "-m", "training.export", str(verl_run), "step=x"],
        env=ENV,
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert bad.returncode == 2 and "step='x': expected a step number" in bad.stderr


def test_eval_run_loads_the_exported_model(verl_run: Path, tmp_path: Path) -> None:
    target = verl_run / "export" / "step_1"
    if not target.is_dir():
        run("-m", "training.export", str(verl_run), "step=1")
    out = run(
        "-m",
        "eval.run",
        "recipe=trustsql",
        f"model.path={target}",
        "eval.limit=2",
        "rollout.max_new_tokens=8",
        "rollout.max_response_tokens=64",
        cwd=tmp_path,
    ).stdout
    assert f"[model] loading {target}" in out and "on 2 questions" in out


def test_a_local_run_exports_by_hard_links(tmp_path: Path) -> None:
    from tests.helpers.tiny_model import tiny_model, tiny_tokenizer
    from training.engines.local import state as st
    from training.export import export_step

    model = tiny_model()
    optimizer = torch.optim.AdamW(model.parameters())
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _s: 1.0)
    for step in (1, 2):
        st.save_checkpoint(
            tmp_path,
            st.CheckpointMeta(step=step, sampler={}),
            model,
            optimizer,
            scheduler,
            keep=2,
            tokenizer=tiny_tokenizer(),
        )
    target = export_step(tmp_path, step=1, say=lambda _line: None)
    source = tmp_path / "checkpoints" / "step_000001" / "model.safetensors"
    assert os.path.samefile(target / "model.safetensors", source)  # no second copy on disk
    assert not (target / "trainer_state.pt").exists() and not (target / "meta.json").exists()
    from transformers import AutoModelForCausalLM

    assert AutoModelForCausalLM.from_pretrained(target).config.hidden_size == 64


@pytest.fixture(scope="module")
def verl_lora_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One step of a LoRA model (PEFT, veRL's FSDP engine's wrapping) saved through veRL's
    FSDP checkpoint manager, with veRL's ``hf_model`` copy (which keeps PEFT's names)."""
    run_dir = tmp_path_factory.mktemp("export_lora") / "run"
    run("-m", "tests.helpers.fsdp_checkpoint", str(run_dir), "--steps", "1", "--lora", "4", "--hf")
    return run_dir


def merged_by_hand(state: dict[str, torch.Tensor], scale: float) -> dict[str, torch.Tensor]:
    """W + scale * B A for every adapted layer of a PEFT state dict, in fp32, under the plain model's names."""
    out = {}
    for key, value in state.items():
        if ".lora_" in key:
            continue
        name = key.removeprefix("base_model.model.").replace(".base_layer.", ".")
        if ".base_layer.weight" in key:
            stem = key.removesuffix("base_layer.weight")
            value = value + scale * state[f"{stem}lora_B.default.weight"] @ state[f"{stem}lora_A.default.weight"]
        out[name] = value
    return out


def test_a_lora_checkpoint_exports_a_plain_model_with_the_adapter_merged(verl_lora_run: Path) -> None:
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from training.export import export_verl_actor

    actor = verl_lora_run / "checkpoints/global_step_1/actor"
    assert json.loads((actor / "lora_train_meta.json").read_text()) == {
        "r": 4,
        "lora_alpha": 8,
        "task_type": "CAUSAL_LM",
    }
    verl_copy = load_file(str(actor / "huggingface/model.safetensors"))
    assert any(k.startswith("base_model.model.") for k in verl_copy)  # veRL's hf_model copy: PEFT's names
    out = run("-m", "training.export", str(verl_lora_run)).stdout
    target = verl_lora_run / "export" / "step_1"
    assert "LoRA: the adapter merged into the weights" in out and f"[export] done: {target}" in out
    # what vLLM and eval.run load: a plain HF directory, the base model's tensor names, no adapter
    assert sorted(p.name for p in target.iterdir() if p.is_dir()) == []
    assert not (target / "adapter_config.json").exists()
    base = load_file(str(verl_lora_run / "policy" / "model.safetensors"))
    assert load_file(str(target / "model.safetensors")).keys() == base.keys()
    exported = AutoModelForCausalLM.from_pretrained(target).state_dict()
    expected = merged_by_hand(torch.load(verl_lora_run / "expected_step_1.pt"), scale=8 / 4)
    adapted = [k for k in base if k.endswith("q_proj.weight") or k.endswith("down_proj.weight")]
    for key in adapted:
        moved = (expected[key] - base[key].float()).abs().max()
        error = (exported[key].float() - expected[key]).abs().max()
        assert error < 0.1 * moved, (key, float(error), float(moved))  # bf16 rounding, far below the update
    for key in ("model.embed_tokens.weight", "model.norm.weight"):  # not adapted, not trained
        assert torch.equal(exported[key], expected[key].to(torch.bfloat16))
    final = export_verl_actor(actor, verl_lora_run / "final")  # what the trainer's final/ does
    assert load_file(str(final / "model.safetensors")).keys() == base.keys()
    eval_out = run(
        "-m",
        "eval.run",
        "recipe=trustsql",
        f"model.path={target}",
        "eval.limit=1",
        "rollout.max_new_tokens=8",
        "rollout.max_response_tokens=64",
        cwd=verl_lora_run.parent,
    ).stdout
    assert f"[model] loading {target}" in eval_out and "on 1 questions" in eval_out
