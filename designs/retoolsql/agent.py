"""ReToolSQL (README.md): M-Schema + evidence + BM25 few-shot prompt, verify-first tool use.

Each turn: one ``<scratch_pad>`` and then exactly one of {one tool call, one
``<final_answer>``}; the final turn also carries ``<relevant_tables>`` and
``<relevant_columns>`` before the answer. A malformed turn is answered with a format
error and the episode goes on (the format reward reads the per-turn verdicts); the
episode ends at the final answer or after ``max_turns`` turns.

With no tools (``tools=[]``: §6.1's "no tools" condition, Table 4) the system prompt is its
own (``system_no_tools.txt``: no tool descriptions, no turn protocol for tool results) and
the episode has one turn: the final answer.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agents.base import (
    BaseEpisode,
    TurnOutcome,
    invalid,
    make_toolbox,
    run_tool,
    schema_renderer,
    single_call,
    sql_from_text,
    tool_message,
    tools_block,
)
from agents.parsing import ToolCallParser, get_parser, parse_column_list, parse_name_list, single_block, tag_counts
from agents.prompts import Prompts
from agents.registry import register_agent
from agents.types import EpisodeResult, Example, SchemaSelection, TrainingSpec
from designs.retoolsql.tools import PRESET, TOOLS
from tools.db.dialects import dialect_info
from tools.errors import ConfigError

if TYPE_CHECKING:
    from tools import Backend, ToolBox

PROMPTS = Prompts(__package__)

EXPECTED = (
    "Write <scratch_pad>…</scratch_pad> and then exactly one <tool_call>{…}</tool_call>, or "
    "<relevant_tables>…</relevant_tables><relevant_columns>…</relevant_columns>"
    "<final_answer>…</final_answer>."
)
_WORD = re.compile(r"\w+")


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


class FewShotRetriever:
    """BM25 (rank_bm25) over the pool's questions; never returns the target's db_id."""

    def __init__(self, pool: Sequence[Example]) -> None:
        self.pool = list(pool)
        self._bm25: Any = None
        if self.pool:
            from rank_bm25 import BM25Okapi

            self._bm25 = BM25Okapi([_words(ex.question) or ["_"] for ex in self.pool])
        # Pool indices, cached per retriever (a cache on the method would keep every
        # retriever alive): a GRPO group asks for the same question G times.
        self._ranked = functools.lru_cache(maxsize=4096)(self._rank)

    def retrieve(self, example: Example, k: int) -> list[Example]:
        """The ``k`` best-scoring pool examples from other databases (ties: pool order)."""
        if k <= 0 or self._bm25 is None:
            return []
        return [self.pool[i] for i in self._ranked(example.id, example.db_id, example.question, k)]

    def _rank(self, example_id: str, db_id: str, question: str, k: int) -> tuple[int, ...]:
        """Indices of the ``k`` best pool examples from other databases (see ``_ranked``)."""
        scores = self._bm25.get_scores(_words(question))
        order = sorted(range(len(self.pool)), key=lambda i: (-scores[i], i))
        return tuple(i for i in order if self.pool[i].db_id != db_id and self.pool[i].id != example_id)[:k]


class ReToolSQLEpisode(BaseEpisode):
    def __init__(
        self,
        messages: list,
        toolbox: ToolBox,
        tool_names: Sequence[str],
        parser: ToolCallParser,
        max_turns: int,
        max_scratch_pad_chars: int | None,
    ) -> None:
        stop = tuple(dict.fromkeys((*parser.stop, "</final_answer>")))
        super().__init__("agent", messages, toolbox.schemas(), stop, max_turns)
        self.toolbox, self.tool_names, self.parser = toolbox, tuple(tool_names), parser
        self.max_scratch_pad_chars = max_scratch_pad_chars

    def _error(self, reason: str, **kwargs: object) -> TurnOutcome:
        message = PROMPTS.render("format_error", reason=reason, expected=EXPECTED)
        return invalid(reason, tool_message("format_error", message), **kwargs)

    def _turn(self, text: str) -> TurnOutcome:
        scratch, reason = single_block(text, "scratch_pad")
        if scratch is None:
            return self._error(reason)
        if self.max_scratch_pad_chars is not None and len(scratch.content) > self.max_scratch_pad_chars:
            return self._error(f"<scratch_pad> longer than {self.max_scratch_pad_chars} characters")
        n_calls = self.parser.count(text)
        has_final = any(tag_counts(text, "final_answer"))
        if n_calls and has_final:
            return self._error("a turn holds a tool call or a final answer, not both")
        if not n_calls and not has_final:
            return self._error("no tool call and no <final_answer>")
        action_start = text.find("<tool_call>" if n_calls else "<final_answer>")
        if 0 <= action_start < scratch.end:
            return self._error("<scratch_pad> must come before the tool call or final answer")
        return self._tool_turn(text) if n_calls else self._final_turn(text)

    def _tool_turn(self, text: str) -> TurnOutcome:
        if not self.tool_names:
            return self._error("no tools are offered here: write the final answer")
        parsed, reason = single_call(self.parser, text)
        if parsed is None:
            return self._error(reason)
        if parsed.call is None:
            return self._error(parsed.error)
        if parsed.call.name not in self.tool_names:
            return self._error(
                f"unknown tool {parsed.call.name[:60]!r}; tools: {', '.join(self.tool_names)}",
                call=parsed.call,
                tool_outcome="unknown_tool",
            )
        run = run_tool(self.toolbox, parsed.call)
        return TurnOutcome(
            "tool_call", True, observations=(run.observation,), call=parsed.call, tool_outcome=run.outcome
        )

    def _final_turn(self, text: str) -> TurnOutcome:
        final, reason = single_block(text, "final_answer")
        if final is None:
            return self._error(reason)
        sql = sql_from_text(final.content)
        if sql is None:
            return self._error("<final_answer> holds no SQL")
        self.final_sql = sql
        problems = []
        annotations = {}
        for tag in ("relevant_tables", "relevant_columns"):
            block, why = single_block(text, tag)
            if block is None:
                problems.append(why)
            elif block.end > final.start:
                problems.append(f"<{tag}> must come before <final_answer>")
            else:
                annotations[tag] = block.content
        self.schema = SchemaSelection(
            tables=parse_name_list(annotations.get("relevant_tables", "")),
            columns=parse_column_list(annotations.get("relevant_columns", "")),
        )
        return TurnOutcome("final_answer", not problems, "; ".join(problems), done=True, end_reason="answer")


@register_agent("retoolsql")
class ReToolSQLAgent:
    """ReToolSQL. ``few_shot_pool``: train examples for BM25 demonstrations (never the
    target's db_id); ``tools``: the tool names offered (none: the no-tools prompt and one
    answer turn); ``preset``: the executor preset."""

    name = "retoolsql"
    reasoning_tag = "scratch_pad"  # an endpoint's reasoning_content becomes this block

    def __init__(
        self,
        max_turns: int = 8,
        few_shot_pool: Sequence[Example] = (),
        num_few_shot: int = 2,
        tools: Sequence[str] = TOOLS,
        preset: str = PRESET,
        schema_format: str = "m_schema",
        parser: str = "hermes",
        max_scratch_pad_chars: int | None = None,
    ) -> None:
        if max_turns < 1:
            raise ConfigError(f"retoolsql max_turns must be >= 1, got {max_turns}")
        if num_few_shot < 0:
            raise ConfigError(f"retoolsql num_few_shot must be >= 0, got {num_few_shot}")
        self.max_turns, self.num_few_shot = max_turns, num_few_shot
        self.tools, self.preset = tuple(tools), preset
        self.render_schema = schema_renderer(schema_format)
        self.parser = get_parser(parser)
        self.max_scratch_pad_chars = max_scratch_pad_chars
        self.retriever = FewShotRetriever(few_shot_pool)

    def few_shot(self, example: Example) -> str:
        shots = self.retriever.retrieve(example, self.num_few_shot)
        if not shots:
            return ""
        items = "\n\n".join(
            PROMPTS.render("few_shot_item", question=s.question, evidence=s.evidence or "(none)", sql=s.gold_sql)
            for s in shots
        )
        return PROMPTS.render("few_shot", examples=items) + "\n"

    @property
    def episode_turns(self) -> int:
        """The turn budget of an episode: one answer turn when no tool is offered."""
        return self.max_turns if self.tools else 1

    def messages(self, example: Example, db: Backend, schemas: list) -> list[dict]:
        dialect = dialect_info(db.dialect).fields()
        if self.tools:
            system = PROMPTS.render("system", tools=tools_block(schemas), max_turns=self.max_turns, **dialect)
        else:
            system = PROMPTS.render("system_no_tools", **dialect)
        user = PROMPTS.render(
            "user",
            db_id=example.db_id,
            schema=self.render_schema(db.profile()),
            few_shot=self.few_shot(example),
            question=example.question,
            evidence=example.evidence or "(none)",
        )
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def start(self, example: Example, db: Backend, previous: Sequence[EpisodeResult] = ()) -> ReToolSQLEpisode | None:
        if previous:
            return None
        toolbox = make_toolbox(db, self.tools, self.preset)
        messages = self.messages(example, db, toolbox.schemas())
        return ReToolSQLEpisode(
            messages, toolbox, self.tools, self.parser, self.episode_turns, self.max_scratch_pad_chars
        )

    def training_spec(self) -> TrainingSpec:
        """One role, one group per question, no extra masks or tracks."""
        return TrainingSpec(roles=("agent",), group_key="role")
