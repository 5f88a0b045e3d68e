"""Think2SQL (README.md): one turn, ``<think>…</think>`` then ``<answer>…</answer>``.

The schema in the prompt is restricted to the gold SQL's tables (``schema_scope=
"gold_tables"``, the paper's setting for training and evaluation) or is the full schema
(``"full"``). The format verdict is the paper's DOTALL fullmatch (``FORMAT_RE``), decided
by ``follows_format`` in linear time; the tag-count reward reads the turn text from the record.

``reasoning=False`` is the paper's SFT-without-reasoning arm (SFT NT, §4.3, Table 2): its own
prompt (``system_no_reasoning.txt``) asks for the ``<answer>`` block alone, a turn is valid
iff it is one answer block with no ``<think>``, and the supervised replay and the warm start
remove the ``<think>`` blocks of their traces (``omitted_blocks``), so the model is fine-tuned
on answer-only demonstrations of the same questions.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from agents.base import BaseEpisode, TurnOutcome, schema_renderer, sql_from_text
from agents.parsing import find_blocks
from agents.prompts import Prompts
from agents.registry import register_agent
from agents.types import EpisodeResult, Example, TrainingSpec
from tools.db.dialects import dialect_info
from tools.errors import ConfigError

if TYPE_CHECKING:
    from tools import Backend

PROMPTS = Prompts(__package__)

FORMAT_RE = re.compile(r"\s*<think>.*?</think>\s*<answer>.*?</answer>\s*", re.DOTALL)
"""The paper's format rule as written; ``follows_format`` decides the same fullmatch."""
SCOPES = ("gold_tables", "full")


def follows_format(text: str) -> bool:
    """Whether ``FORMAT_RE`` fullmatches ``text``: ``<think>…</think>``, optional whitespace,
    ``<answer>…</answer>``, whitespace around. Decided with string scans because the regex
    backtracks quadratically on a long repetitive turn that does not match (a model looping
    until its token budget cuts it: 1.5 s at 110k characters, minutes at 1M).

    >>> follows_format(" <think>a</think>\\n<answer>SELECT 1</answer>\\n"), follows_format("<answer>x</answer>")
    (True, False)
    """
    body = text.strip()  # str.strip and the regex's \s agree on every character
    if not (body.startswith("<think>") and body.endswith("</answer>")):
        return False
    answer_close = len(body) - len("</answer>")
    pos = len("<think>")
    while (close := body.find("</think>", pos)) >= 0:
        start = close + len("</think>")
        while start < len(body) and body[start].isspace():  # whitespace runs are disjoint: linear
            start += 1
        if body.startswith("<answer>", start):  # the first such pair leaves the answer the most room
            return start + len("<answer>") <= answer_close
        pos = close + 1
    return False


def answer_only(text: str) -> bool:
    """The answer-only turn (``reasoning=False``): one ``<answer>…</answer>``, whitespace
    around, and no ``<think>`` anywhere.

    >>> answer_only("<answer>SELECT 1</answer>\\n"), answer_only("<think>a</think><answer>SELECT 1</answer>")
    (True, False)
    """
    body = text.strip()
    return body.startswith("<answer>") and body.endswith("</answer>") and len(body) >= 17 and "<think>" not in body


class Think2SQLEpisode(BaseEpisode):
    def __init__(self, messages: list, reasoning: bool = True) -> None:
        super().__init__("agent", messages, [], (), 1)
        self.reasoning = reasoning

    def _turn(self, text: str) -> TurnOutcome:
        ok = follows_format(text) if self.reasoning else answer_only(text)
        expected = (
            "<think>…</think> followed by <answer>…</answer>" if self.reasoning else "one <answer>…</answer> alone"
        )
        reason = "" if ok else f"the turn is not {expected}"
        answers = find_blocks(text, "answer")
        self.final_sql = sql_from_text(answers[0].content) if answers else None
        return TurnOutcome("answer", ok, reason, done=True, end_reason="answer" if answers else "turn_budget")


@register_agent("think2sql")
class Think2SQLAgent:
    """Think2SQL. ``schema_scope``: "gold_tables" | "full"; ``schema_format``: the
    serialiser (ddl | m_schema | compact); ``reasoning=False``: the answer-only arm (SFT NT)."""

    name = "think2sql"

    def __init__(self, schema_scope: str = "gold_tables", schema_format: str = "ddl", reasoning: bool = True) -> None:
        if schema_scope not in SCOPES:
            raise ConfigError(f"think2sql schema_scope must be one of {', '.join(SCOPES)}, got {schema_scope!r}")
        self.schema_scope = schema_scope
        self.render_schema = schema_renderer(schema_format)
        self.reasoning = bool(reasoning)
        self.omitted_blocks: tuple[str, ...] = () if self.reasoning else ("think",)

    def messages(self, example: Example, db: Backend) -> tuple[list[dict], bool]:
        """The prompt, and whether it fell back to the full schema (no gold tables known)."""
        tables = list(example.gold_tables) if self.schema_scope == "gold_tables" else None
        fallback = self.schema_scope == "gold_tables" and not tables
        schema = self.render_schema(db.profile(), tables=tables or None)
        user = PROMPTS.render(
            "user",
            db_id=example.db_id,
            schema=schema,
            question=example.question,
            evidence=example.evidence or "(none)",
        )
        system = PROMPTS.render(
            "system" if self.reasoning else "system_no_reasoning", **dialect_info(db.dialect).fields()
        )
        return [
            {"role": "system", "content": system},
            {"role": "user", "content": user},
        ], fallback

    def start(self, example: Example, db: Backend, previous: Sequence[EpisodeResult] = ()) -> Think2SQLEpisode | None:
        if previous:
            return None
        messages, fallback = self.messages(example, db)
        episode = Think2SQLEpisode(messages, self.reasoning)
        if fallback:
            episode.flags["full_schema_fallback"] = True
        return episode

    def training_spec(self) -> TrainingSpec:
        """One single-turn role, one group per question, no extra masks or tracks."""
        return TrainingSpec(roles=("agent",), group_key="role")
