"""One episode driven token by token: ``EpisodeRunner``.

``next_request()`` gives the token ids to continue and the sampling parameters,
``feed(output)`` takes what the model generated, steps the agent and appends the
observation tokens; ``trajectory()`` is the finished record. The loops that schedule
runners are in ``training.rollout``.

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

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agents.parsing import cut_at_stop
from agents.types import EndReason, Episode, EpisodeResult, Message, Trajectory
from training.rollout.chat_segments import ChatSegments
from training.rollout.driver_types import GenerationOutput, RolloutLimits, SamplingParams


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
