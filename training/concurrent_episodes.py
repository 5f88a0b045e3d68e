"""Episodes against a text endpoint with up to N requests in flight, each episode on its own pace.

``eval.run model.base_url=... model.concurrency=N`` plays every episode of a batch through
this driver. The round-based driver (``generation.run_text_episodes``) waits for every
episode's turn before starting the next round, so one slow answer holds all the others;
here an episode's next request is sent as soon as its previous answer has been fed and
its tool call has run, so the server always has up to N requests to work on.

Design, and why:

- Only the HTTP requests run in worker threads. Everything else - feeding an answer to its
  episode, the agent's step, the tool call against SQLite, re-encoding with the policy
  tokenizer - runs in the calling thread, one episode at a time, exactly as in the
  sequential path. The agents, tools and tokenizer therefore never run concurrently
  (a fast tokenizer shared across threads can fail with "Already borrowed"), and each
  episode's content depends only on the server's answers, never on timing: the results
  equal a ``concurrency=1`` run given the same answers (checked in
  ``tests/eval/test_eval_concurrency.py``).
- Episodes waiting with the same conversation and sampling (the samples of one question
  before their first answer) share one request with ``n`` = how many wait, as the
  round-based driver does; the server returns one choice per episode.
- A request that fails for good (after ``EndpointSource``'s retries: timeouts, refused
  connections, HTTP 429/5xx, malformed bodies; other HTTP errors at once) drops only its
  episodes, which are returned in ``failed`` and counted - never raised.
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
from training.generation import EpisodeBatch, TextSource, Transform, ask_source


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
    trajectories in request order (DualSQL: linker then generator), failures listed."""
    from training.chat_segments import ChatSegments
    from training.demonstrations import turn_end_token
    from training.rollout import EpisodeSlot, GenerationOutput

    if not isinstance(concurrency, int) or concurrency < 1:
        raise ConfigError(f"concurrency={concurrency!r}: the most requests in flight, a positive integer")
    segments = ChatSegments(tokenizer)
    eos = turn_end_token(segments, tokenizer)
    slots = [EpisodeSlot(ex, db, index) for ex, db, index in requests]
    waiting: OrderedDict[str, tuple[list[Message], Any, list[int]]] = OrderedDict()
    failed: set[int] = set()

    def queue(i: int) -> None:
        """Put episode ``i``'s next turn in line (if it has one), joining an identical ask."""
        runner = slots[i].runner
        if runner is None:
            return
        _, params = runner.next_request()
        messages = [dict(m) for m in runner.conversation]
        if transform is not None:
            messages = transform(slots[i].example, messages)
        key = json.dumps([messages, repr(params)], sort_keys=True)
        if key in waiting:
            waiting[key][2].append(i)
        else:
            waiting[key] = (messages, params, [i])

    for i, slot in enumerate(slots):
        slot.advance(agent, segments, sampling, limits)
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
                    if text is None:
                        failed.add(i)
                        continue
                    runner = slots[i].runner
                    assert runner is not None  # it asked, so it was running
                    runner.feed(GenerationOutput(token_ids=segments.encode(text) + eos))
                    slots[i].advance(agent, segments, sampling, limits)
                    queue(i)
    done_trajectories = [t for i, s in enumerate(slots) if i not in failed for t in s.trajectories]
    return EpisodeBatch(done_trajectories, [(slots[i].example.id, slots[i].sample_index) for i in sorted(failed)])


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
