"""The token-in/token-out rollout driver: agent conversations → token-level trajectories.

One ``EpisodeRunner`` drives one episode: ``next_request()`` gives the token ids to
continue and the sampling parameters, ``feed(output)`` takes what the model generated,
steps the agent and appends the observation tokens. Two loops drive runners:
``run_episodes`` (sync, many episodes in flight, one batched ``generate`` call per round
— the local engine) and ``run_episode_async`` (one request, an async generate — the veRL
agent-loop adapter). Neither holds any logic of its own beyond scheduling.

Token rules (why: re-rendering a conversation through a chat template re-tokenizes it,
shifts token boundaries and silently corrupts masks):
- the prompt is tokenized once; every later token is either generated (mask 1) or the
  tokens of a *new* chat-template segment (mask 0): the end-of-turn marker after an
  assistant turn and the observation messages with the next generation prompt. Segment
  text comes from rendering a fixed reference conversation with and without the new
  messages, so earlier tokens are never touched;
- generation may run past a stop string; the driver cuts at the first one (and at the
  first EOS); when a turn stopped at a stop string or was cut by the agent, the turn's
  end-of-turn marker is appended as template tokens (mask 0); when the agent keeps only
  a prefix of the turn, only the generated tokens that cover that prefix are kept;
- observations of role ``tool`` become role ``user`` wrapped in
  ``<tool_response>…</tool_response>`` when the tokenizer's chat template cannot render
  ``tool`` (found by rendering a probe).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agents.parsing import cut_at_stop
from agents.types import Agent, EndReason, Episode, EpisodeResult, Example, Message, Trajectory
from tools.errors import ConfigError

if TYPE_CHECKING:
    from tools import Database


@dataclass(frozen=True)
class SamplingParams:
    """What one generation call samples with. ``stop`` strings end a turn (EOS is implied);
    the driver adds each episode's own stop strings and sets ``max_new_tokens`` per call."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_new_tokens: int = 512
    stop: tuple[str, ...] = ()
    logprobs: bool = False
    seed: int | None = None


@dataclass(frozen=True)
class GenerationOutput:
    """Generated token ids (EOS included when it was sampled), their sampling log-probs
    when the engine returns them, and ``finish_reason`` ("stop" or "length")."""

    token_ids: list[int]
    logprobs: list[float] | None = None
    finish_reason: str = "stop"


GenerateFn = Callable[[list[list[int]], SamplingParams], list[GenerationOutput]]
"""Batched, synchronous: one output per prompt, in order (the local engine)."""

AsyncGenerateFn = Callable[[list[int], SamplingParams], Awaitable[GenerationOutput]]
"""One prompt, asynchronous (veRL's ``server_manager.generate`` behind an adapter)."""

Request = tuple[Example, "Database", int]
"""(example, database, sample index within the example's GRPO group)."""


def _positive(name: str, value: int | None) -> None:
    if value is not None and (not isinstance(value, int) or value < 1):
        raise ConfigError(f"RolloutLimits.{name} must be a positive integer or None, got {value!r}")


@dataclass(frozen=True)
class RolloutLimits:
    """Token and turn limits; ``None`` means no limit.

    ``max_turns`` caps turns on top of the agent's own budget (ends "turn_budget");
    ``max_response_tokens`` counts every response token, observations included (ends
    "response_limit"); ``max_context_tokens`` counts prompt + response (ends
    "context_limit"); ``max_tokens_per_turn`` caps one generation call (the turn is handed
    to the agent as generated, e.g. TRUST-SQL's 2,048); ``max_observation_tokens``
    truncates each observation's content (TRUST-SQL: 1,024 in training);
    ``max_prompt_tokens`` ends an over-long prompt before generating (ReToolSQL's 15,500:
    such prompts are dropped, never truncated; the result is flagged ``prompt_too_long``).
    """

    max_turns: int | None = None
    max_response_tokens: int | None = 8192
    max_context_tokens: int | None = 32768
    max_tokens_per_turn: int | None = 2048
    max_observation_tokens: int | None = None
    max_prompt_tokens: int | None = None

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            _positive(f.name, getattr(self, f.name))


# --------------------------------------------------------------- chat template


_SYS, _USR = "SYSTEM_PROBE_TEXT", "USER_PROBE_TEXT"
_MARK = "ASSISTANT_PROBE_MARKER_7f3a"
_TOOL_MARK = "TOOL_PROBE_MARKER_9c1e"


