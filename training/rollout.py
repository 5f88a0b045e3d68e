"""The token-in/token-out rollout driver: agent conversations → token-level trajectories.

One ``EpisodeRunner`` drives one episode: ``next_request()`` gives the token ids to
continue and the sampling parameters, ``feed(output)`` takes what the model generated,
steps the agent and appends the observation tokens. Two loops drive runners:
``run_episodes`` (sync, many episodes in flight, one batched ``generate`` call per round
— the local engine) and ``run_episode_async`` (one request, an async generate — the veRL
agent-loop adapter). Neither holds any logic of its own beyond scheduling.

The pieces: ``training.rollout_types`` (sampling parameters, outputs, limits),
``training.chat_segments`` (the chat-template segments) and ``training.episode_runner``
(one episode and the token rules). Their public types are importable from here too, the
driver's one entry point (docs/INTERFACES.md).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agents.types import Agent, EpisodeResult, Example, Trajectory
from training.chat_segments import ChatSegments
from training.episode_runner import EpisodeRunner
from training.rollout_types import (
    AsyncGenerateFn,
    GenerateFn,
    GenerationOutput,
    Request,
    RolloutLimits,
    SamplingParams,
)

if TYPE_CHECKING:
    from tools import Database

__all__ = [
    "AsyncGenerateFn",
    "EpisodeSlot",
    "GenerateFn",
    "GenerationOutput",
    "Request",
    "RolloutLimits",
    "SamplingParams",
    "run_episode_async",
    "run_episodes",
    "token_phases",
]


def _runner(
    agent: Agent,
    example: Example,
    db: Database,
    previous: Sequence[EpisodeResult],
    segments: ChatSegments,
    sampling: SamplingParams,
    limits: RolloutLimits,
    sample_index: int,
) -> EpisodeRunner | None:
    episode = agent.start(example, db, tuple(previous))
    if episode is None:
        return None
    return EpisodeRunner(episode, segments, sampling, limits, example.id, sample_index)


@dataclass
class EpisodeSlot:
    """One request's progress through its episodes (DualSQL: linker, then generator).

    Shared by every loop that schedules episodes: ``run_episodes`` here, the concurrent
    generation loops and the demonstration replay.
    """

    example: Example
    db: Database
    sample_index: int
    runner: EpisodeRunner | None = None
    trajectories: list[Trajectory] = field(default_factory=list)

    def advance(self, agent: Agent, segments: ChatSegments, sampling: SamplingParams, limits: RolloutLimits) -> None:
        """Collect finished runners and start the next episode until one needs the model."""
        while True:
            if self.runner is not None:
                if not self.runner.done:
                    return
                self.trajectories.append(self.runner.trajectory())
            previous = [t.result for t in self.trajectories]
            self.runner = _runner(agent, self.example, self.db, previous, segments, sampling, limits, self.sample_index)
            if self.runner is None:
                return


def run_episodes(
    agent: Agent,
    requests: Sequence[Request],
    tokenizer: Any,
    generate: GenerateFn,
    sampling: SamplingParams,
    limits: RolloutLimits = RolloutLimits(),
    *,
    progress: bool = False,
    eos_token_ids: Iterable[int] | None = None,
) -> list[Trajectory]:
    """Run every request's episodes, batching generation across the episodes in flight.

    Returns the trajectories request by request, each request's episodes in order
    (DualSQL: linker then generator). Each round makes one ``generate`` call per distinct
    sampling configuration, with the largest token budget among its prompts; each runner
    cuts its own output to its own budget.
    """
    segments = ChatSegments(tokenizer, eos_token_ids)
    slots = [EpisodeSlot(example, db, index) for example, db, index in requests]
    for slot in slots:
        slot.advance(agent, segments, sampling, limits)
    bar = _progress_bar(len(slots)) if progress else None
    finished = sum(slot.runner is None for slot in slots)
    if bar is not None:
        bar.update(finished)
    while True:
        active = [slot for slot in slots if slot.runner is not None]
        if not active:
            break
        _generate_round([slot.runner for slot in active], generate)  # type: ignore[misc]
        for slot in active:
            slot.advance(agent, segments, sampling, limits)
            if slot.runner is None and bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    return [traj for slot in slots for traj in slot.trajectories]


def _generate_round(runners: list[EpisodeRunner], generate: GenerateFn) -> None:
    """One batched call per sampling configuration; feed every runner its output."""
    groups: dict[SamplingParams, list[tuple[EpisodeRunner, list[int], int]]] = {}
    for runner in runners:
        ids, params = runner.next_request()
        key = dataclasses.replace(params, max_new_tokens=0)
        groups.setdefault(key, []).append((runner, ids, params.max_new_tokens))
    for key, members in groups.items():
        params = dataclasses.replace(key, max_new_tokens=max(budget for _, _, budget in members))
        outputs = generate([ids for _, ids, _ in members], params)
        if len(outputs) != len(members):
            raise ValueError(f"generate returned {len(outputs)} outputs for {len(members)} prompts")
        for (runner, _, _), output in zip(members, outputs, strict=True):  # lengths checked above
            runner.feed(output)


def _progress_bar(total: int) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="rollouts", unit="req")


async def run_episode_async(
    agent: Agent,
    example: Example,
    db: Database,
    tokenizer: Any,
    agenerate: AsyncGenerateFn,
    sampling: SamplingParams,
    limits: RolloutLimits = RolloutLimits(),
    *,
    sample_index: int = 0,
    eos_token_ids: Iterable[int] | None = None,
    segments: ChatSegments | None = None,
) -> list[Trajectory]:
    """Run one request's episodes with an async generate (the veRL adapter's path).

    Agent calls (tools on SQLite, schema profiles) run in a worker thread so the event
    loop never blocks on the database.
    """
    segments = segments or ChatSegments(tokenizer, eos_token_ids)
    trajectories: list[Trajectory] = []
    while True:
        previous = [t.result for t in trajectories]
        runner = await asyncio.to_thread(
            _runner, agent, example, db, previous, segments, sampling, limits, sample_index
        )
        if runner is None:
            return trajectories
        while not runner.done:
            ids, params = runner.next_request()
            output = await agenerate(ids, params)
            await asyncio.to_thread(runner.feed, output)
        trajectories.append(runner.trajectory())


def token_phases(trajectory: Trajectory) -> list[str]:
    """The phase of every response token (its turn's phase; "" past the last record)."""
    phases = [turn.phase for turn in trajectory.result.turns]
    return [phases[i] if 0 <= i < len(phases) else "" for i in trajectory.turn_index]
