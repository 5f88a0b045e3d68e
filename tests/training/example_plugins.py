"""Plugins written outside the packages, as a user would: a metric, an advantage estimator,
an agent (with its training needs), a tool-call parser and a demonstration script.

docs/INTERFACES.md "Extension points" shows this code; tests/training/test_extension_points.py
imports this module (its decorators register everything) and trains one local step with it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import torch

from agents import register_agent
from agents.base import BaseEpisode, TurnOutcome, sql_from_text
from agents.parsing import ParsedCall, register_parser
from agents.types import ERROR_TURN_MASK, EpisodeResult, Example, ToolCall, TrainingSpec
from rex import register_metric
from training.algorithm.advantages import AdvantageOptions, register_estimator
from training.supervised.demonstrations import register_script

# --------------------------------------------------------------------------- a metric


@register_metric("row_overlap")
def row_overlap(gold: Any, pred: Any, ordered: bool | None, outcome: str) -> tuple[float, dict[str, Any]]:
    """The share of the gold rows the prediction returns (partial credit; order ignored)."""
    gold_rows = set(gold.rows)
    share = len(gold_rows & set(pred.rows)) / len(gold_rows) if gold_rows else float(not pred.rows)
    return share, {"row_overlap": share}


# --------------------------------------------------------------------------- an estimator


@register_estimator("sign")
def sign_estimator(
    tracks: dict[str, torch.Tensor], groups: Sequence[str], opts: AdvantageOptions
) -> dict[str, torch.Tensor]:
    """+1 above the group's mean reward, -1 below, 0 at it: only the direction counts."""
    full = tracks["full"]  # [n]
    keys = list(groups)
    means = torch.stack([full[[j for j, g in enumerate(keys) if g == key]].mean() for key in keys])  # [n]
    return {"full": torch.sign(full - means)}  # [n]


# --------------------------------------------------------------------------- an agent


class FenceEpisode(BaseEpisode):
    """One turn; the answer is a ```sql block. Any other text is a format error that
    ends the episode at once (so the agent asks trainers for the error-turn mask: an
    episode's loss falls on the failed turn only - here its one turn)."""

    def __init__(self, messages: list[dict[str, Any]]) -> None:
        super().__init__("agent", messages, [], (), 1)

    def _turn(self, text: str) -> TurnOutcome:
        if not text.lstrip().startswith("```sql"):
            return TurnOutcome("answer", False, "no ```sql block", done=True, end_reason="format_cutoff")
        self.final_sql = sql_from_text(text)
        return TurnOutcome("answer", True, done=True, end_reason="answer")


@register_agent("fence_sql")
class FenceSQLAgent:
    """Question in, one ```sql block out. ``cut_bad_turns``: end at a bad turn (on)."""

    def __init__(self, cut_bad_turns: bool = True) -> None:
        self.cut_bad_turns = cut_bad_turns

    def start(self, example: Example, db: Any, previous: Sequence[EpisodeResult] = ()) -> FenceEpisode | None:
        if previous:
            return None
        return FenceEpisode(
            [
                {"role": "system", "content": "Answer with one ```sql block."},
                {"role": "user", "content": f"Database {example.db_id}. {example.question}"},
            ]
        )

    def training_spec(self) -> TrainingSpec:
        masks = (ERROR_TURN_MASK,) if self.cut_bad_turns else ()
        return TrainingSpec(roles=("agent",), group_key="role", masks=masks)


# --------------------------------------------------------------------------- a tool-call parser


@register_parser("xml_call")
class XmlCallParser:
    """``<call name="tool">{"arg": ...}</call>``."""

    name = "xml_call"
    stop = ("</call>",)
    pattern = re.compile(r'<call name="([^"]+)">(.*?)</call>', re.DOTALL)

    def count(self, text: str) -> int:
        return text.count("<call ")

    def parse(self, text: str) -> list[ParsedCall]:
        calls = []
        for name, body in self.pattern.findall(text):
            try:
                arguments = json.loads(body)
            except ValueError as err:
                calls.append(ParsedCall(None, body, f"arguments are not JSON ({err})"))
                continue
            if not isinstance(arguments, dict):
                calls.append(ParsedCall(None, body, "arguments must be a JSON object"))
                continue
            calls.append(ParsedCall(ToolCall(name, arguments), body))
        return calls


# --------------------------------------------------------------------------- a demonstration script


@register_script("fence_sql")
def fence_sql_script(ex: Example, role: str, max_turns: int) -> list[str]:
    """The warm start's demonstration of ``fence_sql``: the gold SQL in one block."""
    return [f"```sql\n{ex.gold_sql}\n```"]
