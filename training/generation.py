"""One generation interface for the policy, a local HF model and any OpenAI-compatible chat endpoint.

Every source plays a design's episodes through the same rollout driver, so tool calls
always run in *our* tools (never at an endpoint), observations are real, and each
trajectory carries the policy tokenizer's token ids and response masks — the ones SFT
and RL train on:

- ``PolicySource``: a token-level ``GenerateFn`` over the policy's own tokenizer (the
  local engine's batched HF ``generate``); tokens are exact.
- ``LocalChatSource``: any local HF model with *its own* tokenizer and chat template
  (e.g. a bigger teacher); it answers with text.
- ``EndpointSource``: ``POST {base_url}/chat/completions`` of any OpenAI-compatible
  server (vLLM, SGLang, llama.cpp, a hosted API); the API key comes from the environment
  variable ``api_key_env`` names; it answers with text.

A text answer is re-encoded with the policy tokenizer and fed to the driver as the turn's
tokens (then end-of-turn), exactly how the demonstrations are played
(``training/demonstrations.py``). Server quirks handled here, documented beside the code:
the matched stop string that servers strip is restored; a ``reasoning_content`` (or
``reasoning``) field becomes the design's reasoning block (``<think>``, ReToolSQL's
``<scratch_pad>``); ``n > 1`` is sent when the server honours it (else one request per
sample); timeouts, HTTP 429/5xx and malformed bodies are retried with exponential backoff,
after which the request counts as *failed* — its episode is dropped and counted, the
stage never crashes.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from agents.types import Example, Message, Trajectory
from tools.errors import ConfigError

REASONING_TAGS = {"retoolsql": "scratch_pad"}  # every other design writes <think>…</think>
Transform = Callable[[Example, list[Message]], list[Message]]


def reasoning_tag(agent_name: str) -> str:
    """The tag a design's turns wrap their reasoning in."""
    return REASONING_TAGS.get(agent_name, "think")


# ----------------------------------------------------------------------------- text fixes


def restore_stop(text: str, stops: Sequence[str], finish_reason: str | None, stop_reason: Any = None) -> str:
    """Put back the stop string a server stripped from ``text``.

    vLLM names the matched string in ``stop_reason``; OpenAI-style servers only say
    ``finish_reason="stop"``. Then the stop string is found by the design's tags: the
    closing tag (``</tool_call>``) whose opening tag is still open at the end of the text.
    A stop by EOS (no open tag) leaves the text as it is.
    """
    if finish_reason != "stop" or any(text.endswith(s) for s in stops if s):
        return text
    if isinstance(stop_reason, str) and stop_reason in stops:
        return text + stop_reason
    for stop in stops:
        if stop.startswith("</") and stop.endswith(">"):
            opening = "<" + stop[2:-1]
            last_open, last_close = text.rfind(opening), text.rfind(stop)
            if last_open >= 0 and last_open > last_close:
                return text + stop
    return text


def with_reasoning(content: str, reasoning: str | None, tag: str) -> str:
    """``reasoning_content`` as the design's reasoning block in front of the answer (kept
    out when the content already opens that block)."""
    if not reasoning or not reasoning.strip() or f"<{tag}>" in content:
        return content
    return f"<{tag}>\n{reasoning.strip()}\n</{tag}>\n{content.lstrip()}"


# ----------------------------------------------------------------------------- sources


class TextSource(Protocol):
    """Answers chat messages with text: ``n`` completions per call, ``None`` for a failed one."""

    name: str

    def complete(self, messages: list[Message], params: Any, n: int) -> list[str | None]: ...


@dataclass(frozen=True)
class EndpointSpec:
    """An OpenAI-compatible chat endpoint (``stage.teachers`` entries and ``model.base_url``)."""

    base_url: str
    model: str
    api_key_env: str = "OPENAI_API_KEY"
    timeout_s: float = 120.0
    retries: int = 3
    backoff_s: float = 1.0
    concurrency: int = 8
    supports_n: bool = True
    max_tokens: int | None = None  # None: the rollout's per-turn budget
    reasoning_tag: str = "think"

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise ConfigError(f"endpoint base_url={self.base_url!r}: give the server's URL, e.g. http://HOST:PORT/v1")
        if not self.model:
            raise ConfigError(f"endpoint {self.base_url}: name the served model (model name as the server lists it)")
        if self.retries < 0 or self.backoff_s < 0 or self.timeout_s <= 0 or self.concurrency < 1:
            raise ConfigError(f"endpoint {self.base_url}: retries/backoff_s >= 0, timeout_s > 0, concurrency >= 1")


