"""``python -m training.preflight``: each check on facts shaped like a GPU node's, the real
gatherer on this CPU machine, and the chat-template check on real tokenizers."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from training.engines.verl.checks.chat_golden import GOLDEN
from training.engines.verl.checks.node import Context, gather_facts, run_checks, template_family

H100 = 85_520_809_984  # torch.cuda.get_device_properties(i).total_memory of an H100 80GB HBM3
QWEN3_CONFIG = {  # the fields of Qwen/Qwen3-8B's config.json the table cites
    "architectures": ["Qwen3ForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 12288,
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "tie_word_embeddings": False,
}
CTX = Context(
    model="Qwen/Qwen3-8B",
    hardware="h100x8",
    gpus_per_node=8,
    gpu_memory_gib=79.6,
    nnodes=2,
    attention="flash_attention_2",
    run_dir="/shared/runs/dualsql",
)


def gpu_node() -> dict:
    """What gather_facts returns on a healthy 8x H100 node (the real gatherer's keys)."""
    family = "chatml (qwen3, <think>)"
    return {
        "torch": {
            "version": "2.11.0+cu130",
            "cuda": "13.0",
            "cuda_available": True,
            "devices": [{"name": "NVIDIA H100 80GB HBM3", "total_memory": H100, "major": 9, "minor": 0}] * 8,
        },
        "driver": "580.82.07",
        "packages": {"torch": "2.11.0", "verl": "0.9.1", "vllm": "0.24.0", "flash_attn": "2.8.3"},
        "pins": {"verl": "0.9.1", "vllm": "0.24.0", "flash_attn": "2.8.3"},
        "model_config": {"where": "/models/Qwen3-8B", "config": dict(QWEN3_CONFIG)},
        "chat": {"template": "{{ enable_thinking }} <|im_start|>", "renders": dict(GOLDEN[family])},
        "run_dir_fs": {"path": "/shared/runs/dualsql", "mount": "/shared", "fstype": "nfs4"},
    }


def verdicts(facts: dict, ctx: Context = CTX) -> dict[str, tuple[str, str]]:
    return {c.name: (c.status, c.detail) for c in run_checks(facts, ctx)}


def test_a_healthy_gpu_node_passes_every_check() -> None:
    assert {name: status for name, (status, _) in verdicts(gpu_node()).items()} == {
        "cuda runtime": "OK",
        "driver": "OK",
        "gpus": "OK",
        "gpu memory": "OK",
        "flash-attn": "OK",
        "veRL": "OK",
        "vLLM": "OK",
        "backbone config": "OK",
        "chat template": "OK",
        "shared storage": "OK",
    }


@pytest.mark.parametrize(
    ("path", "value", "check", "says"),
    [
        (("torch", "cuda"), None, "cuda runtime", "is a CPU build"),
        (("driver",), "535.104.05", "driver", "driver 535.104.05 is older than CUDA 13.0 needs (>= 580.65.06)"),
        (("driver",), None, "driver", "no NVIDIA driver found"),
        (
            ("torch", "devices"),
            [{"name": "NVIDIA H100 80GB HBM3", "total_memory": H100, "major": 9, "minor": 0}] * 4,
            "gpus",
            "4 GPU(s) visible, hardware=h100x8 wants 8 per node",
        ),
        (
            ("torch", "devices"),
            [{"name": "NVIDIA A100-SXM4-40GB", "total_memory": 42_505_273_344, "major": 8, "minor": 0}] * 8,
            "gpu memory",
            "has 39.6 GiB, hardware=h100x8 is sized for 79.6 GiB",
        ),
        (("packages", "flash_attn"), None, "flash-attn", "flash-attn is not installed"),
        (("packages", "vllm"), "0.23.1", "vLLM", "0.23.1 installed, the project pins 0.24.0"),
        (("packages", "verl"), None, "veRL", "not installed"),
        (("model_config", "config", "num_key_value_heads"), 4, "backbone config", "num_key_value_heads 8 (table) vs 4"),
        (("run_dir_fs", "fstype"), "ext4", "shared storage", "local ext4 filesystem (/shared) and 2 nodes"),
    ],
)
def test_each_failure_says_what_to_fix(path: tuple, value: object, check: str, says: str) -> None:
    facts = copy.deepcopy(gpu_node())
    node = facts
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    status, detail = verdicts(facts)[check]
    assert status == "FAIL" and says in detail


def test_a_chat_template_that_keeps_earlier_thinking_fails() -> None:
    facts = gpu_node()
    facts["chat"]["renders"]["enable_thinking=True"] = GOLDEN["chatml"]["enable_thinking=True"]
    status, detail = verdicts(facts)["chat template"]
    assert status == "FAIL" and "enable_thinking=True" in detail and "'<think>" in detail


def test_skips_say_why() -> None:
    one_node = Context(**{**CTX.__dict__, "nnodes": 1, "attention": "sdpa"})
    facts = gpu_node()
    facts["model_config"] = {"where": None, "why": "Qwen/Qwen3-8B has no config.json on this machine"}
    found = verdicts(facts, one_node)
    assert found["shared storage"][0] == found["flash-attn"][0] == found["backbone config"][0] == "SKIP"
    assert "not asked for (attention sdpa)" in found["flash-attn"][1]


def test_the_real_gatherer_runs_on_this_machine(tmp_path: Path) -> None:
    ctx = Context("nobody/not-here", "h100x8", 8, 79.6, 2, "sdpa", str(tmp_path / "run"))
    facts = gather_facts(ctx)
    assert facts["torch"]["version"] == torch.__version__ and facts["torch"]["cuda"] == torch.version.cuda
    found = verdicts(facts, ctx)
    assert len(found) == 10 and all(status in ("OK", "FAIL", "SKIP") for status, _ in found.values())
    if not torch.cuda.is_available():
        assert found["gpus"][0] == "FAIL" and "no CUDA GPU visible" in found["gpus"][1]
    assert found["backbone config"][0] == "SKIP" and found["chat template"][0] == "SKIP"
    assert facts["run_dir_fs"]["fstype"] and facts["pins"]["verl"] == "0.9.1"  # the gpu extra's pin


QWEN3_STYLE = (  # written for this test: Qwen3's rules, not its file
    "{%- set ns = namespace(last=0) -%}"
    "{%- for m in messages %}{% if m.role == 'user' %}{% set ns.last = loop.index0 %}{% endif %}{% endfor -%}"
    "{%- for m in messages -%}"
    "{%- set text = m.content -%}"
    "{%- if m.role == 'assistant' and loop.index0 < ns.last and '</think>' in text -%}"
    "{%- set text = text.split('</think>')[-1].lstrip('\\n') -%}{%- endif -%}"
    "{{ '<|im_start|>' + m.role + '\\n' + text + '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}{{ '<think>\\n\\n</think>\\n\\n' }}{%- endif -%}"
    "{%- endif -%}"
)


def test_the_chat_check_renders_a_qwen3_style_tokenizer(tmp_path: Path) -> None:
    from tests.helpers.tiny_model import tiny_tokenizer

    tokenizer = tiny_tokenizer()
    tokenizer.chat_template = QWEN3_STYLE
    tokenizer.save_pretrained(tmp_path / "qwen3ish")
    ctx = Context(str(tmp_path / "qwen3ish"), "cpu", None, None, 1, "sdpa", str(tmp_path))
    facts = gather_facts(ctx)
    assert template_family(facts["chat"]["template"]) == "chatml (qwen3, <think>)"
    assert verdicts(facts, ctx)["chat template"][0] == "OK"
    tokenizer.chat_template = QWEN3_STYLE.replace("loop.index0 < ns.last and", "false and")  # keeps old thinking
    tokenizer.save_pretrained(tmp_path / "keeps")
    ctx = Context(str(tmp_path / "keeps"), "cpu", None, None, 1, "sdpa", str(tmp_path))
    assert verdicts(gather_facts(ctx), ctx)["chat template"][0] == "FAIL"


@pytest.mark.slow  # on a fresh machine it converts the embedded model first (test files run in parallel)
def test_the_embedded_models_template_matches_its_golden_prompt() -> None:
    from training.generation.loading import ensure_embedded_checkpoint

    where = ensure_embedded_checkpoint(say=lambda _: None)
    ctx = Context(str(where), "cpu", None, None, 1, "sdpa", str(where))
    status, detail = verdicts(gather_facts(ctx), ctx)["chat template"]
    assert (status, detail.split(":")[0]) == ("OK", "chatml")


@pytest.mark.slow
def test_the_command_prints_one_line_per_check_and_exits_1_on_a_failure(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "training.preflight",
            "recipe=trustsql",
            "hardware=h100x8",
            f"run_dir={tmp_path / 'run'}",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    lines = [line for line in done.stdout.splitlines() if line[:4] in ("OK  ", "FAIL", "SKIP")]
    assert len(lines) == 10, done.stdout + done.stderr
    if not torch.cuda.is_available():
        assert done.returncode == 1 and "FAIL  gpus: no CUDA GPU visible" in done.stdout