class ChatSegments:
    """Renders only the *new* part of a conversation through a tokenizer's chat template.

    Every delta is taken against a fixed reference conversation ending in an assistant
    turn with a marker, and read after the marker, so templates that rewrite earlier
    turns (e.g. dropping past reasoning) cannot shift the tokens already generated.
    """

    def __init__(self, tokenizer: Any, eos_token_ids: Iterable[int] | None = None) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise ConfigError("the tokenizer has no chat_template; set tokenizer.chat_template before a rollout")
        self.tokenizer = tokenizer
        self._base = [{"role": "system", "content": _SYS}, {"role": "user", "content": _USR}]
        closed = self.render([*self._base, {"role": "assistant", "content": _MARK}], generation_prompt=False)
        if _MARK not in closed:
            raise ConfigError("the chat template does not render assistant messages' content")
        self.end_of_turn = closed[closed.rindex(_MARK) + len(_MARK) :]
        self.renders_tool_role = self._probe_tool_role()
        ids = set(eos_token_ids or ())
        if tokenizer.eos_token_id is not None:
            ids.add(int(tokenizer.eos_token_id))
        eot_ids = self.encode(self.end_of_turn)
        if eot_ids and eot_ids[0] in set(getattr(tokenizer, "all_special_ids", ())):
            ids.add(eot_ids[0])  # e.g. <|im_end|> when eos is <|endoftext|>
        self.eos_ids = frozenset(ids)
        self.end_of_turn_len = len(eot_ids)  # room every turn keeps to close itself

    def render(self, messages: Sequence[Message], generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(
            list(messages), tokenize=False, add_generation_prompt=generation_prompt
        )

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def _probe_tool_role(self) -> bool:
        probe = [*self._base, {"role": "assistant", "content": _MARK}, {"role": "tool", "content": _TOOL_MARK}]
        try:
            return _TOOL_MARK in self.render(probe, generation_prompt=True)
        except Exception:  # jinja raises on roles a template refuses: that is the answer
            return False

    def template_roles(self, observations: Sequence[Message]) -> list[Message]:
        """Observations in roles the template renders (``tool`` → wrapped ``user``)."""
        if self.renders_tool_role:
            return [dict(m) for m in observations]
        out: list[Message] = []
        for message in observations:
            if message.get("role") != "tool":
                out.append(dict(message))
                continue
            wrapped = f"<tool_response>\n{message.get('content', '')}\n</tool_response>"
            if out and out[-1].get("role") == "user" and out[-1].get("_merged_tool"):
                out[-1]["content"] += "\n" + wrapped
            else:
                out.append({"role": "user", "content": wrapped, "_merged_tool": True})
        return [{k: v for k, v in m.items() if k != "_merged_tool"} for m in out]

    def prompt_ids(self, messages: Sequence[Message]) -> list[int]:
        return self.encode(self.render(messages, generation_prompt=True))

    def segment_text(self, messages: Sequence[Message]) -> str:
        """Template text that follows a closed assistant turn: ``messages`` + the next
        generation prompt."""
        closed = [*self._base, {"role": "assistant", "content": _MARK}]
        full = self.render([*closed, *messages], generation_prompt=True)
        after = full[full.rindex(_MARK) + len(_MARK) :]
        if not after.startswith(self.end_of_turn):
            raise ConfigError(
                "the chat template renders an assistant turn differently once messages follow it; "
                "the driver cannot append observation tokens without re-tokenizing"
            )
        return after[len(self.end_of_turn) :]


# ------------------------------------------------------------------ the runner


@dataclass
class _Tokens:
    """The growing response: ids and their per-token annotations, always equal length."""

    ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    turn: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)

    def extend(self, ids: Sequence[int], mask: int, turn: int, logprobs: Sequence[float] | None = None) -> None:
        self.ids.extend(ids)
        self.mask.extend([mask] * len(ids))
        self.turn.extend([turn] * len(ids))
        self.logprobs.extend(list(logprobs) if logprobs is not None else [0.0] * len(ids))