class RequestFailed(Exception):
    """One request failed for good (after its retries); the caller counts it."""


_RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


@dataclass
class EndpointSource:
    """The client of one OpenAI-compatible chat endpoint (httpx, real HTTP)."""

    spec: EndpointSpec
    stats: dict[str, int] = field(default_factory=lambda: {"requests": 0, "retries": 0, "failed": 0})
    sleep: Callable[[float], None] = time.sleep

    def __post_init__(self) -> None:
        import httpx

        key = os.environ.get(self.spec.api_key_env, "")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        # one connection per request in flight: httpx's default pool (100, 20 kept alive) would
        # queue requests above it, and the wait for a connection counts against the timeout
        limits = httpx.Limits(max_connections=self.spec.concurrency, max_keepalive_connections=self.spec.concurrency)
        self._client = httpx.Client(
            base_url=self.spec.base_url.rstrip("/"), headers=headers, timeout=self.spec.timeout_s, limits=limits
        )
        self._stats_lock = threading.Lock()  # worker threads count their requests here
        self._n_ok = self.spec.supports_n
        self.name = f"endpoint:{self.spec.model}@{self.spec.base_url}"

    def close(self) -> None:
        self._client.close()

    def _count(self, key: str) -> None:
        with self._stats_lock:
            self.stats[key] += 1

    def complete(self, messages: list[Message], params: Any, n: int) -> list[str | None]:
        if n > 1 and self._n_ok:
            try:
                texts = self._request(messages, params, n)
                if len(texts) == n:
                    return list(texts)
                self._n_ok = False  # the server ignored n: ask one by one from now on
                return list(texts) + self._one_by_one(messages, params, n - len(texts))
            except RequestFailed:
                return [None] * n
        return self._one_by_one(messages, params, n)

    def _one_by_one(self, messages: list[Message], params: Any, n: int) -> list[str | None]:
        out: list[str | None] = []
        for _ in range(n):
            try:
                out.extend(self._request(messages, params, 1)[:1] or [None])
            except RequestFailed:
                out.append(None)
        return out

    def _payload(self, messages: list[Message], params: Any, n: int) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.spec.model,
            "messages": [{"role": m["role"], "content": m.get("content", "")} for m in messages],
            "temperature": float(params.temperature),
            "max_tokens": self.spec.max_tokens or int(params.max_new_tokens),
        }
        if params.temperature > 0 and params.top_p < 1:
            body["top_p"] = float(params.top_p)
        if params.stop:
            body["stop"] = list(params.stop)[:4]  # the OpenAI API takes at most 4 stop strings
        if n > 1:
            body["n"] = n
        if params.seed is not None:
            body["seed"] = int(params.seed)
        return body

    def _request(self, messages: list[Message], params: Any, n: int) -> list[str]:
        """POST with retries; the texts of the choices (stop restored, reasoning kept)."""
        import httpx

        body = self._payload(messages, params, n)
        last = ""
        for attempt in range(self.spec.retries + 1):
            if attempt:
                self._count("retries")
                self.sleep(self.spec.backoff_s * 2 ** (attempt - 1))
            self._count("requests")
            try:
                response = self._client.post("/chat/completions", json=body)
            except httpx.HTTPError as err:  # timeouts, refused connections, broken bodies
                last = f"{type(err).__name__}: {err}"
                continue
            if response.status_code in _RETRY_STATUS:
                last = f"HTTP {response.status_code}"
                continue
            if response.status_code >= 400:
                if n > 1 and "n" in response.text:  # servers that refuse n > 1 say so with a 400
                    self._n_ok = False
                self._count("failed")
                raise RequestFailed(f"HTTP {response.status_code}: {response.text[:200]}")
            try:
                return self._texts(response.json(), params.stop)
            except (ValueError, KeyError, TypeError, IndexError) as err:
                last = f"malformed response: {err}"
        self._count("failed")
        raise RequestFailed(last)

    def _texts(self, data: Mapping[str, Any], stops: Sequence[str]) -> list[str]:
        choices = sorted(data["choices"], key=lambda c: c.get("index", 0))
        if not choices:
            raise ValueError("no choices")
        out = []
        for choice in choices:
            message = choice["message"]
            content = message.get("content") or ""
            if not isinstance(content, str):
                raise TypeError("message content is not text")
            reasoning = message.get("reasoning_content") or message.get("reasoning")
            content = restore_stop(content, stops, choice.get("finish_reason"), choice.get("stop_reason"))
            out.append(
                with_reasoning(content, reasoning if isinstance(reasoning, str) else None, self.spec.reasoning_tag)
            )
        return out


