"""What every design's episode shares: turn bookkeeping, tool calls, results.

A design subclasses ``BaseEpisode`` and implements ``_turn(text) -> TurnOutcome``; the
base class cuts the text at the stop strings, records the turn, applies the turn budget
and builds the ``Step``. Only ``step`` and ``end`` mutate an episode (skyrl-gym's
environment contract), and neither raises on model text.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agents.parsing import ParsedCall, ToolCallParser, cut_at_stop
from agents.types import EndReason, EpisodeResult, Message, SchemaSelection, Step, ToolCall, TurnRecord
from rex.sql import extract_sql
from tools import Backend, ToolBox
from tools import schema as serialisers
from tools.errors import ConfigError

INVALID = "invalid"


@dataclass
class TurnOutcome:
    """A design's verdict on one turn (the base class turns it into a record and a Step)."""

    phase: str
    format_ok: bool
    reason: str = ""
    observations: tuple[Message, ...] = ()
    done: bool = False
    end_reason: EndReason = "answer"
    call: ToolCall | None = None
    tool_outcome: str | None = None
    text: str | None = None  # the kept text when the design cuts the turn


@dataclass
class ToolRun:
    """One executed tool call: the observation message and its outcome."""

    observation: Message
    outcome: str  # "ok" or a ToolError kind


def tool_message(name: str, content: str) -> Message:
    """An observation: role ``tool`` (the rollout driver re-roles it if the template must)."""
    return {"role": "tool", "name": name, "content": content}


def tools_block(schemas: Sequence[Mapping[str, Any]]) -> str:
    """Tool descriptions for the system prompt, one OpenAI function schema per line."""
    return "\n".join(json.dumps(schema, ensure_ascii=False) for schema in schemas)


def run_tool(toolbox: ToolBox, call: ToolCall) -> ToolRun:
    """Run a parsed call on the toolbox (which never raises) and wrap its response."""
    response = toolbox.call(call.name, dict(call.arguments))
    outcome = "ok" if response.ok else (response.error_kind or "other")
    return ToolRun(tool_message(call.name, response.text), outcome)


def sql_from_text(text: str) -> str | None:
    """The SQL in an answer block (fenced or bare), via ``rex.sql.extract_sql``."""
    sql = extract_sql(text)
    if sql is None:
        return None
    sql = sql.strip()
    return sql or None


class BaseEpisode(ABC):
    """Turn bookkeeping shared by the four designs (see the module docstring)."""

    def __init__(
        self,
        role: str,
        messages: list[Message],
        tool_schemas: list[dict[str, Any]],
        stop: tuple[str, ...],
        max_turns: int,
    ) -> None:
        self.role = role
        self.messages = messages
        self.tool_schemas = tool_schemas
        self.stop = stop
        self.max_turns = max_turns
        self.turns: list[TurnRecord] = []
        self.final_sql: str | None = None
        self.schema: SchemaSelection | None = None
        self.flags: dict[str, Any] = {}
        self._end_reason: EndReason | None = None

    # --------------------------------------------------------------- the contract
    @property
    def done(self) -> bool:
        return self._end_reason is not None

    def step(self, assistant_text: str) -> Step:
        """Judge one assistant turn, run its tool if any, and say what comes next."""
        if self._end_reason is not None:
            raise RuntimeError(f"{self.role} episode already ended ({self._end_reason}); start a new one")
        text, _ = cut_at_stop(assistant_text, self.stop)
        outcome = self._turn(text)
        kept = outcome.text if outcome.text is not None else text
        self.turns.append(
            TurnRecord(
                index=len(self.turns),
                phase=outcome.phase,
                text_chars=len(kept),
                format_ok=outcome.format_ok,
                format_reason=outcome.reason,
                tool_name=outcome.call.name if outcome.call else None,
                tool_arguments=dict(outcome.call.arguments) if outcome.call else None,
                tool_outcome=outcome.tool_outcome,
                text=kept,
            )
        )
        done = outcome.done
        if done:
            self._end_reason = outcome.end_reason
        elif len(self.turns) >= self.max_turns:
            done, self._end_reason = True, "turn_budget"
        return Step(
            observations=() if done else outcome.observations,
            done=done,
            phase=outcome.phase,
            format_ok=outcome.format_ok,
            format_reason=outcome.reason,
            text=kept,
        )

    def end(self, reason: EndReason) -> None:
        """Stop the episode from outside (rollout limits); a finished episode keeps its reason."""
        if self._end_reason is None:
            self._end_reason = reason

    def result(self) -> EpisodeResult:
        if self._end_reason is None:
            raise RuntimeError(f"{self.role} episode is still running; call end(reason) before result()")
        return EpisodeResult(
            role=self.role,
            final_sql=self.final_sql,
            schema=self.schema,
            turns=list(self.turns),
            end_reason=self._end_reason,
            flags={**self.flags, **self._result_flags()},
        )

    # ------------------------------------------------------------ for subclasses
    @abstractmethod
    def _turn(self, text: str) -> TurnOutcome:
        """The design's verdict on one turn (already cut at the stop strings)."""

    def _result_flags(self) -> dict[str, Any]:
        return {}


def invalid(reason: str, observation: Message | None = None, **kwargs: Any) -> TurnOutcome:
    """A failed turn; ``observation`` tells the model what was wrong."""
    return TurnOutcome(
        phase=INVALID,
        format_ok=False,
        reason=reason,
        observations=(observation,) if observation else (),
        **kwargs,
    )


def single_call(parser: ToolCallParser, text: str) -> tuple[ParsedCall | None, str]:
    """The one tool call of ``text`` (parsed or not), or a reason there is not exactly one."""
    calls = parser.parse(text)
    if len(calls) != 1 or parser.count(text) != 1:
        return None, f"expected exactly one <tool_call>…</tool_call>, found {max(len(calls), parser.count(text))}"
    return calls[0], ""


def make_toolbox(db: Backend, tool_names: Sequence[str], preset: str) -> ToolBox:
    return ToolBox(db, list(tool_names), preset)


SchemaRenderer = Callable[..., str]


def schema_renderer(fmt: str) -> SchemaRenderer:
    """The ``tools.schema`` serialiser called ``fmt`` (m_schema, ddl, compact)."""
    table = {"m_schema": "m_schema", "ddl": "ddl_schema", "compact": "compact_schema"}
    if fmt not in table:
        raise ConfigError(f"unknown schema_format {fmt!r}; use one of {', '.join(table)}")
    return getattr(serialisers, table[fmt])