class EpisodeRunner:
    """Drives one episode token by token (see the module docstring for the rules)."""

    def __init__(
        self,
        episode: Episode,
        segments: ChatSegments,
        sampling: SamplingParams,
        limits: RolloutLimits,
        example_id: str,
        sample_index: int = 0,
    ) -> None:
        self.episode, self.segments, self.sampling, self.limits = episode, segments, sampling, limits
        self.example_id, self.sample_index = example_id, sample_index
        self.stop = tuple(dict.fromkeys((*episode.stop, *sampling.stop)))
        # tool-role messages in the prompt (TRUST-SQL's Schema-Prefill turn) render as observations do
        self.conversation: list[Message] = segments.template_roles([dict(m) for m in episode.messages])
        self.prompt_ids = segments.prompt_ids(self.conversation)
        self.tokens = _Tokens()
        self.turns = 0
        self.flags: dict[str, Any] = {}
        self._has_logprobs: bool | None = None
        self._budget, self._budget_reason = 0, ""
        self._result: EpisodeResult | None = None
        too_long = (limits.max_prompt_tokens is not None and len(self.prompt_ids) > limits.max_prompt_tokens) or (
            limits.max_context_tokens is not None and len(self.prompt_ids) >= limits.max_context_tokens
        )
        if too_long:
            self.flags["prompt_too_long"] = len(self.prompt_ids)
            self._finish("context_limit")
        else:
            self._check_limits()

    # ------------------------------------------------------------ public surface
    @property
    def done(self) -> bool:
        return self._result is not None

    def next_request(self) -> tuple[list[int], SamplingParams]:
        """Token ids to continue from and the sampling parameters of this call."""
        if self.done:
            raise RuntimeError("the episode is finished; collect trajectory()")
        self._budget, self._budget_reason = self._turn_budget()
        params = dataclasses.replace(self.sampling, max_new_tokens=self._budget, stop=self.stop)
        return self.prompt_ids + self.tokens.ids, params

    def feed(self, output: GenerationOutput) -> None:
        """Take one generation: cut it, step the agent, append observation tokens."""
        if self.done:
            raise RuntimeError("the episode is finished; feed() was called once too often")
        if self._budget <= 0:
            self._budget, self._budget_reason = self._turn_budget()
        if output.logprobs is not None and len(output.logprobs) != len(output.token_ids):
            raise ValueError(
                f"generate returned {len(output.logprobs)} log-probs for {len(output.token_ids)} tokens; "
                "return one per token or None"
            )
        ids = list(output.token_ids)[: self._budget]
        lps = list(output.logprobs)[: len(ids)] if output.logprobs is not None else None
        self._has_logprobs = (
            (lps is not None) if self._has_logprobs is None else (self._has_logprobs and lps is not None)
        )
        eos_at = next((i for i, t in enumerate(ids) if t in self.segments.eos_ids), None)
        body = ids[:eos_at] if eos_at is not None else ids
        eos = (ids[eos_at], lps[eos_at] if lps else 0.0) if eos_at is not None else None
        text = self.segments.decode(body)
        kept, stop = cut_at_stop(text, self.stop)
        if stop is not None and len(kept) < len(text):  # overshoot past the stop: cut it (and any EOS)
            body, eos = body[: self._cover(body, kept)], None
        elif stop is None and eos is None and len(ids) >= self._budget and self._budget_reason != "turn":
            # out of response/context budget mid-turn: keep the tokens, never step a partial turn
            self.tokens.extend(body, 1, self.turns, lps[: len(body)] if lps else None)
            self.conversation.append({"role": "assistant", "content": text})
            self._finish(self._budget_reason)  # type: ignore[arg-type]
            return
        self._step(kept, body, eos, lps)

    def trajectory(self) -> Trajectory:
        if self._result is None:
            raise RuntimeError("the episode is still running")
        return Trajectory(
            example_id=self.example_id,
            role=self._result.role,
            prompt_ids=list(self.prompt_ids),
            response_ids=list(self.tokens.ids),
            response_mask=list(self.tokens.mask),
            turn_index=list(self.tokens.turn),
            result=self._result,
            logprobs=list(self.tokens.logprobs) if self._has_logprobs else None,
            group_id=f"{self.example_id}:{self._result.role}",
            sample_index=self.sample_index,
            messages=[dict(m) for m in self.conversation],
        )

    # ------------------------------------------------------------------ internals
    def _turn_budget(self) -> tuple[int, str]:
        """Max new tokens for this call and which limit binds ("turn" or an end reason).

        The response and context budgets keep room for the end-of-turn marker, so a turn
        that fits can always be closed."""
        reserve = self.segments.end_of_turn_len
        options = [(self.sampling.max_new_tokens, "turn")]
        if self.limits.max_tokens_per_turn is not None:
            options.append((self.limits.max_tokens_per_turn, "turn"))
        if self.limits.max_response_tokens is not None:
            options.append((self.limits.max_response_tokens - len(self.tokens.ids) - reserve, "response_limit"))
        if self.limits.max_context_tokens is not None:
            used = len(self.prompt_ids) + len(self.tokens.ids)
            options.append((self.limits.max_context_tokens - used - reserve, "context_limit"))
        budget = min(n for n, _ in options)
        reason = "turn" if any(n == budget and r == "turn" for n, r in options) else min(options)[1]
        return budget, reason

    def _cover(self, body: list[int], kept: str) -> int:
        """Fewest leading tokens of ``body`` whose decoded text covers ``kept``."""
        lo, hi = 0, len(body)
        while lo < hi:  # decoded length grows with the token count
            mid = (lo + hi) // 2
            if len(self.segments.decode(body[:mid])) >= len(kept):
                hi = mid
            else:
                lo = mid + 1
        while lo < len(body) and not self.segments.decode(body[:lo]).startswith(kept):
            lo += 1  # a split multi-byte character decoded as a replacement char
        return lo

    def _step(self, kept: str, body: list[int], eos: tuple[int, float] | None, lps: list[float] | None) -> None:
        step = self.episode.step(kept)
        agent_text = step.text if step.text is not None else kept
        if len(agent_text) < len(kept):  # the agent cut the turn (DualSQL after a code fence)
            body, eos = body[: self._cover(body, agent_text)], None
        turn = self.turns
        self.tokens.extend(body, 1, turn, lps[: len(body)] if lps else None)
        self._close_turn(eos, turn)
        self.conversation.append({"role": "assistant", "content": self.segments.decode(body)})
        self.turns += 1
        if step.done:
            self._finish(None)
            return
        self._observe(step.observations, turn)
        if not self.done:
            self._check_limits()

    def _close_turn(self, eos: tuple[int, float] | None, turn: int) -> None:
        """Append the end-of-turn marker: the sampled EOS (mask 1) and the rest of the
        template's marker, or the whole marker as template tokens (mask 0)."""
        eot = self.segments.end_of_turn
        if eos is not None:
            eos_id, eos_logprob = eos
            self.tokens.extend([eos_id], 1, turn, [eos_logprob])
            eos_text = self.segments.decode([eos_id])
            eot = eot[len(eos_text) :] if eot.startswith(eos_text) else eot
        self.tokens.extend(self.segments.encode(eot), 0, turn)

    def _observe(self, observations: Sequence[Message], turn: int) -> None:
        messages = self.segments.template_roles([self._truncate(m) for m in observations])
        ids = self.segments.encode(self.segments.segment_text(messages))
        reason = self._overflow(len(ids))
        if reason is not None:
            self._finish(reason)
            return
        self.tokens.extend(ids, 0, turn)
        self.conversation.extend(messages)

    def _truncate(self, message: Message) -> Message:
        cap = self.limits.max_observation_tokens
        content = str(message.get("content", ""))
        if cap is None:
            return dict(message)
        ids = self.segments.encode(content)
        if len(ids) <= cap:
            return dict(message)
        self.flags["observations_truncated"] = self.flags.get("observations_truncated", 0) + 1
        return {**message, "content": self.segments.decode(ids[:cap]) + "\n…[truncated]"}

    def _overflow(self, extra: int) -> EndReason | None:
        """Which limit ``extra`` more response tokens would break (None if none)."""
        if (
            self.limits.max_response_tokens is not None
            and len(self.tokens.ids) + extra > self.limits.max_response_tokens
        ):
            return "response_limit"
        used = len(self.prompt_ids) + len(self.tokens.ids) + extra
        if self.limits.max_context_tokens is not None and used > self.limits.max_context_tokens:
            return "context_limit"
        return None

    def _check_limits(self) -> None:
        if self.limits.max_turns is not None and self.turns >= self.limits.max_turns:
            self._finish("turn_budget")
        elif (reason := self._overflow(1 + self.segments.end_of_turn_len)) is not None:
            self._finish(reason)

    def _finish(self, reason: EndReason | None) -> None:
        if reason is not None:
            self.episode.end(reason)
        result = self.episode.result()
        result.flags.update(self.flags)
        self._result = result


# -------------------------------------------------------------------- drivers


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
class _Slot:
    """One request's progress through its episodes (DualSQL: linker, then generator)."""

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
    slots = [_Slot(example, db, index) for example, db, index in requests]
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
