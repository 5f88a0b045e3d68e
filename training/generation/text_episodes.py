"""Playing episodes against a text source: the text front ends of the one episode scheduler
(``training.rollout.scheduler.EpisodeScheduler``).

``run_source_episodes`` takes any source: the policy's token ``generate`` goes to the
rollout driver's ``run_episodes``; a text source (a local teacher, an endpoint) answers
through ``run_text_episodes``, in rounds: each round asks once per distinct (conversation,
sampling) with ``n`` = how many episodes share it (the k samples of one question share
their first prompt). ``run_concurrent_episodes`` keeps up to N requests in flight instead,
each episode at its own pace (``eval.run model.base_url=... model.concurrency=N``): the
round-based driver waits for every episode's turn before the next round, so one slow answer
holds all the others.

Only the HTTP requests run in worker threads. Everything else - feeding an answer to its
episode, the agent's step, the tool call against SQLite, re-encoding with the policy
tokenizer - runs in the calling thread, one episode at a time, exactly as in the
sequential path: the agents, tools and tokenizer never run concurrently (a fast tokenizer
shared across threads can fail with "Already borrowed"), and each episode's content depends
only on the server's answers, never on timing (checked in
``tests/eval/test_eval_concurrency.py``). A request that fails for good (after the source's
retries) drops only its episodes, which are returned in ``failed`` and counted - never raised.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from agents.types import Message, Trajectory
from tools.errors import ConfigError
from training.generation.sources import PolicySource, TextSource, Transform, ask_source


@dataclass
class EpisodeBatch:
    trajectories: list[Trajectory]
    failed: list[tuple[str, int]]  # (example id, sample index) whose requests failed for good


def run_source_episodes(
    agent: Any,
    requests: Sequence[Any],
    tokenizer: Any,
    source: Any,
    sampling: Any,
    limits: Any,
    transform: Transform | None = None,
) -> EpisodeBatch:
    """Every request's episodes with ``source``; trajectories in request order.

    A ``transform`` rewrites the messages a text source sees (the privileged teacher's
    guidance); the trajectories keep the agent's own conversation, so SFT never sees it.
    """
    from training.rollout import run_episodes

    if isinstance(source, PolicySource):
        if transform is not None:
            raise ConfigError("a transform (teacher guidance) needs a text source, not the policy's token generate")
        return EpisodeBatch(run_episodes(agent, requests, tokenizer, source.generate, sampling, limits), [])
    return run_text_episodes(agent, requests, tokenizer, source, sampling, limits, transform)


class _TextAsks:
    """The scheduler seen from a text source: what each waiting episode asks (its
    conversation, maybe rewritten) and feeding a text answer back as the turn's tokens."""

    def __init__(
        self, agent: Any, requests: Sequence[Any], tokenizer: Any, sampling: Any, limits: Any, transform: Any
    ) -> None:
        from training.rollout import EpisodeScheduler
        from training.rollout.chat_segments import ChatSegments
        from training.supervised.demonstrations import turn_end_token

        segments = ChatSegments(tokenizer)
        self.segments, self.eos, self.transform = segments, turn_end_token(segments, tokenizer), transform
        self.scheduler = EpisodeScheduler(agent, requests, segments, sampling, limits)

    def ask(self, i: int) -> tuple[str, list[Message], Any]:
        """``(key, messages, params)`` of request ``i``'s next turn; equal keys share one request."""
        _, params = self.scheduler.ask(i)
        messages = self.scheduler.conversation(i)
        if self.transform is not None:
            messages = self.transform(self.scheduler.slots[i].example, messages)
        return json.dumps([messages, repr(params)], sort_keys=True), messages, params

    def answer(self, i: int, text: str | None) -> None:
        from training.rollout import GenerationOutput

        if text is None:
            self.scheduler.fail(i)
            return
        self.scheduler.feed(i, GenerationOutput(token_ids=self.segments.encode(text) + self.eos))

    def batch(self) -> EpisodeBatch:
        return EpisodeBatch(self.scheduler.trajectories(), self.scheduler.failures())


