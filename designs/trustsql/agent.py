"""TRUST-SQL (README.md): unknown schema, four actions, a propose checkpoint.

No schema in the prompt. Each turn: exactly one ``<think>`` block, exactly one
``<action>X</action>`` with X one of the four actions, and the action's block
(``<tool_call>`` for explore_schema / generate_sql, ``<schema>`` for propose_schema,
``<answer>`` for confirm_answer). An unreadable turn is answered with the message that
lists the four formats and the episode goes on; confirm_answer ends it.

The schema track of Phase-Aware GRPO needs the end of the last valid propose turn:
``schema_span_turn`` gives it (falling back to the last valid explore turn, flagged).

Phase order (§3.1: Propose is "a mandatory cognitive checkpoint … before SQL generation"):
with ``enforce_phase_order`` (the default) each action needs an earlier valid turn of the
action before it in the protocol - propose needs an explore, generate a propose, confirm a
generate; explore may come at any time. An out-of-order turn is invalid (its query does
not run) and its reply says what must come first.

``protocol`` picks the interaction protocol, each with its own prompt (never the four-phase
prompt with lines removed): ``epgc`` (the paper's four phases), and the variants of §3.1's
pilot study and App. E.3 - ``egc`` (explore, generate, confirm: ``system_without_propose.txt``,
``formats_without_propose.txt``; also App. B.3's SFT-only ablation, for which
``propose_phase=False`` is the older spelling), ``ec`` (explore, confirm: ``system_ec.txt``,
``formats_ec.txt``) and ``react`` (ReAct-style: no phases, each turn a ``<think>`` block and
one tool call or the ``<answer>``: ``system_react.txt``). An action a protocol lacks is an
unknown action, and the supervised replay drops turns of the phases it lacks
(``omitted_phases``).

``schema_prefill=True`` is the paper's Schema-Prefill variant (Table 2): the full schema is
given as one synthetic explore turn - an assistant turn calling the tool on
``sqlite_master`` (on another dialect, its catalogue: ``tools.db.dialects``) and the tool's
real answer - placed in the prompt (so it is not trained on), after which the same four-phase
protocol runs. That turn counts as the episode's
explore action for R_format (flag ``schema_prefill``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agents.base import (
    BaseEpisode,
    TurnOutcome,
    invalid,
    make_toolbox,
    run_tool,
    single_call,
    sql_from_text,
    tool_message,
    tools_block,
)
from agents.parsing import ToolCallParser, get_parser, parse_schema_json, single_block, tag_counts
from agents.prompts import Prompts
from agents.registry import register_agent
from agents.types import SCHEMA_TRACK, EpisodeResult, Example, ToolCall, TrainingSpec, TurnRecord, span_flag
from designs.trustsql.tools import PRESET, TOOL
from tools.db.dialects import dialect_info
from tools.errors import ConfigError

if TYPE_CHECKING:
    from tools import Backend, ToolBox

PROMPTS = Prompts(__package__)

ACTIONS = ("explore_schema", "propose_schema", "generate_sql", "confirm_answer")
ACTIONS_WITHOUT_PROPOSE = ("explore_schema", "generate_sql", "confirm_answer")
PROTOCOLS: dict[str, tuple[str, ...]] = {
    "epgc": ACTIONS,
    "egc": ACTIONS_WITHOUT_PROPOSE,
    "ec": ("explore_schema", "confirm_answer"),
    "react": (),  # no phases: a tool call or the answer, any turn
}
"""Each protocol's actions in order; its prompt files carry ``PROMPT_SUFFIX``."""
PROMPT_SUFFIX = {"epgc": "", "egc": "_without_propose", "ec": "_ec", "react": "_react"}
COUNT_WORDS = {2: "two", 3: "three", 4: "four"}
ORDER_HINTS = {
    "propose_schema": "explore the schema before you propose it",
    "generate_sql": "propose the verified schema before you generate SQL",
    "confirm_answer": "run the query with generate_sql before you confirm it",
}
ORDER_HINTS_WITHOUT_PROPOSE = {**ORDER_HINTS, "generate_sql": "explore the schema before you generate SQL"}
ORDER_HINTS_EC = {"confirm_answer": "explore the schema before you confirm an answer"}


def prefill_sql(dialect: str) -> str:
    """The Schema-Prefill query: ``(name, sql)`` of every table, by name, from the catalogue
    of ``dialect`` (on SQLite, ``sqlite_master``).

    >>> prefill_sql("sqlite")
    "SELECT name, sql FROM sqlite_master WHERE type = 'table' ORDER BY name"
    """
    return dialect_info(dialect).table_ddl_sql + " ORDER BY name"


def prefill_messages(toolbox: ToolBox, db_id: str) -> list[dict]:
    """Schema-Prefill: one synthetic explore turn (assistant call + the tool's real answer)."""
    arguments = {"db_id": db_id, "sql": prefill_sql(toolbox.db.dialect)}
    run = run_tool(toolbox, ToolCall(TOOL, arguments))
    turn = (
        "<think>The full schema of the database, to start from.</think>\n<action>explore_schema</action>\n"
        f"<tool_call>{json.dumps({'name': TOOL, 'arguments': arguments})}</tool_call>"
    )
    return [{"role": "assistant", "content": turn}, run.observation]


