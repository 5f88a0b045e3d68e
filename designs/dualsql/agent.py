"""DualSQL (README.md): a schema linker, then a SQL generator built from its result.

Both roles share one set of weights and the tools executor (DualSQL preset),
fts_search and get_profile. ``start`` returns the linker episode first, then a generator
episode whose prompt holds the M-Schema restricted to the linked tables/columns (the
full schema, flagged ``full_schema_fallback``, when the linker linked nothing usable).

Rollout guardrails, exactly as README.md — a turn fails unless:
1. it has a non-empty ``<think>`` block;
2. after the reasoning there is exactly one ``<tool_call>`` or exactly one ``` block;
3. a tool call is valid JSON with a known tool name and valid arguments (the toolbox
   answers ``bad_arguments`` / ``unknown_tool`` otherwise);
4. it is not an identical repeat of an earlier call of this episode;
5. the text after the code block is at most half the turn.
A failed turn ends the episode at once (``format_cutoff``) when ``guardrails`` is on;
with it off (an ablation) the model is told what failed and the episode goes on. A
passing code-block turn is the role's answer; the turn is cut after the closing fence.

``mode`` picks the paper's baselines (§5.2.1 Table 3, §5.2.3): ``dual`` (linker, then
generator: the paper's system), ``generator_only`` (no linker: the multi-turn generator on
the full schema, with its own prompt), ``oracle_linker`` (no linker episode: the generator's
linked schema is the gold SQL's tables and columns, ``rex.linking.gold_sets``) and
``single_turn`` (no linker, no tools: one answer turn on the full schema, with its own prompt).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from agents.base import (
    BaseEpisode,
    TurnOutcome,
    invalid,
    make_toolbox,
    run_tool,
    schema_renderer,
    tool_message,
    tools_block,
)
from agents.parsing import (
    ToolCallParser,
    call_key,
    find_blocks,
    find_fences,
    get_parser,
    parse_schema_json,
)
from agents.prompts import Prompts
from agents.registry import register_agent
from agents.types import ERROR_TURN_MASK, EpisodeResult, Example, SchemaSelection, ToolCall, TrainingSpec
from designs.dualsql.tools import PRESET, TOOLS
from rex.linking import gold_sets
from tools.db.dialects import dialect_info
from tools.errors import ConfigError
from tools.schema import select

if TYPE_CHECKING:
    from tools import Backend, ToolBox

PROMPTS = Prompts(__package__)

ARGUMENT_ERRORS = ("bad_arguments", "unknown_tool")
MODES = ("dual", "generator_only", "oracle_linker", "single_turn")
GENERATOR_PROMPTS = {  # mode -> the generator's (system, user) prompt files
    "dual": ("generator_system", "generator_user"),
    "oracle_linker": ("generator_system", "generator_user"),
    "generator_only": ("generator_only_system", "generator_only_user"),
    "single_turn": ("single_turn_system", "generator_only_user"),
}


class DualSQLEpisode(BaseEpisode):
    def __init__(
        self,
        role: str,
        messages: list,
        toolbox: ToolBox,
        tool_names: Sequence[str],
        parser: ToolCallParser,
        max_turns: int,
        guardrails: bool,
    ) -> None:
        super().__init__(role, messages, toolbox.schemas(), tuple(parser.stop), max_turns)
        self.toolbox, self.tool_names, self.parser = toolbox, tuple(tool_names), parser
        self.guardrails = guardrails
        self._calls_made: set[str] = set()

    def _fail(self, reason: str, call: ToolCall | None = None, tool_outcome: str | None = None) -> TurnOutcome:
        if self.guardrails:
            return invalid(reason, done=True, end_reason="format_cutoff", call=call, tool_outcome=tool_outcome)
        message = PROMPTS.render(
            "format_error", reason=reason, expected="Write <think>…</think> and one tool call or one code block."
        )
        return invalid(reason, tool_message("format_error", message), call=call, tool_outcome=tool_outcome)

    def _turn(self, text: str) -> TurnOutcome:
        thinks = find_blocks(text, "think")
        if not any(block.content.strip() for block in thinks):
            return self._fail("no non-empty <think>…</think>")
        body_start = thinks[-1].end
        rest = text[body_start:]
        n_calls = self.parser.count(rest)
        fences, unclosed = find_fences(rest)
        n_blocks = len(fences) + int(unclosed)
        if n_calls + n_blocks != 1:
            return self._fail(
                f"expected exactly one <tool_call> or one ``` code block, "
                f"found {n_calls} tool call(s) and {n_blocks} code block(s)"
            )
        if n_calls:
            return self._tool_turn(rest)
        if unclosed:
            return self._fail("the ``` code block is not closed")
        fence = fences[0]
        after = rest[fence.end :].strip()
        if len(after) > len(text) / 2:
            return self._fail(f"{len(after)} characters after the code block: more than half the turn")
        return self._answer(fence.body, kept=text[: body_start + fence.end])

    def _tool_turn(self, rest: str) -> TurnOutcome:
        calls = self.parser.parse(rest)
        parsed = calls[0] if calls else None
        if parsed is None or parsed.call is None:
            return self._fail(parsed.error if parsed else "the tool call is not closed")
        call = parsed.call
        if call.name not in self.tool_names:
            return self._fail(
                f"unknown tool {call.name[:60]!r}; tools: {', '.join(self.tool_names)}", call, "unknown_tool"
            )
        key = call_key(call)
        if key in self._calls_made:
            return self._fail("identical repeat of an earlier tool call", call)
        self._calls_made.add(key)
        run = run_tool(self.toolbox, call)
        if run.outcome in ARGUMENT_ERRORS:
            return self._fail(f"invalid tool arguments: {run.observation['content'][:200]}", call, run.outcome)
        return TurnOutcome("tool_call", True, observations=(run.observation,), call=call, tool_outcome=run.outcome)

    def _answer(self, body: str, kept: str) -> TurnOutcome:
        if self.role == "linker":
            selection, reason = parse_schema_json(body)
            if selection is None or not selection.tables:
                self.flags["unparsable_answer"] = reason or "no tables linked"
            self.schema = selection if selection is not None and selection.tables else None
        else:
            self.final_sql = body.strip() or None
            if self.final_sql is None:
                self.flags["unparsable_answer"] = "empty code block"
        return TurnOutcome("answer", True, done=True, end_reason="answer", text=kept)


@register_agent("dualsql")
class DualSQLAgent:
    """DualSQL: linker (``linker_max_turns``) then generator (``generator_max_turns``).
    ``guardrails``: cut the rollout at the first failed turn (README.md). ``schema_format``:
    how the (linked) schema is rendered — M-Schema as in the paper, or ``compact`` / ``ddl``
    for short prompts (the CPU laptop profile uses ``compact``). ``mode``: ``dual`` (the
    paper's) or a baseline, ``generator_only`` | ``oracle_linker`` | ``single_turn`` (the
    module docstring)."""

    name = "dualsql"

    def __init__(
        self,
        linker_max_turns: int = 5,
        generator_max_turns: int = 10,
        guardrails: bool = True,
        tools: Sequence[str] = TOOLS,
        preset: str = PRESET,
        parser: str = "hermes",
        schema_format: str = "m_schema",
        mode: str = "dual",
    ) -> None:
        if mode not in MODES:
            raise ConfigError(f"dualsql mode must be one of {', '.join(MODES)}, got {mode!r}")
        for key, value in (("linker_max_turns", linker_max_turns), ("generator_max_turns", generator_max_turns)):
            if value < 1:
                raise ConfigError(f"dualsql {key} must be >= 1, got {value}")
        self.mode = mode
        self.max_turns = {"linker": linker_max_turns, "generator": generator_max_turns}
        self.roles = ("linker", "generator") if mode == "dual" else ("generator",)
        if mode == "single_turn":
            self.max_turns["generator"], tools = 1, ()
        self.guardrails = guardrails
        self.tools, self.preset = tuple(tools), preset
        self.parser = get_parser(parser)
        self.render_schema = schema_renderer(schema_format)

    def _prompt(
        self, role: str, example: Example, schema_text: str, schemas: list, dialect: str = "sqlite"
    ) -> list[dict]:
        system_file, user_file = ("linker_system", "linker_user") if role == "linker" else GENERATOR_PROMPTS[self.mode]
        system = PROMPTS.render(
            system_file, max_turns=self.max_turns[role], tools=tools_block(schemas), **dialect_info(dialect).fields()
        )
        user = PROMPTS.render(
            user_file,
            db_id=example.db_id,
            schema=schema_text,
            question=example.question,
            evidence=example.evidence or "(none)",
        )
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def start(self, example: Example, db: Backend, previous: Sequence[EpisodeResult] = ()) -> DualSQLEpisode | None:
        if len(previous) >= len(self.roles):
            return None
        role = self.roles[len(previous)]
        toolbox = make_toolbox(db, self.tools, self.preset)
        profile = db.profile()
        schema_text, linked, flags = self.render_schema(profile), None, {}
        if self.mode == "oracle_linker":  # the gold schema stands in for the linker's answer
            linked, flags["oracle_linker"] = oracle_schema(example, db), True
        elif role == "generator" and self.mode == "dual":
            linked = previous[0].schema
            if linked is None or not select(profile, linked.tables, linked.columns):
                linked, flags["full_schema_fallback"] = None, True  # nothing usable linked: the full schema
        if linked is not None:
            schema_text = self.render_schema(profile, linked.tables, linked.columns)
        messages = self._prompt(role, example, schema_text, toolbox.schemas(), db.dialect)
        episode = DualSQLEpisode(
            role, messages, toolbox, self.tools, self.parser, self.max_turns[role], self.guardrails
        )
        if role == "generator" and self.mode in ("dual", "oracle_linker"):
            episode.schema = previous[0].schema if self.mode == "dual" else linked
        episode.flags.update(flags)
        return episode

    def training_spec(self) -> TrainingSpec:
        """Linker and generator rows in separate GRPO groups; with ``guardrails`` on (the
        default) an episode ends at its first bad turn, and the loss of such an episode
        falls on that turn only (the error-turn mask)."""
        masks = (ERROR_TURN_MASK,) if self.guardrails else ()
        return TrainingSpec(roles=self.roles, group_key="role", masks=masks)


def oracle_schema(example: Example, db: Backend) -> SchemaSelection:
    """The gold schema as a linker's answer: the tables and ``table.column``s the gold SQL
    reads (the example's own when its loader gives them), as ``rex.linking`` reads them."""
    tables, columns = gold_sets(example.gold_tables, example.gold_columns, example.gold_sql, db.schema())
    if not tables:
        raise ConfigError(
            f"example {example.id!r}: the oracle linker found no gold tables in its gold SQL; "
            "give the example gold_sql (or gold_tables) or run without agent.mode=oracle_linker"
        )
    return SchemaSelection(tables=tuple(sorted(tables)), columns=tuple(sorted(columns)))