def run_text_episodes(
    agent: Any,
    requests: Sequence[Any],
    tokenizer: Any,
    source: TextSource,
    sampling: Any,
    limits: Any,
    transform: Transform | None = None,
    concurrency: int = 8,
) -> EpisodeBatch:
    """Drive episodes with a text source in rounds: answers are re-encoded with ``tokenizer``."""
    asks = _TextAsks(agent, requests, tokenizer, sampling, limits, transform)
    workers = getattr(getattr(source, "spec", None), "concurrency", concurrency)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        while active := asks.scheduler.waiting():
            groups: dict[str, list[int]] = {}
            prompts: dict[str, tuple[list[Message], Any]] = {}
            for i in active:
                key, messages, params = asks.ask(i)
                groups.setdefault(key, []).append(i)
                prompts[key] = (messages, params)
            futures = {key: pool.submit(ask_source, source, *prompts[key], len(ms)) for key, ms in groups.items()}
            for key, members in groups.items():
                for i, text in zip(members, futures[key].result(), strict=True):
                    asks.answer(i, text)
    return asks.batch()


def run_concurrent_episodes(
    agent: Any,
    requests: Sequence[Any],
    tokenizer: Any,
    source: TextSource,
    sampling: Any,
    limits: Any,
    concurrency: int,
    transform: Transform | None = None,
) -> EpisodeBatch:
    """Every request's episodes with ``source``, at most ``concurrency`` requests in flight;
    trajectories in request order (DualSQL: linker then generator), failures listed.

    Episodes waiting with the same conversation and sampling (the samples of one question
    before their first answer) share one request with ``n`` = how many wait, as the
    round-based driver does; the server returns one choice per episode."""
    if not isinstance(concurrency, int) or concurrency < 1:
        raise ConfigError(f"concurrency={concurrency!r}: the most requests in flight, a positive integer")
    asks = _TextAsks(agent, requests, tokenizer, sampling, limits, transform)
    waiting: OrderedDict[str, tuple[list[Message], Any, list[int]]] = OrderedDict()

    def queue(i: int) -> None:
        """Put request ``i``'s next turn in line (if it has one), joining an identical ask."""
        if asks.scheduler.done(i):
            return
        key, messages, params = asks.ask(i)
        if key in waiting:
            waiting[key][2].append(i)
        else:
            waiting[key] = (messages, params, [i])

    for i in asks.scheduler.waiting():
        queue(i)
    in_flight: dict[Future[list[str | None]], list[int]] = {}
    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="endpoint") as pool:
        while waiting or in_flight:
            while waiting and len(in_flight) < concurrency:
                _, (messages, params, members) = waiting.popitem(last=False)
                in_flight[pool.submit(ask_source, source, messages, params, len(members))] = members
            done, _ = wait(in_flight, return_when=FIRST_COMPLETED)
            for future in done:
                members = in_flight.pop(future)
                for i, text in zip(members, future.result(), strict=True):
                    asks.answer(i, text)
                    queue(i)
    return asks.batch()


@dataclass
class ConcurrentTextGenerate:
    """A text source in ``eval.run``'s place of a token ``GenerateFn``: it drives its own
    episodes (``run_episodes``, the rollout driver's signature) with up to ``concurrency``
    requests in flight; a failed request leaves its sample without an answer."""

    source: Any
    concurrency: int
    failed: list[tuple[str, int]] = field(default_factory=list)

    def __call__(self, prompts: Any, params: Any) -> Any:
        raise ConfigError("an endpoint answers chat messages, not token ids; drive it with run_episodes")

    def run_episodes(
        self, agent: Any, requests: Sequence[Any], tokenizer: Any, _generate: Any, sampling: Any, limits: Any
    ) -> list[Trajectory]:
        batch = run_concurrent_episodes(agent, requests, tokenizer, self.source, sampling, limits, self.concurrency)
        self.failed.extend(batch.failed)
        return batch.trajectories


def questions_per_batch(batch_size: int, concurrency: int, samples: int) -> int:
    """Questions per ``eval.run`` batch against an endpoint: at least ``eval.batch_size``, and
    enough episodes (4 x ``concurrency``) that requests stay in flight until the batch's
    last episodes (records are written after each batch, so a killed run resumes there)."""
    return max(batch_size, -(-4 * concurrency // max(samples, 1)))
