"""veRL + vLLM smoke run on a real GPU node: one GRPO step of every recipe's agent.

Skipped unless CUDA GPUs, vLLM and Ray are present (the CPU tier covers config,
plugin, agent loop and advantage step; see tests/training/verl). What only this test
shows: the vLLM server answers our agent loop's token requests (stop strings,
per-turn ``max_tokens``, log-probs), the reward runs in the Ray worker, the
``sqlagent_sync`` trainer's advantage step and the FSDP update complete, and metrics are
written to ``run_dir/metrics.jsonl``.

The policy is the tiny random Qwen2 with the locally trained tokenizer (no downloads);
it writes garbage, so episodes end on format errors or budgets - which still exercises
every stage. Run: ``pytest tests/gpu/test_verl_smoke.py -x -q`` on a node with GPUs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs CUDA GPUs", allow_module_level=True)
pytest.importorskip("vllm")
pytest.importorskip("ray")

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny_policy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random 2-layer Qwen2 with head_dim 64 (a size every vLLM attention backend takes)
    and a 16K context (the tiny tokenizer spends ~1 token per 2-3 characters of prompt)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from tests.helpers.tiny_model import tiny_tokenizer

    tokenizer = tiny_tokenizer()
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=16384,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=True,
    )
    path = tmp_path_factory.mktemp("tiny_policy")
    tokenizer.save_pretrained(path)
    Qwen2ForCausalLM(config).save_pretrained(path)
    return path


@pytest.mark.parametrize("recipe", ["trustsql", "dualsql"])
def test_one_verl_step(recipe: str, tiny_policy: Path, tmp_path: Path) -> None:
    gpus = torch.cuda.device_count()
    run_dir = tmp_path / "run"
    cmd = [
        sys.executable, "-m", "training.run", f"recipe={recipe}", "engine=verl",
        f"model.path={tiny_policy}", f"run_dir={run_dir}", "logger=[console,jsonl]",
        "algorithm.group_size=2", "algorithm.batch_size=2", "trainer.total_steps=1",
        "trainer.eval_before_after=false", "data.limit=4", "data.eval_limit=2",
        "rollout.max_new_tokens=64", "rollout.max_response_tokens=1024", "rollout.max_prompt_tokens=12288",
        f"+verl.trainer.n_gpus_per_node={gpus}",
        "+verl.actor_rollout_ref.rollout.gpu_memory_utilization=0.3",
        "+verl.actor_rollout_ref.rollout.agent.num_workers=1",
        "+verl.reward.num_workers=1",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO), "WANDB_MODE": "offline"}
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, check=False, timeout=1800)
    assert proc.returncode == 0, (proc.stdout[-4000:], proc.stderr[-4000:])
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    steps = [x["data"] for x in lines if x.get("step") == 1]
    assert steps, lines[-3:]
    step = steps[-1]
    assert "actor/pg_loss" in step
    roles = ["agent"] if recipe == "trustsql" else ["linker", "generator"]
    for role in roles:
        assert f"sqlagent/{role}/reward/mean" in step
    if recipe == "trustsql":
        assert "sqlagent/schema_track/token_fraction" in step
