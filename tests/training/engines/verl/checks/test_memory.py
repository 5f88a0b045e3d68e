"""The hardware group, the memory estimate (against a hand computation), its refusals, the
in-flight episode check and the agent loop's cap, through the real dry-run path (CPU)."""

from __future__ import annotations

import asyncio

import pytest

from tools.errors import ConfigError
from training.config import TrainConfig, compose_tree, list_recipes
from training.engines.verl import launch as L
from training.engines.verl.checks.backbones import BACKBONES
from training.engines.verl.checks.memory import (
    GIB,
    InFlight,
    Knobs,
    estimate,
    failures,
    in_flight_failures,
    kv_bytes,
    parameter_count,
)
from training.engines.verl.config import translate as C
from training.engines.verl.workers.agent_loop import episode_slot

HARDWARE = ("cpu", "gpu1", "h100x8", "h200x8")


def project_config(recipe: str, *overrides: str) -> TrainConfig:
    return TrainConfig.from_mapping(compose_tree("config", [f"recipe={recipe}", "engine=verl", *overrides]))


def test_qwen3_8b_estimate_matches_the_hand_computation() -> None:
    """Qwen3-8B's config.json numbers: hidden 4096, intermediate 12288, 36 layers, 32 heads,
    8 KV heads, head_dim 128, vocab 151936, untied embeddings; 8 GPUs, 20,480 tokens per GPU."""
    arch = BACKBONES["Qwen/Qwen3-8B"].arch
    # per layer: q 4096*32*128 + k,v 2*4096*8*128 + o 32*128*4096 + MLP 3*4096*12288
    layer = 16_777_216 + 8_388_608 + 16_777_216 + 150_994_944  # = 192,937,984
    embeddings = 2 * 151_936 * 4096  # embed_tokens + lm_head = 1,244,659,712
    params = 36 * layer + embeddings  # 8,190,427,136 (the card: 8.2B)
    assert parameter_count(arch) == params == 8_190_427_136
    k = Knobs(
        gpus=8,
        tp=1,
        sp=2,
        ppo_tokens=20_480,
        log_prob_tokens=20_480,
        max_model_len=40_960,
        gradient_checkpointing=True,
        entropy_chunk=2048,
        entropy_in_update=False,
        param_offload=False,
        optimizer_offload=False,
        gpu_memory_utilization=0.7,
        max_num_seqs=256,
        max_num_batched_tokens=8192,
        attention="flash_attention_2",
    )
    e = estimate(arch, k, int(79.6 * GIB))
    shard = -(-params // 8)  # 1,023,803,392 parameters per GPU
    assert (e.weights, e.grads, e.optimizer) == (4 * shard, 4 * shard, 8 * shard)
    # checkpointed layer inputs 36 * 4096 bf16 per token, plus one layer recomputed with its
    # gradients: 2 * (3*4096 + 2*4096 + 2*1024 + 4*12288 = 71,680 values) per token
    assert e.activations == 20_480 * (36 * 4096 * 2 + 2 * 71_680 * 2)  # 11.1 GiB
    # flash-attn's cross-entropy: bf16 logits and their gradient only
    assert e.logits == 2 * 20_480 * 151_936 * 2  # 11.6 GiB
    assert e.mask == 0
    # KV: 36 layers * (K + V) * 8 heads * 128 * bf16 = 147,456 bytes per token at TP 1
    assert kv_bytes(arch, 40_960, 1) == 40_960 * 147_456 == e.kv_per_sequence
    assert e.vllm_weights == params * 2
    assert e.kv_cache == int(0.7 * int(79.6 * GIB)) - params * 2 - e.vllm_overhead
    assert failures(e, k, int(79.6 * GIB)) == []


def test_a_config_that_cannot_fit_is_refused_with_what_to_change() -> None:
    cfg = project_config("retoolsql", "hardware=h100x8")  # Gemma 4 31B: 57 GiB of sharded state on 8 GPUs
    with pytest.raises(ConfigError, match=r"actor update needs ~\d+\.\d GiB per GPU, over 71\.6 GiB usable.*add GPUs"):
        L.describe(cfg)
    text = L.describe(
        project_config("retoolsql", "hardware=h100x8", "hardware.nnodes=2", "trainer.shared_run_dir_check=false")
    )
    assert "# sizing: update, per GPU of 79.6 GiB" in text and "16 GPU(s)" in text
    with pytest.raises(ConfigError, match=r"vLLM refuses to start\. Set hardware\.param_offload=true"):
        L.describe(
            project_config(
                "retoolsql",
                "hardware=h200x8",
                "hardware.param_offload=false",
                "hardware.optimizer_offload=false",
                "hardware.gpu_memory_utilization=0.8",
            )
        )
    with pytest.raises(ConfigError, match=r"cannot hold one 40960-token sequence"):
        L.describe(project_config("dualsql", "hardware=h100x8", "hardware.gpu_memory_utilization=0.25"))


def test_the_hardware_row_reaches_verl() -> None:
    verl = C.verl_config_for(project_config("dualsql", "hardware=h100x8"), num_train_examples=660)
    arr = verl.actor_rollout_ref
    assert arr.actor.fsdp_config.ulysses_sequence_parallel_size == 2 == arr.actor.ulysses_sequence_parallel_size
    assert arr.actor.ppo_max_token_len_per_gpu == 20_480  # 40,960 over the Ulysses pair
    assert arr.rollout.log_prob_max_token_len_per_gpu == 20_480 == arr.ref.log_prob_max_token_len_per_gpu
    assert arr.model.override_config.attn_implementation == "flash_attention_2"
    assert arr.rollout.gpu_memory_utilization == pytest.approx(0.7) and arr.rollout.max_num_seqs == 256
    assert arr.actor.entropy_from_logits_with_chunking and arr.model.enable_gradient_checkpointing
    assert verl.trainer.n_gpus_per_node == 8
    override = C.verl_config_for(
        project_config("dualsql", "hardware=h200x8", "hardware.tokens_per_gpu=50000"), num_train_examples=660
    )
    assert override.actor_rollout_ref.actor.ppo_max_token_len_per_gpu == 50_000
    plain = C.verl_config_for(project_config("dualsql"), num_train_examples=660)  # hardware=cpu: generic sizes
    with pytest.raises(ConfigError, match=r"hardware=cpu sizes nothing, so \['ulysses_sp'\] would be ignored"):
        project_config("dualsql", "hardware.ulysses_sp=2")
    assert (
        plain.actor_rollout_ref.rollout.max_num_seqs == 256
        and plain.actor_rollout_ref.rollout.gpu_memory_utilization == 0.6
    )


def test_episodes_in_flight_are_capped_to_vllm_slots_or_refused() -> None:
    # ReToolSQL: B=12 x K=12 x G=16 = 2,304 episodes; h200x8 runs Gemma at TP 2: 4 replicas x 256 = 1,024 slots
    verl = C.verl_config_for(project_config("retoolsql", "hardware=h200x8"), num_train_examples=660)
    flight = InFlight.from_verl(verl)
    assert (flight.episodes, flight.slots, flight.workers) == (12 * 12 * 16, 4 * 256, 8)
    assert verl.sqlagent.max_concurrent_episodes == 1024 // 8 and flight.live == 1024
    assert in_flight_failures(flight) == []
    assert (
        C.verl_config_for(
            project_config("trustsql", "hardware=h200x8"), num_train_examples=660
        ).sqlagent.max_concurrent_episodes
        is None
    )  # 128 fit 2,048 slots
    with pytest.raises(
        ConfigError,
        match=r"8 agent-loop workers x sqlagent.max_concurrent_episodes 200 = 1600 live "
        r"episodes exceed .*1024 slots: set \+verl.sqlagent.max_concurrent_episodes=128",
    ):
        L.describe(project_config("retoolsql", "hardware=h200x8", "+verl.sqlagent.max_concurrent_episodes=200"))
    uncapped = InFlight(questions=144, group_size=16, workers=8, per_worker_cap=None, replicas=2, max_num_seqs=256)
    (message,) = in_flight_failures(uncapped)
    assert "144 questions x G=16 = 2304 episodes in flight exceed vLLM's 2 replica(s) x max_num_seqs 256" in message
    assert "algorithm.dynamic_sampling.oversample" in message
    text = L.describe(project_config("retoolsql"))  # hardware=cpu enforces nothing, says what a GPU run would
    assert "note (hardware=cpu, not enforced): 144 questions x G=16 = 2304 episodes" in text


def test_the_agent_loop_keeps_at_most_cap_episodes_live() -> None:
    live, most = 0, 0

    async def episode() -> None:
        nonlocal live, most
        async with episode_slot(3):
            live += 1
            most = max(most, live)
            await asyncio.sleep(0.001)
            live -= 1

    async def step() -> None:
        await asyncio.gather(*(episode() for _ in range(20)))

    asyncio.run(step())
    assert most == 3


@pytest.mark.parametrize("hardware", HARDWARE)
@pytest.mark.parametrize("recipe", list_recipes())
def test_every_recipe_and_hardware_composes_in_dry_run(recipe: str, hardware: str) -> None:
    cfg = project_config(recipe, f"hardware={hardware}")
    refused = hardware == "gpu1" or (hardware, recipe) == ("h100x8", "retoolsql")  # the backbone does not fit
    if refused:
        with pytest.raises(ConfigError, match="per GPU"):
            L.describe(cfg)
        return
    text = L.describe(cfg)
    assert f"# sizing: hardware={hardware}: episodes in flight" in text
    assert "# sizing: update, per GPU" in text and "KV" in text


def test_gemma4_e4b_counts_its_per_layer_embeddings() -> None:
    """Gemma 4 E4B (ReToolSQL §6.3, §6.4): 35 sliding layers (q 2560*8*256, k+v 2*2560*2*256,
    o, MLP 3*2560*10240) and 7 global ones (head_dim 512), the tied embedding, and the
    per-layer embeddings 262,144 x 42 x 256 that config.json's hidden_size_per_layer_input adds."""
    from training.engines.verl.checks.backbones import Architecture

    arch = BACKBONES["google/gemma-4-E4B-it"].arch
    sliding = 5_242_880 + 2_621_440 + 5_242_880 + 78_643_200
    global_ = 10_485_760 + 5_242_880 + 10_485_760 + 78_643_200
    per_layer = 262_144 * 42 * 256
    assert parameter_count(arch) == 35 * sliding + 7 * global_ + 262_144 * 2560 + per_layer == 7_434_928_128
    text = {
        "hidden_size": 2560,
        "intermediate_size": 10240,
        "num_hidden_layers": 42,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "head_dim": 256,
        "vocab_size": 262_144,
        "tie_word_embeddings": True,
        "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 7,
        "sliding_window": 512,
        "num_global_key_value_heads": 2,
        "global_head_dim": 512,
        "hidden_size_per_layer_input": 256,
        "vocab_size_per_layer_input": 262_144,
    }
    assert Architecture.from_config({"text_config": text}) == arch
    assert parameter_count(BACKBONES["Qwen/Qwen3-4B"].arch) == 4_022_272_000  # the card: 4.0B


@pytest.mark.parametrize("hardware", ("h100x8", "h200x8"))
@pytest.mark.parametrize("recipe,model", [("retoolsql", "gemma4_e4b"), ("dualsql", "qwen3_4b")])
def test_the_papers_smaller_backbones_fit_one_node(recipe: str, model: str, hardware: str) -> None:
    """ReToolSQL's E4B and DualSQL-4B are sized from the backbone table on both GPU nodes."""
    cfg = project_config(recipe, f"model={model}", f"hardware={hardware}")
    text = L.describe(cfg)
    assert f"backbone table (huggingface.co/{cfg.model.path} config.json" in text
    assert "# sizing: update, per GPU" in text and "# sizing: rollout, per GPU" in text