def schema_span_turn(turns: Sequence[TurnRecord]) -> tuple[int, str]:
    """Index of the turn that ends the schema span, and how it was chosen.

    The last valid propose turn ("propose"); else the last valid explore turn
    ("explore_fallback"); else -1 ("none": the sample adds nothing to the schema track).
    """
    for phase, how in (("propose_schema", "propose"), ("explore_schema", "explore_fallback")):
        for turn in reversed(turns):
            if turn.phase == phase and turn.format_ok:
                return turn.index, how
    return -1, "none"


class TrustSQLEpisode(BaseEpisode):
    def __init__(
        self,
        messages: list,
        toolbox: ToolBox,
        parser: ToolCallParser,
        max_turns: int,
        formats: str,
        actions: tuple[str, ...] = ACTIONS,
        enforce_order: bool = True,
    ) -> None:
        stop = tuple(dict.fromkeys((*parser.stop, "</schema>", "</answer>")))
        super().__init__("agent", messages, toolbox.schemas(), stop, max_turns)
        self.toolbox, self.parser, self.formats = toolbox, parser, formats
        self.actions, self.enforce_order = actions, enforce_order
        self.prefilled = any(m.get("role") == "assistant" for m in messages)

    def _error(self, reason: str, **kwargs: Any) -> TurnOutcome:
        count = COUNT_WORDS[len(self.actions)]
        message = PROMPTS.render("invalid", reason=reason, formats=self.formats, count=count)
        return invalid(reason, tool_message("format_error", message), **kwargs)

    def _out_of_order(self, action: str) -> TurnOutcome | None:
        """The invalid turn for ``action`` when no valid turn of the action before it came
        earlier (a prefilled explore counts), else None."""
        position = self.actions.index(action)
        if not self.enforce_order or position == 0:
            return None
        required = self.actions[position - 1]
        done = {turn.phase for turn in self.turns if turn.format_ok}
        if required in done or (required == "explore_schema" and self.prefilled):
            return None
        detail = f"{action} needs an earlier valid {required} turn"
        if "propose_schema" in self.actions:
            hints = ORDER_HINTS
        else:
            hints = ORDER_HINTS_WITHOUT_PROPOSE if "generate_sql" in self.actions else ORDER_HINTS_EC
        message = PROMPTS.render("order", detail=detail, hint=hints[action], sequence=" → ".join(self.actions))
        return invalid(f"out of order: {detail}", tool_message("order_error", message))

    def _turn(self, text: str) -> TurnOutcome:
        think, reason = single_block(text, "think")
        if think is None:
            return self._error(reason)
        action_block, reason = single_block(text, "action")
        if action_block is None:
            return self._error(reason)
        action = action_block.content.strip()
        if action not in self.actions:
            return self._error(f"unknown action {action[:60]!r}; use one of {', '.join(self.actions)}")
        if (out_of_order := self._out_of_order(action)) is not None:
            return out_of_order
        if action == "propose_schema":
            return self._propose(text)
        if action == "confirm_answer":
            return self._confirm(text)
        return self._execute(text, action)

    def _execute(self, text: str, action: str) -> TurnOutcome:
        parsed, reason = single_call(self.parser, text)
        if parsed is None:
            return self._error(f"{action}: {reason}")
        if parsed.call is None:
            return self._error(parsed.error)
        if parsed.call.name != TOOL:
            return self._error(
                f"unknown tool {parsed.call.name[:60]!r}; the tool is {TOOL}",
                call=parsed.call,
                tool_outcome="unknown_tool",
            )
        run = run_tool(self.toolbox, parsed.call)
        return TurnOutcome(action, True, observations=(run.observation,), call=parsed.call, tool_outcome=run.outcome)

    def _propose(self, text: str) -> TurnOutcome:
        block, reason = single_block(text, "schema")
        if block is None:
            return self._error(f"propose_schema: {reason}")
        selection, reason = parse_schema_json(block.content)
        if selection is None:
            return self._error(reason)
        self.schema = selection
        ack = PROMPTS.render("ack", tables=len(selection.tables), columns=len(selection.columns))
        return TurnOutcome("propose_schema", True, observations=(tool_message("propose_schema", ack),))

    def _confirm(self, text: str) -> TurnOutcome:
        block, reason = single_block(text, "answer")
        if block is None:
            return self._error(f"confirm_answer: {reason}")
        sql = sql_from_text(block.content)
        if sql is None:
            return self._error("<answer> holds no SQL")
        self.final_sql = sql
        return TurnOutcome("confirm_answer", True, done=True, end_reason="answer")

    def _result_flags(self) -> dict[str, Any]:
        turn, how = schema_span_turn(self.turns)
        flags: dict[str, Any] = {span_flag(SCHEMA_TRACK): turn}
        if self.prefilled:
            flags["schema_prefill"] = True
        if "propose_schema" not in self.actions:
            flags["without_propose"] = True
        if self.actions != ACTIONS:
            flags["protocol"] = next(name for name, actions in PROTOCOLS.items() if actions == self.actions)
        if how == "explore_fallback":
            flags["propose_fallback_explore"] = True
        elif how == "none":
            flags["no_schema_span"] = True
        return flags


