"""The project's trainers on veRL's async trainers (``trainer.mode=colocate_async`` /
``separate_async``): :class:`~training.engines.verl.workers.sync_trainer.SqlAgentTrainerBase`
(advantages, two tracks, KL schedule, DualSQL's row-sized update, dynamic sampling with
refill, records, checkpoints, resume, SIGTERM) on veRL 0.9.1's
``PPOTrainerColocateAsync`` / ``PPOTrainerSeparateAsync``.

What veRL's async trainers add, and what the project keeps of it:

- prompts generate ahead of the step that trains them (``trainer.warmup_batches``) and a
  finished group is sampled while others still run; a group more than
  ``trainer.staleness`` weight versions old is dropped and its prompt drawn again, or the
  step waits for it (``trainer.stale_rollouts``; veRL's ``max_off_policy_threshold``);
- **partial rollouts continue**: a weight update aborts the requests in flight and the
  client sends each one again with its tokens so far (veRL's
  ``FullyAsyncLLMServerClient``), so an episode keeps its tokens, its conversation and
  its tool state (the agent's coroutine and database connection never stop; only the
  vLLM request is cut) and the turn goes on under the new weights. The alternative,
  restarting the episode, would throw away every earlier turn and its SQL executions at
  each update: multi-turn episodes (up to 15 turns) would rarely finish;
- so one turn can be written by two weight versions. :class:`VersionedAsyncClient`
  records each attempt's token count and version; the agent loop stores them per turn in
  the episode record (``turn_versions``: ``[[tokens, version], ...]`` per assistant turn,
  in token order) and ``samples.jsonl`` shows them per turn (``turns[i].versions``);
  veRL's ``min_global_steps`` / ``max_global_steps`` tags hold the episode's range;
- the old-log-prob pass is recomputed (decoupled PPO), and importance weights correct the
  lag when ``algorithm.rollout_correction`` (or ``trainer.async_correction``) asks for them.

``separate_async`` syncs weights to its standalone rollout pool once per step, after
``parameter_sync_step`` optimizer steps (the verl engine sets it to
``algorithm.mini_batches``), so a step's mini-batches are sampled one at a time.
"""

from __future__ import annotations

from typing import Any, ClassVar

from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_colocate_async import PPOTrainerColocateAsync
from verl.trainer.ppo.v1.trainer_separate_async import PPOTrainerSeparateAsync
from verl.workers.rollout.llm_server import FullyAsyncLLMServerClient, LLMServerClient

from training.engines.verl.shared import TRAINER_MODES, VERSION_SEGMENTS
from training.engines.verl.workers.sync_trainer import SqlAgentTrainerBase


class _AttemptRecorder(LLMServerClient):
    """Each server answer's token count and weight version, per request id, while
    :class:`VersionedAsyncClient` resumes an aborted request."""

    async def generate(self, request_id: str, **kwargs: Any) -> Any:
        output = await super().generate(request_id, **kwargs)
        attempts = self.__dict__.setdefault("_attempts", {})
        attempts.setdefault(request_id, []).append(
            [len(output.token_ids), (output.extra_fields or {}).get("global_steps")]
        )
        return output


class VersionedAsyncClient(FullyAsyncLLMServerClient, _AttemptRecorder):
    """veRL's partial-rollout client (an aborted request is sent again with its tokens so
    far) that also returns which weight version wrote which tokens: ``extra_fields
    ["weight_versions"] = [[tokens, version], ...]`` in token order (empty answers left out,
    neighbours of one version merged). Turns of one session run one after another, so a
    session's request id has one call in flight."""

    async def generate(self, request_id: str, **kwargs: Any) -> Any:
        attempts = self.__dict__.setdefault("_attempts", {})
        attempts[request_id] = []
        try:
            output = await super().generate(request_id, **kwargs)
        finally:
            recorded = attempts.pop(request_id, [])
        output.extra_fields[VERSION_SEGMENTS] = merge_segments(recorded)
        return output


def merge_segments(attempts: list[list[Any]]) -> list[list[Any]]:
    """``[[tokens, version], ...]`` without empty answers, neighbours of one version merged.

    >>> merge_segments([[3, 1], [0, 1], [2, 1], [4, 2]])
    [[5, 1], [4, 2]]
    """
    out: list[list[Any]] = []
    for count, version in attempts:
        if count <= 0:
            continue
        if out and out[-1][1] == version:
            out[-1][0] += count
        else:
            out.append([int(count), version])
    return out


@register_trainer(TRAINER_MODES["colocate_async"])
class SqlAgentColocateAsync(SqlAgentTrainerBase, PPOTrainerColocateAsync):
    """``trainer.mode=colocate_async``: rollout and training share the GPUs; generation
    pauses for each update and resumes in-flight requests after it (see the module doc)."""

    verl_mode: ClassVar[str] = "colocate_async"

    def get_llm_client(self) -> Any:
        return self.llm_server_manager.get_client(client_cls=VersionedAsyncClient)


@register_trainer(TRAINER_MODES["separate_async"])
class SqlAgentSeparateAsync(SqlAgentTrainerBase, PPOTrainerSeparateAsync):
    """``trainer.mode=separate_async``: a standalone rollout pool keeps generating while the
    trainer GPUs train; weights go to it once per step (see the module doc)."""

    verl_mode: ClassVar[str] = "separate_async"

    def get_llm_client(self) -> Any:
        return self.standalone_server_manager.get_client(client_cls=VersionedAsyncClient)
