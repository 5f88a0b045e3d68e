"""veRL + vLLM smoke run on a real GPU node: two GRPO steps of every recipe, then a resume.

Skipped unless CUDA GPUs, vLLM and Ray are present. The CPU tier (tests/training/engines/verl)
runs veRL's real ``fit()`` with doubles for the FSDP workers and the vLLM server; what
only this test shows is the real parts: Ray placement groups, the FSDP actor loading the
model with the configured attention (sdpa by default), the checkpoint engine syncing
weights into vLLM, the vLLM server answering our agent loop's token requests (stop
strings, per-turn ``max_tokens``, log-probs), and veRL's checkpoints on disk; with LoRA
(:func:`test_lora_two_steps_then_resume`), PEFT under FSDP and vLLM serving the adapter;
under the async trainers (:func:`test_async_three_steps_then_resume`), vLLM's real
``pause_generation`` cutting requests at an update, the weight sync to a standalone rollout
pool (``separate_async``), and a resume from a checkpoint that holds prompts in flight.

Per recipe it checks: the run exits 0; the project-format ``metrics.jsonl`` (records
``{"step", "kind", "time", ...}`` written by the trainer subclass) has a train record per
step; veRL's own ``verl_metrics.jsonl`` (its ``{"step", "data"}`` records) has the actor
loss and the per-role rewards; the HF weights in ``run_dir/final`` differ from the
starting weights; and ``resume=true`` with one more step continues from the last
checkpoint and keeps the earlier records.

The policy is a tiny random Qwen2 with the locally trained tokenizer (no downloads); it
writes garbage, so episodes end on format errors or budgets - which still exercises every
stage. The sizes (2 questions x G=4 = 8 rows per mini-batch) divide over 1, 2, 4 and 8
GPUs; ``tests/training/engines/verl/checks/test_rules.py`` checks them with the engine's start-up rules
on CPU. Run on a GPU node: ``pytest tests/gpu/test_verl_smoke.py -x -q``.
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

from tests.gpu.smoke_setup import SIZES, save_tiny_policy  # noqa: E402  (after the skips)
from training.config import list_recipes  # noqa: E402
from training.engines.verl.checks.backbones import BACKBONES  # noqa: E402

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[2]
ROLES = {"dualsql": ["linker", "generator"]}


def gpus_to_use() -> int:
    """The largest of 8, 4, 2, 1 that is visible (the sizes divide each)."""
    visible = torch.cuda.device_count()
    return max(n for n in (8, 4, 2, 1) if n <= visible)


@pytest.fixture(scope="module")
def tiny_policy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_policy(tmp_path_factory.mktemp("tiny_policy"))


def run(
    recipe: str, policy: Path, run_dir: Path, *extra: str, trainer_gpus: int | None = None
) -> subprocess.CompletedProcess[str]:
    cmd = [
        sys.executable,
        "-m",
        "training.run",
        f"recipe={recipe}",
        "engine=verl",
        f"model.path={policy}",
        f"run_dir={run_dir}",
        "logger=[console,jsonl]",
        *SIZES,
        *extra,
        f"+verl.trainer.n_gpus_per_node={trainer_gpus or gpus_to_use()}",
        "+verl.actor_rollout_ref.rollout.gpu_memory_utilization=0.3",
        "+verl.actor_rollout_ref.rollout.agent.num_workers=1",
        "+verl.reward.num_workers=1",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO), "WANDB_MODE": "offline"}
    proc = subprocess.run(cmd, cwd=run_dir.parent, env=env, capture_output=True, text=True, check=False, timeout=2400)
    assert proc.returncode == 0, (proc.stdout[-4000:], proc.stderr[-4000:])
    return proc


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def safetensors_weights(directory: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    out: dict[str, torch.Tensor] = {}
    for file in sorted(directory.glob("*.safetensors")):
        out.update(load_file(str(file)))
    assert out, f"no safetensors in {directory}"
    return out


@pytest.mark.parametrize("recipe", list_recipes())
def test_two_steps_then_resume(recipe: str, tiny_policy: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run(recipe, tiny_policy, run_dir, "trainer.total_steps=2")

    project = records(run_dir / "metrics.jsonl")  # the project's format
    train = {r["step"]: r for r in project if r.get("kind") == "train"}
    assert sorted(train) == [1, 2], project[-3:]
    assert all("reward/total" in r and "ex/batch" in r for r in train.values())
    verl = [r for r in records(run_dir / "verl_metrics.jsonl") if r.get("step") == 2]  # veRL's own format
    assert verl, "veRL's file logger wrote no step-2 record"
    data = verl[-1]["data"]
    assert "actor/pg_loss" in data
    for role in ROLES.get(recipe, ["agent"]):
        assert f"sqlagent/{role}/reward/mean" in data
    if recipe == "trustsql":
        assert "sqlagent/schema_track/token_fraction" in data

    final = run_dir / "final"  # trainer.save_weights: the HF weights of the last step
    before, after = safetensors_weights(tiny_policy), safetensors_weights(final)
    assert before.keys() == after.keys()
    assert any(not torch.equal(before[k], after[k].to(before[k].dtype)) for k in before), "weights did not change"

    ckpt = run_dir / "checkpoints"
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    proc = run(recipe, tiny_policy, run_dir, "trainer.total_steps=3", "resume=true")
    assert "global_step_2" in proc.stdout + proc.stderr  # "[resume] continuing from .../global_step_2"
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "3"
    train = [r["step"] for r in records(run_dir / "metrics.jsonl") if r.get("kind") == "train"]
    assert train == [1, 2, 3]  # the resumed run continued at step 3 and kept the earlier records


def test_lora_two_steps_then_resume(tiny_policy: Path, tmp_path: Path) -> None:
    """``model.lora.rank=8`` on ReToolSQL (KL on: the reference is the actor with its adapter
    disabled): what the CPU tier (tests/training/engines/verl/fit/test_lora.py) cannot show -
    PEFT under FSDP on GPUs, vLLM started with LoRA enabled and serving the synced adapter,
    the KL term against the base, veRL's LoRA checkpoint, resume, and ``final/`` merged by
    the export into a plain HF directory (the base's tensor names, no adapter files)."""
    run_dir = tmp_path / "run"
    lora = ("model.lora.rank=8", "model.lora.alpha=16", "optim.lr=1e-3")  # an lr that moves the adapter in a step
    run("retoolsql", tiny_policy, run_dir, "trainer.total_steps=2", *lora)
    train = [r["step"] for r in records(run_dir / "metrics.jsonl") if r.get("kind") == "train"]
    assert train == [1, 2]
    data = [r for r in records(run_dir / "verl_metrics.jsonl") if r.get("step") == 2][-1]["data"]
    assert data["actor/kl_loss"] > 0.0  # the reference (adapter disabled) differs from the trained policy

    actor = run_dir / "checkpoints" / "global_step_2" / "actor"
    assert json.loads((actor / "lora_train_meta.json").read_text())["r"] == 8
    shard = torch.load(next(actor.glob("model_world_size_*_rank_0.pt")), weights_only=False)
    assert any(".lora_A." in key for key in shard)

    final = run_dir / "final"
    assert not (final / "adapter_config.json").exists() and not (final / "lora_adapter").exists()
    before, after = safetensors_weights(tiny_policy), safetensors_weights(final)
    assert before.keys() == after.keys()  # a plain model: what vLLM and eval.run load
    assert any(not torch.equal(before[k], after[k].to(before[k].dtype)) for k in before), "adapter not merged"

    proc = run("retoolsql", tiny_policy, run_dir, "trainer.total_steps=3", "resume=true", *lora)
    assert "global_step_2" in proc.stdout + proc.stderr
    train = [r["step"] for r in records(run_dir / "metrics.jsonl") if r.get("kind") == "train"]
    assert train == [1, 2, 3]


@pytest.mark.parametrize("mode", ["colocate_async", "separate_async"])
def test_async_three_steps_then_resume(mode: str, tiny_policy: Path, tmp_path: Path) -> None:
    """Think2SQL under veRL's async trainers at the default staleness bound (1): every step
    trains, no trained rollout lags more than one weight version (veRL's metric and the
    per-turn version tags in ``samples.jsonl``), the checkpoint keeps TransferQueue's
    prompts in flight, and ``resume=true`` goes on from it. ``separate_async`` splits the
    visible GPUs into a training half and a rollout half."""
    visible = gpus_to_use()
    extra = [f"trainer.mode={mode}"]
    trainer_gpus = visible
    if mode == "separate_async":
        if visible < 2:
            pytest.skip("separate_async needs two GPUs: one trains, one generates")
        trainer_gpus = visible // 2
        extra.append(f"trainer.rollout_gpus={visible - trainer_gpus}")
    run_dir = tmp_path / "run"
    run("think2sql", tiny_policy, run_dir, *extra, "trainer.total_steps=3", trainer_gpus=trainer_gpus)

    train = [r["step"] for r in records(run_dir / "metrics.jsonl") if r.get("kind") == "train"]
    assert train == [1, 2, 3]
    steps = {
        r["step"]: r["data"] for r in records(run_dir / "verl_metrics.jsonl") if "training/global_step" in r["data"]
    }
    assert sorted(steps) == [1, 2, 3]
    assert all(data["training/off_policy/trajectory_staleness_worst/max"] <= 1 for data in steps.values())
    samples = records(run_dir / "samples.jsonl")
    tagged = [v for s in samples for turn in s["turns"] for _, v in turn["versions"] or []]
    assert tagged, "no turn recorded the weight version that wrote it"
    assert all(s["step"] - 1 - v <= 1 for s in samples for turn in s["turns"] for _, v in turn["versions"] or [])
    assert (run_dir / "checkpoints" / "global_step_3" / "transfer_queue").is_dir()

    proc = run(
        "think2sql", tiny_policy, run_dir, *extra, "trainer.total_steps=4", "resume=true", trainer_gpus=trainer_gpus
    )
    assert "global_step_3" in proc.stdout + proc.stderr
    train = [r["step"] for r in records(run_dir / "metrics.jsonl") if r.get("kind") == "train"]
    assert train == [1, 2, 3, 4]


@pytest.mark.parametrize("hub_name", sorted(BACKBONES))
def test_backbone_table_matches_the_hub(hub_name: str) -> None:
    """The cited table the checks use, compared with the real config.json (needs the hub)."""
    from transformers import AutoConfig

    if os.environ.get("HF_HUB_OFFLINE"):
        pytest.skip("HF_HUB_OFFLINE is set")
    try:
        config = AutoConfig.from_pretrained(hub_name)
    except OSError as err:
        pytest.skip(f"hub unreachable: {err}")
    text = getattr(config, "text_config", None) or config
    row = BACKBONES[hub_name]
    assert text.max_position_embeddings == row.max_position_embeddings
    assert text.num_attention_heads == row.num_attention_heads
    assert text.num_key_value_heads == row.num_key_value_heads
    assert text.vocab_size == row.vocab_size