class ReActEpisode(TrustSQLEpisode):
    """ReAct-style turns (App. E.3's ReAct-US baseline): one ``<think>`` block, then one tool
    call (phase ``tool_call``) or the final ``<answer>`` (phase ``confirm_answer``); no
    action names, no order."""

    def _error(self, reason: str, **kwargs: Any) -> TurnOutcome:
        message = PROMPTS.render("invalid_react", reason=reason, formats=self.formats)
        return invalid(reason, tool_message("format_error", message), **kwargs)

    def _turn(self, text: str) -> TurnOutcome:
        think, reason = single_block(text, "think")
        if think is None:
            return self._error(reason)
        n_calls, has_answer = self.parser.count(text), any(tag_counts(text, "answer"))
        if bool(n_calls) == has_answer:
            return self._error("a turn holds exactly one of a tool call and an <answer>")
        return self._execute(text, "tool_call") if n_calls else self._confirm(text)


@register_agent("trustsql")
class TrustSQLAgent:
    """TRUST-SQL. ``max_turns`` applies in training, ``max_turns_inference`` when
    ``inference`` is true (evaluation); ``schema_prefill`` gives the full schema as a
    synthetic first explore turn (the paper's Schema-Prefill setting);
    ``enforce_phase_order`` refuses a turn whose preceding phase has not come yet (§3.1);
    ``protocol``: ``epgc`` (the paper's), ``egc``, ``ec`` or ``react`` (the module docstring);
    ``propose_phase=False`` is ``egc``, the three-phase protocol of App. B.3's ablation.
    ``omitted_phases`` names the protocol's missing actions, which the supervised replay
    drops from four-phase traces."""

    name = "trustsql"

    def __init__(
        self,
        max_turns: int = 10,
        max_turns_inference: int = 15,
        inference: bool = False,
        preset: str = PRESET,
        parser: str = "hermes",
        schema_prefill: bool = False,
        enforce_phase_order: bool = True,
        propose_phase: bool = True,
        protocol: str = "epgc",
    ) -> None:
        for key, value in (("max_turns", max_turns), ("max_turns_inference", max_turns_inference)):
            if value < 1:
                raise ConfigError(f"trustsql {key} must be >= 1, got {value}")
        self.max_turns = max_turns_inference if inference else max_turns
        self.preset = preset
        self.parser = get_parser(parser)
        self.schema_prefill = bool(schema_prefill)
        self.enforce_phase_order = bool(enforce_phase_order)
        if protocol not in PROTOCOLS:
            raise ConfigError(f"trustsql protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")
        if not propose_phase and protocol == "epgc":
            protocol = "egc"  # propose_phase=false: the three-phase protocol
        self.protocol = protocol
        self.actions = PROTOCOLS[protocol]
        self.omitted_phases = tuple(a for a in ACTIONS if a not in self.actions) if self.actions else ()
        self._prompt_suffix = PROMPT_SUFFIX[protocol]

    def messages(self, example: Example, schemas: list, dialect: str = "sqlite") -> tuple[list[dict], str]:
        fields = dialect_info(dialect).fields()
        formats = PROMPTS.render("formats" + self._prompt_suffix, db_id=example.db_id, **fields)
        system = PROMPTS.render(
            "system" + self._prompt_suffix,
            formats=formats,
            max_turns=self.max_turns,
            tools=tools_block(schemas),
            **fields,
        )
        user = PROMPTS.render(
            "user", db_id=example.db_id, question=example.question, evidence=example.evidence or "(none)"
        )
        return [{"role": "system", "content": system}, {"role": "user", "content": user}], formats

    def start(self, example: Example, db: Backend, previous: Sequence[EpisodeResult] = ()) -> TrustSQLEpisode | None:
        if previous:
            return None
        toolbox = make_toolbox(db, (TOOL,), self.preset)
        messages, formats = self.messages(example, toolbox.schemas(), db.dialect)
        if self.schema_prefill:
            messages += prefill_messages(toolbox, example.db_id)
        episode_class = ReActEpisode if self.protocol == "react" else TrustSQLEpisode
        return episode_class(
            messages, toolbox, self.parser, self.max_turns, formats, self.actions, self.enforce_phase_order
        )

    def training_spec(self) -> TrainingSpec:
        """One role; the episodes mark a schema span (explore/propose turns) for the
        phase-aware schema track. A bad turn is reported to the model, never cut at."""
        return TrainingSpec(roles=("agent",), group_key="role", tracks=(SCHEMA_TRACK,))