@dataclass
class LocalChatSource:
    """A local HF model with its own tokenizer and chat template, answering with text."""

    model: Any
    tokenizer: Any
    device: str = "cpu"
    name: str = "local"
    chunk: int = 8

    def complete(self, messages: list[Message], params: Any, n: int) -> list[str | None]:
        from training.engines.local_policy import batched_generate

        prompt = self.tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
        ids = list(self.tokenizer.encode(prompt, add_special_tokens=False))
        out: list[str | None] = []
        for start in range(0, n, self.chunk):
            rows = batched_generate(
                self.model,
                self.tokenizer,
                [ids] * min(self.chunk, n - start),
                max_new_tokens=params.max_new_tokens,
                temperature=params.temperature,
                top_p=params.top_p,
                top_k=max(params.top_k, 0),
                stop=params.stop,
                device=self.device,
            )
            eos = {self.tokenizer.eos_token_id}
            for row in rows:
                body = [t for t in row.token_ids if t not in eos]
                out.append(self.tokenizer.decode(body, skip_special_tokens=True))
        return out


@dataclass
class PolicySource:
    """The policy itself: a token-level ``GenerateFn`` over the policy tokenizer."""

    generate: Any
    name: str = "policy"


Source = TextSource | PolicySource


# ----------------------------------------------------------------------------- the driver


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
    """Drive episodes with a text source: answers are re-encoded with ``tokenizer``.

    Each round asks once per distinct (conversation, sampling) with ``n`` = how many
    episodes share it (the k samples of one question share their first prompt).
    """
    from training.chat_segments import ChatSegments
    from training.demonstrations import turn_end_token
    from training.rollout import EpisodeSlot, GenerationOutput

    segments = ChatSegments(tokenizer)
    eos = turn_end_token(segments, tokenizer)
    slots = [EpisodeSlot(ex, db, index) for ex, db, index in requests]
    failed: set[int] = set()
    for slot in slots:
        slot.advance(agent, segments, sampling, limits)
    workers = getattr(getattr(source, "spec", None), "concurrency", concurrency)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        while True:
            active = {i: s.runner for i, s in enumerate(slots) if s.runner is not None and i not in failed}
            if not active:
                break
            groups: dict[str, list[int]] = {}
            asks: dict[str, tuple[list[Message], Any]] = {}
            for i in active:
                runner = slots[i].runner
                assert runner is not None  # active slots have one
                _, params = runner.next_request()
                messages = [dict(m) for m in runner.conversation]
                if transform is not None:
                    messages = transform(slots[i].example, messages)
                key = json.dumps([messages, repr(params)], sort_keys=True)
                groups.setdefault(key, []).append(i)
                asks[key] = (messages, params)
            futures = {key: pool.submit(ask_source, source, *asks[key], len(ms)) for key, ms in groups.items()}
            for key, members in groups.items():
                texts = futures[key].result()
                for i, text in zip(members, texts, strict=True):
                    if text is None:
                        failed.add(i)
                        continue
                    runner = slots[i].runner
                    assert runner is not None  # it asked, so it runs
                    runner.feed(GenerationOutput(token_ids=segments.encode(text) + eos))
                    slots[i].advance(agent, segments, sampling, limits)
    done = [t for i, s in enumerate(slots) if i not in failed for t in s.trajectories]
    return EpisodeBatch(done, [(slots[i].example.id, slots[i].sample_index) for i in sorted(failed)])


def ask_source(source: TextSource, messages: list[Message], params: Any, n: int) -> list[str | None]:
    """``n`` completions of one prompt; a failed request gives ``None`` for each (counted, never raised)."""
    try:
        texts = source.complete(messages, params, n)
    except RequestFailed:
        return [None] * n
    return (list(texts) + [None] * n)[:n]


def endpoint_from_mapping(raw: Mapping[str, Any], agent_name: str) -> EndpointSpec:
    """An ``EndpointSpec`` from a config mapping; unknown keys are named with the known ones."""
    known = set(EndpointSpec.__dataclass_fields__)
    bad = sorted(set(raw) - known)
    if bad:
        raise ConfigError(f"unknown endpoint option(s) {bad}; known: {', '.join(sorted(known))}")
    spec = EndpointSpec(**{"reasoning_tag": reasoning_tag(agent_name), **dict(raw)})
    return replace(spec)
