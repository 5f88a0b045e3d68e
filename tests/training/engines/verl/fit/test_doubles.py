"""The doubles behave like the parts they replace (veRL 0.9.1's vLLM server and FSDP worker).

In-process, no Ray: the server class is the Ray actor's own class. The worker group gets
a veRL config from the verl engine's real mapping (Think2SQL, tiny model).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import torch
from verl.utils import tensordict_utils as tu

from tests.helpers.agent_scripts import THINK2SQL
from tests.helpers.process_group import one_rank_process_group
from tests.training.engines.verl.fit import harness as H
from tests.training.engines.verl.fit.fsdp_double import TinyActorWorkerGroup, sequence_logprobs, weights_changed
from tests.training.engines.verl.fit.vllm_double import TinyServer, server_args

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Any:
    import torch.distributed as dist

    root = tmp_path_factory.mktemp("doubles")
    train, val = H.examples(root, "think2sql", n_train=2, n_val=1)
    cfg = H.verl_config(
        "think2sql",
        root / "run",
        H.tiny_model_dir(root),
        train,
        val,
        [
            "algorithm.group_size=2",
            "algorithm.batch_size=2",
            "optim.lr=1e-2",
            "optim.weight_decay=0.0",
            "optim.warmup_ratio=0.0",
            "rollout.max_prompt_tokens=64",
            "rollout.max_response_tokens=32",
            "logger=[]",
        ],
    )
    one_rank_process_group()
    yield H.with_changes(cfg, {"actor_rollout_ref.actor.optim.total_training_steps": 10})
    dist.destroy_process_group()


def make_server(config: Any, writers: dict[str, str]) -> Any:
    server = TinyServer.__ray_actor_class__()
    server.reset(*server_args(config), THINK2SQL, writers)
    return server


def generate(server: Any, prompt: list[int], **params: Any) -> Any:
    return asyncio.run(server.generate(prompt_ids=prompt, sampling_params=params, request_id="u-0"))


def test_server_follows_vllm_rules(config: Any) -> None:
    group = TinyActorWorkerGroup(config, dp_size=2)
    server = make_server(config, {"0": "script"})
    prompt = group.tokenizer.encode("<|im_start|>user\nHow many?<|im_end|>\n<|im_start|>assistant\n")
    with pytest.raises(RuntimeError, match="sleeping"):
        generate(server, prompt, max_tokens=8)
    server.update_weights(group.state_dict(), 7)
    out = generate(server, prompt, max_tokens=200, temperature=1.0, logprobs=True, stop=["</answer>"])
    text = group.tokenizer.decode(out.token_ids)
    assert text.endswith("</answer>")  # stopped at the stop string, its tokens kept, no EOS after it
    assert out.stop_reason == "completed" and out.extra_fields["global_steps"] == 7
    assert len(out.log_probs) == len(out.token_ids)
    full = generate(server, prompt, max_tokens=200, temperature=1.0, logprobs=False)
    assert full.token_ids[-1] == group.tokenizer.eos_token_id and full.log_probs is None  # EOS kept
    room = int(config.actor_rollout_ref.rollout.max_model_len)
    clamped = generate(server, [prompt[0]] * (room - 3), max_tokens=50)
    assert len(clamped.token_ids) == 3  # max_tokens clamped to the context left
    with pytest.raises(ValueError, match="leaves no room"):
        generate(server, [prompt[0]] * room, max_tokens=5)


def test_sampled_log_probs_are_the_synced_weights(config: Any) -> None:
    """After ``update_weights`` the server's log-probs are the worker's log-probs of the same
    tokens at the rollout temperature (what makes veRL's rollout/old log-prob diff 0)."""
    group = TinyActorWorkerGroup(config, dp_size=2)
    with torch.no_grad():
        for p in group.model.parameters():
            p.add_(0.05 * torch.randn_like(p))  # a policy other than the initial one
    server = make_server(config, {"0": "sample"})
    server.update_weights(group.state_dict(), 1)
    prompt = group.tokenizer.encode("<|im_start|>user\nList schools<|im_end|>\n<|im_start|>assistant\n")
    out = generate(server, prompt, max_tokens=12, temperature=0.7, top_p=1.0, logprobs=True)
    ids = torch.tensor(prompt + out.token_ids)
    with torch.no_grad():
        actor, _ = sequence_logprobs(group.model, ids, 0.7)
    response = actor[len(prompt) - 1 : len(ids) - 1]  # position t holds token t+1
    torch.testing.assert_close(torch.tensor(out.log_probs), response, atol=1e-4, rtol=1e-4)


def batch(group: TinyActorWorkerGroup, n: int, advantage: float) -> Any:
    """``n`` rows as TransferQueue hands them to the worker (nested per row)."""
    rows = []
    for i in range(n):
        prompt = torch.tensor(group.tokenizer.encode(f"<|im_start|>user\nq{i}<|im_end|>\n<|im_start|>assistant\n"))
        response = torch.tensor(group.tokenizer.encode("SELECT name FROM schools;"))
        ids = torch.cat([prompt, response])
        with torch.no_grad():
            old, _ = sequence_logprobs(group.model, ids, 1.0)
        rows.append(
            {
                "input_ids": ids,
                "prompts": prompt,
                "responses": response,
                "response_mask": torch.ones(len(response), dtype=torch.int64),
                "loss_mask": torch.ones(len(response), dtype=torch.int64),
                "old_log_probs": old[len(prompt) - 1 : len(ids) - 1],
                "advantages": torch.full((len(response),), advantage),
            }
        )
    data = tu.list_of_dict_to_tensordict(rows)
    tu.assign_non_tensor(
        data,
        temperature=1.0,
        calculate_entropy=False,
        epochs=1,
        seed=1,
        dataloader_kwargs={"shuffle": False},
        global_batch_size=n,
    )
    return data


def test_update_splits_and_asserts_mini_batches_as_veRL_does(config: Any) -> None:
    group = TinyActorWorkerGroup(config, dp_size=2)
    data = batch(group, 8, 1.0)
    tu.assign_non_tensor(data, mini_batch_size=3)
    with pytest.raises(AssertionError, match="mini_batch_size=3"):
        group._train_mini_batch(data)
    before = group.state_dict()
    data = batch(group, 8, 1.0)
    tu.assign_non_tensor(data, mini_batch_size=4)
    out = group._train_mini_batch(data)
    assert group.updates[-1]["optimizer_steps"] == 2  # 8 rows / 4 per optimizer step
    assert len(out["metrics"]["grad_norm"]) == 2 and out["metrics"]["lr"]  # scheduler stepped once, at the end
    assert weights_changed(before, group.state_dict()) > 0


def test_zero_advantage_leaves_the_weights_unchanged(config: Any) -> None:
    group = TinyActorWorkerGroup(config, dp_size=2)
    before = group.state_dict()
    data = batch(group, 4, 0.0)
    tu.assign_non_tensor(data, mini_batch_size=4)
    group._train_mini_batch(data)
    assert group.updates[-1]["optimizer_steps"] == 1
    assert weights_changed(before, group.state_dict()) == 0.0


def test_checkpoint_layout_and_round_trip(config: Any, tmp_path: Path) -> None:
    group = TinyActorWorkerGroup(config, dp_size=2)
    data = batch(group, 4, 1.0)
    tu.assign_non_tensor(data, mini_batch_size=4)
    group._train_mini_batch(data)
    group.save_checkpoint(str(tmp_path / "global_step_1" / "actor"), global_step=1)
    actor = tmp_path / "global_step_1" / "actor"
    names = {p.name for p in actor.iterdir()}
    assert {
        "model_world_size_1_rank_0.pt",
        "optim_world_size_1_rank_0.pt",
        "extra_state_world_size_1_rank_0.pt",
        "fsdp_config.json",
        "huggingface",
    } <= names
    other = TinyActorWorkerGroup(config, dp_size=2)
    other.load_checkpoint(str(actor))
    assert weights_changed(group.state_dict(), other.state_dict()) == 0.0
    assert other.lr_scheduler.state_dict() == group.lr_scheduler.state_dict()
