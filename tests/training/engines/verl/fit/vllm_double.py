"""CPU doubles for the generation half of veRL's trainer: the vLLM server (a Ray actor
behind veRL's real ``LLMServerClient`` and load balancer) and the checkpoint engine that
syncs the weights of the FSDP worker group double (``fsdp_double.py``) into it.

Each double does the real computation on the tiny test model and follows the contract of
the part it replaces, read from veRL 0.9.1's source:

- :class:`TinyServer` - ``vLLMHttpServer.generate``: the prompt-room error, the
  ``max_tokens`` clamp, stop at EOS (kept in ``token_ids``) or at a stop string (its
  tokens kept), ``stop_reason="completed"``, log-probs of the processed (temperature
  scaled) distribution when asked for, ``extra_fields={"global_steps": version}``; it
  refuses to generate while asleep (veRL sleeps the replicas between rollout and the
  weight update). Weights are the worker group's, copied at ``update_weights``.
  Which tokens are written: a random two-layer model cannot write a tool call, so the
  server has a *writer* per session (the sticky request id ``{uid}-{session}`` reaches
  it because the tests set ``rollout.full_determinism``): ``"sample"`` samples from the
  current weights; ``"script"`` / ``"wrong"`` write the design's scripted turn (the
  second with a wrong final SQL) token by token under the same stop and length rules.
  Every token's log-prob is the current weights' in both cases, as vLLM reports it.
  For the async trainers it also follows ``abort_all_requests`` / ``resume_generation``:
  an abort closes the admission gate (later requests wait at it, or are answered
  ``aborted`` with no tokens under ``reject_request``), cuts every request in flight after
  its current token (answered ``stop_reason="aborted"`` with the tokens so far, as
  vLLM's ``pause_generation`` does) and returns once none is left; a scripted request sent
  again with those tokens continues its script where it was cut. A *latency model*
  (:meth:`TinyServer.set_latency`) sleeps after each token - ``token_seconds`` times a
  per-request factor drawn from a long-tailed distribution - so generation takes wall
  time and overlaps the trainer's work, and an update finds requests in flight;
  :meth:`TinyServer.hold_until_cut` makes sure of it, holding fresh scripted requests
  after their first token until an abort cuts them.
- :class:`TinyCheckpointEngine` - ``CheckpointEngineManager`` with the naive backend:
  ``update_weights(version)`` copies the weights into the server and wakes it (under
  LoRA the base once, then the adapter, which the server applies with PEFT as vLLM's LoRA
  layers do: ``fsdp_double.TinyActorWorkerGroup.rollout_updates``);
  ``sleep_replicas()`` puts it to sleep; ``abort_replicas`` / ``resume_generation_replicas``
  pass to the server. ``partial=True`` is the NCCL backend of ``separate_async``'s
  standalone pool: ``update_weights`` aborts, loads and resumes, the server never sleeping.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import ray
import torch

from tests.training.engines.verl.fit.fsdp_double import TinyActorWorkerGroup


@ray.remote
class TinyServer:
    """Stands in for a vLLM server replica; see the module docstring."""

    def __init__(self) -> None:  # the model, script and state come with reset()
        torch.set_num_threads(1)

    def reset(
        self,
        model_path: str,
        rollout: dict[str, Any],
        script: dict[str, list[str]],
        writers: dict[str, str],
        wrong: dict[str, list[str]] | None = None,
        seed: int = 0,
    ) -> None:
        """A replica as new: the model from ``model_path``, asleep, no latency, no history
        (the fit tier's next module reuses the server; see ``harness.start_session``)."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
        self.max_model_len = int(rollout["max_model_len"])
        self.prompt_length, self.response_length = int(rollout["prompt_length"]), int(rollout["response_length"])
        self.script, self.wrong, self.writers = script, wrong or script, dict(writers)
        self.global_steps: int | None = None
        self.awake = False
        self.rng = random.Random(seed)
        self.calls: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []  # aborts, resumes and weight loads, in order
        self.token_seconds, self.tail = 0.0, 1.0
        self._holds_left, self._hold_timeout = 0, 300.0  # fresh requests to hold until an abort cuts them
        self.factors: list[float] = []  # an empirical factor distribution (set_latency), else the tail model
        self.busy_seconds, self._busy_since = 0.0, 0.0  # wall time with at least one request generating
        self._paused = self._rejecting = False
        self._gate: asyncio.Event | None = None
        self._cut = 0  # aborts so far: a request started before the latest one stops
        self._running = 0
        self._resume_at: dict[str, int] = {}  # request id -> script tokens written before an abort

    # ------------------------------------------------------------------ replica control

    def update_weights(
        self,
        state: dict[str, torch.Tensor],
        global_steps: int | None,
        peft_config: dict[str, Any] | None = None,
        base_sync_done: bool = True,
    ) -> None:
        if peft_config is None:
            self.model.load_state_dict(state)
        elif not base_sync_done:  # the base, under the names of vLLM's LoRA layers
            if hasattr(self.model, "peft_config"):  # an earlier fit's adapter: a new job's vLLM has none
                self.model = self.model.unload()
            self.model.load_state_dict({k.replace(".base_layer", ""): v for k, v in state.items()})
        else:  # the adapter: y = W x + alpha / r * B A x, as vLLM's LoRA layers compute it
            from peft import get_peft_config, get_peft_model, set_peft_model_state_dict

            if not hasattr(self.model, "peft_config"):
                self.model = get_peft_model(self.model, get_peft_config(dict(peft_config))).eval()
            set_peft_model_state_dict(self.model, state)
        if global_steps is not None:
            self.global_steps = int(global_steps)
        self.awake = True
        self.events.append({"event": "update", "version": self.global_steps, "running": self._running})

    def set_latency(self, token_seconds: float, tail: float = 1.0, factors: list[float] | None = None) -> None:
        """Each token takes ``token_seconds`` x a factor drawn per request, uniform on
        ``[1, tail]`` for three requests in four and ``tail`` x that for the fourth (the
        long multi-turn tail); with ``factors``, drawn from that list instead (an empirical
        distribution: ``benchmarks/bench_async_throughput.py``)."""
        self.token_seconds, self.tail = float(token_seconds), float(tail)
        self.factors = [float(f) for f in factors or []]

    def hold_until_cut(self, requests: int = 1, timeout: float = 300.0) -> None:
        """Hold the next ``requests`` fresh scripted requests after their first token until an abort
        cuts them, so the first update is sure to find them in flight and the next weights
        to continue them (without it that depends on the latency draw). ``timeout``: a held
        request goes on after that many seconds with no abort (a test then fails, not hangs)."""
        self._holds_left, self._hold_timeout = int(requests), float(timeout)

    def busy(self) -> float:
        """Seconds so far with at least one request generating."""
        return self.busy_seconds + (time.monotonic() - self._busy_since if self._running else 0.0)

    async def abort_all_requests(self, reject_request: bool = False) -> dict[str, Any]:
        self._paused, self._rejecting = True, bool(reject_request)
        self._gate_event().clear()
        self._cut += 1
        running = self._running
        while self._running:
            await asyncio.sleep(0.005)
        self.events.append({"event": "abort", "version": self.global_steps, "running": running})
        return {"aborted_count": running}

    async def resume_generation(self) -> None:
        self._paused = self._rejecting = False
        self._gate_event().set()
        self.events.append({"event": "resume", "version": self.global_steps})

    def _gate_event(self) -> asyncio.Event:
        if self._gate is None:
            self._gate = asyncio.Event()
            self._gate.set()
        return self._gate

    def sleep(self) -> None:
        self.awake = False

    def set_writers(self, writers: dict[str, str]) -> None:
        self.writers = dict(writers)

    def history(self) -> list[dict[str, Any]]:
        return list(self.calls)

    def events_log(self) -> list[dict[str, Any]]:
        return list(self.events)

    # ------------------------------------------------------------------ vLLMHttpServer.generate

    async def generate(
        self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str, **kwargs: Any
    ) -> Any:
        from verl.workers.rollout.replica import TokenOutput

        while self._paused:  # vLLMHttpServer._park_until_admitted
            if self._rejecting:
                return TokenOutput(
                    token_ids=[],
                    log_probs=None,
                    stop_reason="aborted",
                    extra_fields={"global_steps": self.global_steps},
                )
            await self._gate_event().wait()
        if not self.awake:
            raise RuntimeError("generate() on a sleeping replica: veRL wakes it with update_weights first")
        prompt_ids = [int(t) for t in prompt_ids]
        params = dict(sampling_params)
        room = self.max_model_len - len(prompt_ids)
        if room < 1:
            raise ValueError(
                f"Prompt length ({len(prompt_ids)}) leaves no room to generate within the model's maximum context "
                f"length ({self.max_model_len}); need at least 1 token of headroom."
            )
        if "max_tokens" in params:
            max_tokens = params.pop("max_tokens")
        else:
            max_tokens = min(self.response_length, self.prompt_length + self.response_length - len(prompt_ids))
        max_tokens = max(1, min(int(max_tokens), room))
        temperature = float(params.get("temperature", 1.0))
        writer = self._writer(request_id)
        written = self._resume_at.pop(request_id, 0)  # a request cut by an abort, sent again
        forced = None if writer == "sample" else self._scripted(prompt_ids, writer)[written:]
        delay = self.token_seconds * self._factor()
        hold = self._holds_left > 0 and forced is not None and not written  # a fresh scripted request
        self._holds_left -= hold
        if not self._running:
            self._busy_since = time.monotonic()
        self._running += 1
        try:
            ids, logps, cut = await self._write(prompt_ids, forced, max_tokens, temperature, params, delay, hold)
        finally:
            self._running -= 1
            if not self._running:
                self.busy_seconds += time.monotonic() - self._busy_since
        if cut:
            self._resume_at[request_id] = written + len(ids)
        self.calls.append(
            {
                "request_id": request_id,
                "writer": writer,
                "prompt_len": len(prompt_ids),
                "max_tokens": max_tokens,
                "n": len(ids),
                "version": self.global_steps,
                "aborted": cut,
                "resumed_at": written,
            }
        )
        return TokenOutput(
            token_ids=ids,
            log_probs=logps if params.get("logprobs") else None,
            stop_reason="aborted" if cut else "completed",
            extra_fields={"global_steps": self.global_steps, "num_cached_tokens": None},
        )

    def _factor(self) -> float:
        if self.factors:
            return self.rng.choice(self.factors)
        if self.tail <= 1.0:
            return 1.0
        factor = self.rng.uniform(1.0, self.tail)
        return factor * self.tail if self.rng.random() < 0.25 else factor

    def _writer(self, request_id: str) -> str:
        session = request_id.rsplit("-", 1)[-1]
        return self.writers.get(session, self.writers.get("*", "script"))

    def _scripted(self, prompt_ids: list[int], writer: str) -> list[int]:
        text = self.tokenizer.decode(prompt_ids)
        script = self.wrong if writer == "wrong" else self.script
        role = "generator" if "You are the SQL generator" in text else next(iter(script))
        turn = text.count("<|im_start|>assistant") - 1
        turns = script[role]
        body = self.tokenizer.encode(turns[min(turn, len(turns) - 1)], add_special_tokens=False)
        return body + [self.tokenizer.eos_token_id]

    async def _write(
        self,
        prompt_ids: list[int],
        forced: list[int] | None,
        max_tokens: int,
        temperature: float,
        params: dict[str, Any],
        delay: float = 0.0,
        hold: bool = False,
    ) -> tuple[list[int], list[float], bool]:
        """Token by token under vLLM's stop rules: EOS (kept), a stop string (its tokens
        kept), or ``max_tokens``; log-probs of the processed distribution. ``delay``
        seconds after each token; an abort meanwhile cuts the request there (True)."""
        if forced is not None:
            return await self._write_forced(prompt_ids, forced, max_tokens, temperature, params, delay, hold)
        stops = list(params.get("stop") or [])
        eos = self.tokenizer.eos_token_id
        ids: list[int] = []
        logps: list[float] = []
        context = torch.tensor([prompt_ids])
        past = None
        started = self._cut
        with torch.no_grad():
            while len(ids) < max_tokens:
                if delay > 0:
                    await asyncio.sleep(delay)
                if self._cut != started:
                    return ids, logps, True
                out = self.model(input_ids=context, past_key_values=past, use_cache=True)
                past = out.past_key_values
                logits = out.logits[0, -1].float()
                scaled = logits / temperature if temperature > 0 else logits
                logp = torch.log_softmax(scaled, dim=-1)
                if temperature <= 0:
                    token = int(torch.argmax(logits))
                else:
                    token = self._sample(logp, params)
                ids.append(int(token))
                logps.append(float(logp[token]))
                if token == eos and not params.get("ignore_eos", False):
                    break
                if stops and any(s in self.tokenizer.decode(ids, skip_special_tokens=True) for s in stops):
                    break
                context = torch.tensor([[token]])
        return ids, logps, False

    async def _write_forced(
        self,
        prompt_ids: list[int],
        forced: list[int],
        max_tokens: int,
        temperature: float,
        params: dict[str, Any],
        delay: float,
        hold: bool = False,
    ) -> tuple[list[int], list[float], bool]:
        """:meth:`_write` for a scripted request: its tokens are known, so one forward pass
        over them gives every log-prob (what the token-by-token pass computes, at a
        fraction of the CPU); the latency and an abort still act after each token, and a
        held request (:meth:`hold_until_cut`) waits after its first token for an abort."""
        stops = list(params.get("stop") or [])
        eos = self.tokenizer.eos_token_id
        ids: list[int] = []
        while len(ids) < max_tokens:  # past the script's end: its last token again, as before
            ids.append(int(forced[min(len(ids), len(forced) - 1)]))
            if ids[-1] == eos and not params.get("ignore_eos", False):
                break
            if stops and any(s in self.tokenizer.decode(ids, skip_special_tokens=True) for s in stops):
                break
        with torch.no_grad():
            logits = self.model(input_ids=torch.tensor([prompt_ids + ids[:-1]]), logits_to_keep=len(ids)).logits
        scaled = logits[0].float() / temperature if temperature > 0 else logits[0].float()
        logps = torch.log_softmax(scaled, dim=-1).gather(1, torch.tensor(ids)[:, None])[:, 0].tolist()
        started = self._cut
        for n in range(len(ids)):
            if delay > 0:
                await asyncio.sleep(delay)
            if self._cut != started:
                return ids[:n], logps[:n], True
            if n == 1 and hold:
                await self._wait_for_a_cut(started)
        return ids, logps, False

    async def _wait_for_a_cut(self, started: int) -> None:
        deadline = time.monotonic() + self._hold_timeout
        while self._cut == started and time.monotonic() < deadline:
            await asyncio.sleep(0.005)

    def _sample(self, logp: torch.Tensor, params: dict[str, Any]) -> int:
        probs = logp.exp()
        top_k = int(params.get("top_k", -1) or -1)
        if top_k > 0:
            kth = torch.topk(probs, top_k).values[-1]
            probs = torch.where(probs >= kth, probs, torch.zeros_like(probs))
        top_p = float(params.get("top_p", 1.0))
        if top_p < 1.0:
            sorted_p, order = torch.sort(probs, descending=True)
            keep = (sorted_p.cumsum(0) - sorted_p) < top_p * sorted_p.sum()
            probs = torch.zeros_like(probs).scatter(0, order, sorted_p * keep)
        generator = torch.Generator().manual_seed(self.rng.randrange(2**31))
        return int(torch.multinomial(probs / probs.sum(), 1, generator=generator))


def server_args(config: Any) -> tuple[str, dict[str, Any]]:
    """:meth:`TinyServer.reset`'s model path and rollout limits from a veRL config."""
    rollout = config.actor_rollout_ref.rollout
    values = {
        "max_model_len": rollout.max_model_len,
        "prompt_length": rollout.prompt_length,
        "response_length": rollout.response_length,
    }
    return str(config.actor_rollout_ref.model.path), values


class TinyServerManager:
    """Stands in for ``LLMServerManager``: one :class:`TinyServer` replica registered in
    veRL's real global load balancer; clients are veRL's real ``LLMServerClient``."""

    def __init__(
        self,
        config: Any,
        script: dict[str, list[str]],
        writers: dict[str, str],
        wrong: dict[str, list[str]] | None = None,
    ) -> None:
        from verl.workers.rollout.router import get_router_handle

        self.server = TinyServer.remote()
        self.reconfigure(config, script, writers, wrong)
        self.global_load_balancer = get_router_handle(
            servers={"tiny-server-0": self.server},
            full_determinism=bool(config.actor_rollout_ref.rollout.get("full_determinism", False)),
        )

    def reconfigure(
        self,
        config: Any,
        script: dict[str, list[str]],
        writers: dict[str, str],
        wrong: dict[str, list[str]] | None = None,
    ) -> None:
        """The server (reset as new, :meth:`TinyServer.reset`) for ``config`` and ``script``;
        the fit tier's next module calls it again on the same server and load balancer."""
        self.config = config
        ray.get(self.server.reset.remote(*server_args(config), script, writers, wrong))

    def get_client(self, client_cls: Any = None) -> Any:
        from verl.workers.rollout.llm_server import LLMServerClient

        return (client_cls or LLMServerClient)(config=self.config, load_balancer_handle=self.global_load_balancer)

    def get_replicas(self) -> list[Any]:
        return []


class TinyCheckpointEngine:
    """Stands in for ``CheckpointEngineManager`` (naive backend) between the two doubles."""

    def __init__(self, group: TinyActorWorkerGroup, server: Any, partial: bool = False) -> None:
        self.group, self.server, self.partial = group, server, partial
        self.versions: list[int | None] = []

    def update_weights(self, global_steps: int | None = None) -> dict[str, Any]:
        if self.server is None:  # no replica of this kind (separate_async without hybrid replicas)
            return {}
        if self.partial:
            self.abort_replicas()
        for state, peft_config, base_sync_done in self.group.rollout_updates():
            ray.get(self.server.update_weights.remote(state, global_steps, peft_config, base_sync_done))
        self.versions.append(global_steps)
        if self.partial:
            self.resume_generation_replicas()
        return {}

    def sleep_replicas(self) -> None:
        if self.server is not None:
            ray.get(self.server.sleep.remote())

    def abort_replicas(self, reject_request: bool = False) -> None:
        if self.server is not None:
            ray.get(self.server.abort_all_requests.remote(reject_request=reject_request))

    def resume_generation_replicas(self) -> None:
        if self.server is not None:
            ray.get(self.server.resume_generation.remote())
