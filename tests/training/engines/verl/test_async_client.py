"""The async trainers' LLM client (``async_trainers.VersionedAsyncClient``, veRL's
partial-rollout client) through the agent loop's generate adapter, with a fake load
balancer and server: an aborted request is sent again with its tokens so far, and the
weight versions of each call and turn reach the episode record."""

from __future__ import annotations

import asyncio
from typing import Any

from training.engines.verl.workers import agent_loop as L
from training.rollout import SamplingParams


def test_a_turn_cut_by_an_update_records_which_version_wrote_which_tokens() -> None:
    """The async trainers' client (veRL's partial-rollout client) sends an aborted request
    again with its tokens so far; the turn's tokens are the two answers joined, and the
    episode record gets ``[[tokens, version], ...]`` for the turn."""
    from omegaconf import OmegaConf
    from verl.workers.rollout.replica import TokenOutput

    from training.engines.verl.workers.async_trainers import VersionedAsyncClient

    class Remote:
        def __init__(self, fn: Any) -> None:
            self.fn = fn

        def remote(self, *args: Any, **kwargs: Any) -> Any:
            async def call() -> Any:
                return self.fn(*args, **kwargs)

            return asyncio.ensure_future(call())

    class Server:
        def __init__(self) -> None:
            self.prompts: list[list[int]] = []
            self.generate = Remote(self._generate)

        def _generate(self, request_id: str, prompt_ids: list[int], sampling_params: dict, **kwargs: Any) -> Any:
            self.prompts.append(list(prompt_ids))
            if len(self.prompts) == 1:  # cut by a weight update after three tokens
                return TokenOutput(
                    token_ids=[7, 8, 9], log_probs=[-0.1] * 3, stop_reason="aborted", extra_fields={"global_steps": 4}
                )
            return TokenOutput(
                token_ids=[10, 2], log_probs=[-0.2] * 2, stop_reason="completed", extra_fields={"global_steps": 5}
            )

    server = Server()
    balancer = type(
        "Balancer",
        (),
        {
            "require_acquire_fields": Remote(lambda: []),
            "require_release_fields": Remote(lambda: []),
            "acquire_server": Remote(lambda request_id: ("s0", server)),
            "release_server": Remote(lambda server_id: None),
        },
    )()
    config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"name": "vllm", "response_length": 64}}})
    client = VersionedAsyncClient(config=config, load_balancer_handle=balancer)
    versions = L.WeightVersions()
    agenerate = L.make_agenerate(client, "u-1", versions)
    out = asyncio.run(agenerate([1, 2], SamplingParams(max_new_tokens=8)))
    assert out.token_ids == [7, 8, 9, 10, 2]
    assert server.prompts == [[1, 2], [1, 2, 7, 8, 9]]  # sent again with its tokens so far
    assert versions.calls == [[[3, 4], [2, 5]]]
    assert versions.fields(fallback=0) == {"min_global_steps": 4, "max_global_steps": 5}

    class Episode:  # two episodes of a session (DualSQL): one turn, then two
        def __init__(self, turns: int) -> None:
            self.result = type("Result", (), {"turns": [None] * turns})()

    versions.add({"global_steps": 5}, tokens=4)
    versions.add({"global_steps": 6}, tokens=1)
    assert versions.per_turn([Episode(1), Episode(2)]) == [[[[3, 4], [2, 5]]], [[[4, 5]], [[1, 6]]]]
    assert versions.per_turn([Episode(2)]) is None  # counts differ: only the range is kept
