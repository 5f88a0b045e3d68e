"""The client of an OpenAI-compatible chat endpoint (``EndpointSource``: vLLM, SGLang,
llama.cpp, a hosted API), a text source for teachers, mining and ``eval.run``.

Server quirks handled here, documented beside the code: the matched stop string that servers
strip is restored; a ``reasoning_content`` (or ``reasoning``) field becomes the agent's
reasoning block (``<think>``, or the tag its class declares as ``reasoning_tag``); ``n > 1``
is sent when the server honours it (else one request per sample); timeouts, HTTP 429/5xx and
malformed bodies are retried with exponential backoff, after which the request counts as
*failed* (``RequestFailed``). The API key comes from the environment variable
``api_key_env`` names.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from agents.types import Message
from tools.errors import ConfigError


def reasoning_tag(agent_name: str) -> str:
    """The tag agent ``agent_name``'s turns wrap their reasoning in: its class's
    ``reasoning_tag`` (``<think>`` when it declares none)."""
    from agents import get_agent

    return str(getattr(get_agent(agent_name), "reasoning_tag", "think"))


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


def endpoint_from_mapping(raw: Mapping[str, Any], agent_name: str) -> EndpointSpec:
    """An ``EndpointSpec`` from a config mapping; unknown keys are named with the known ones."""
    known = set(EndpointSpec.__dataclass_fields__)
    bad = sorted(set(raw) - known)
    if bad:
        raise ConfigError(f"unknown endpoint option(s) {bad}; known: {', '.join(sorted(known))}")
    spec = EndpointSpec(**{"reasoning_tag": reasoning_tag(agent_name), **dict(raw)})
    return replace(spec)
