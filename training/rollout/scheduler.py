"""The one episode scheduler: every request's episodes, one ``EpisodeRunner`` at a time per
request, and the front ends that answer its model requests.

``EpisodeScheduler`` owns the bookkeeping - which request runs which episode (DualSQL's
linker, then its generator), what each running episode asks the model next, feeding an
answer and starting the next episode, failures - and nothing else. Its callers decide only
*how* answers come:

- ``run_episodes``: rounds, one batched token ``generate`` call per distinct sampling
  configuration (the local engine, ``eval.run`` with a local model);
- ``run_episode_async``: one request with an async token generate, agent steps in a worker
  thread so the event loop never blocks on SQLite (the veRL agent loop);
- the text front ends in ``training.generation.text_episodes``: rounds or up to N requests
  in flight against a text source (teachers, OpenAI-compatible endpoints);
- the demonstration replay (``training.supervised.demonstrations``): scripted turns.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agents.types import Agent, EpisodeResult, Example, Message, Trajectory
from training.rollout.chat_segments import ChatSegments
from training.rollout.driver_types import (
    AsyncGenerateFn,
    CachingGenerate,
    GenerateFn,
    GenerationOutput,
    Request,
    RolloutLimits,
    SamplingParams,
)
from training.rollout.episode import EpisodeRunner

if TYPE_CHECKING:
    from tools import Backend


@dataclass
class EpisodeSlot:
    """One request's progress through its episodes (DualSQL: linker, then generator)."""

    example: Example
    db: Backend
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


def _runner(
    agent: Agent,
    example: Example,
    db: Backend,
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


class EpisodeScheduler:
    """Every request's episodes; a front end answers what ``waiting()`` episodes ask.

    Requests are ``(example, database, sample index)``; each starts its first episode at
    once. A request whose model call failed for good is ``fail``-ed: its episodes are left
    out of the trajectories and listed in ``failures()``.
    """

    def __init__(
        self,
        agent: Agent,
        requests: Sequence[Request],
        segments: ChatSegments,
        sampling: SamplingParams,
        limits: RolloutLimits,
    ) -> None:
        self.agent, self.segments, self.sampling, self.limits = agent, segments, sampling, limits
        self.slots = [EpisodeSlot(example, db, index) for example, db, index in requests]
        self.failed: set[int] = set()
        for slot in self.slots:
            self._advance(slot)

    def _advance(self, slot: EpisodeSlot) -> None:
        slot.advance(self.agent, self.segments, self.sampling, self.limits)

    def waiting(self) -> list[int]:
        """The requests whose running episode needs the model, in request order."""
        return [i for i, slot in enumerate(self.slots) if slot.runner is not None and i not in self.failed]

    def runner(self, i: int) -> EpisodeRunner:
        runner = self.slots[i].runner
        if runner is None:
            raise ValueError(f"request {i} has no running episode")
        return runner

    def ask(self, i: int) -> tuple[list[int], SamplingParams]:
        """The token ids request ``i``'s episode continues from, and its sampling."""
        return self.runner(i).next_request()

    def conversation(self, i: int) -> list[Message]:
        """Request ``i``'s conversation as the agent keeps it (what a text source is shown)."""
        return [dict(m) for m in self.runner(i).conversation]

    def feed(self, i: int, output: GenerationOutput) -> None:
        """Give request ``i``'s episode the model's answer; start its next episode if it ended."""
        self.answer(i, output)
        self.start_next(i)

    def answer(self, i: int, output: GenerationOutput) -> None:
        """Give request ``i``'s episode the model's answer (``start_next`` follows)."""
        self.runner(i).feed(output)

    def start_next(self, i: int) -> None:
        """Start request ``i``'s next episode when its running one has ended."""
        self._advance(self.slots[i])

    def fail(self, i: int) -> None:
        self.failed.add(i)

    def done(self, i: int) -> bool:
        return self.slots[i].runner is None or i in self.failed

    def trajectories(self) -> list[Trajectory]:
        """Every finished episode, request by request, each request's episodes in order."""
        return [t for i, slot in enumerate(self.slots) if i not in self.failed for t in slot.trajectories]

    def failures(self) -> list[tuple[str, int]]:
        """``(example id, sample index)`` of the failed requests, in request order."""
        return [(self.slots[i].example.id, self.slots[i].sample_index) for i in sorted(self.failed)]


# ----------------------------------------------------------------------------- token front ends


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
    cuts its own output to its own budget. A ``CachingGenerate`` (prefix reuse) is told
    which prompts each round continues and is cleared when the rollout returns.
    """
    scheduler = EpisodeScheduler(agent, requests, ChatSegments(tokenizer, eos_token_ids), sampling, limits)
    bar = _progress_bar(len(scheduler.slots)) if progress else None
    if bar is not None:
        bar.update(len(scheduler.slots) - len(scheduler.waiting()))
    try:
        while active := scheduler.waiting():
            _generate_round(scheduler, active, generate)
            if bar is not None:
                bar.update(sum(scheduler.done(i) for i in active))
    finally:
        if isinstance(generate, CachingGenerate):
            generate.clear()  # no episode continues: free every cache
    if bar is not None:
        bar.close()
    return scheduler.trajectories()


def _generate_round(scheduler: EpisodeScheduler, active: Sequence[int], generate: GenerateFn) -> None:
    """One batched call per sampling configuration; feed every episode its output."""
    groups: dict[SamplingParams, list[tuple[int, list[int], int]]] = {}
    for i in active:
        ids, params = scheduler.ask(i)
        key = dataclasses.replace(params, max_new_tokens=0)
        groups.setdefault(key, []).append((i, ids, params.max_new_tokens))
    if isinstance(generate, CachingGenerate):  # finished episodes' caches go before this round's
        generate.retain([ids for members in groups.values() for _, ids, _ in members])
    for key, members in groups.items():
        params = dataclasses.replace(key, max_new_tokens=max(budget for _, _, budget in members))
        outputs = generate([ids for _, ids, _ in members], params)
        if len(outputs) != len(members):
            raise ValueError(f"generate returned {len(outputs)} outputs for {len(members)} prompts")
        for (i, _, _), output in zip(members, outputs, strict=True):  # lengths checked above
            scheduler.answer(i, output)
    for i in active:  # the next episodes start once every call of the round is answered
        scheduler.start_next(i)


def _progress_bar(total: int) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="rollouts", unit="req")


async def run_episode_async(
    agent: Agent,
    example: Example,
    db: Backend,
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
    scheduler = await asyncio.to_thread(
        EpisodeScheduler, agent, [(example, db, sample_index)], segments, sampling, limits
    )
    while scheduler.waiting():
        ids, params = scheduler.ask(0)
        output = await agenerate(ids, params)
        await asyncio.to_thread(scheduler.feed, 0, output)
    return scheduler.trajectories()
