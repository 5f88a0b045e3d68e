"""Demonstrations: gold trajectories written in each design's own turn protocol.

The SFT warm start (``training/supervised/fine_tune.py``) teaches a small model the protocol before
GRPO: a 135M model follows none of the four designs' tag formats out of the box, every
reward is then 0, every group has zero variance and RL cannot move (measured: format
failure ~1.0 on all four recipes). ReToolSQL and Think2SQL both fine-tune before RL.

A demonstration is a scripted episode: a *script* gives the assistant turns for one
question (from its gold SQL, gold tables and gold columns), and the ordinary rollout
driver plays them, so tool calls really run, observations are real, and the response
masks are exactly the ones RL trains on (observation and template tokens carry no loss).
An episode is kept only when every turn passed the design's format check and it ended
with an answer; the others are counted and dropped.

Scripts are plain functions ``(example, role, max_turns) -> [turn text, ...]``, registered
per agent name with ``register_script`` (the one registry idiom: registering a second script
under a taken name is an error unless ``replace=True``); each design registers its own
(``designs/<name>/demonstration.py``), and a custom agent gets a warm start by registering
one. The pieces below (gold tables and columns, a reasoning line, a tool call) are what
scripts are written from.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agents.types import Example, Trajectory
from tools.errors import ConfigError
from tools.plugins import DESIGN_GROUP, Registry
from tools.spelling import did_you_mean

if TYPE_CHECKING:
    from training.rollout import RolloutLimits

Script = Callable[[Example, str, int], list[str]]
SCRIPTS: Registry[Script] = Registry("demonstration script", plugins=DESIGN_GROUP)


def register_script(agent_name: str, replace: bool = False) -> Callable[[Script], Script]:
    """Decorator: the demonstration script of agent ``agent_name``. A second script for a
    name already taken is an error unless ``replace=True`` (swapping a design's script)."""
    return SCRIPTS.register(agent_name, replace=replace)


def get_script(agent_name: str) -> Script:
    if agent_name not in SCRIPTS:
        names = SCRIPTS.names()
        raise ConfigError(
            f"no demonstration script for agent {agent_name!r}{did_you_mean(agent_name, names) or ';'} "
            f"scripts: {', '.join(names)}; "
            "register one with training.supervised.demonstrations.register_script or set stage.warm_start.enable=false"
        )
    return SCRIPTS.get(agent_name)


# ----------------------------------------------------------------------------- pieces scripts are written from


def columns_by_table(ex: Example) -> dict[str, list[str]]:
    """``{table: [column, ...]}`` from the example's gold tables and ``table.column`` list."""
    out: dict[str, list[str]] = {t: [] for t in ex.gold_tables}
    for item in ex.gold_columns:
        table, _, column = item.partition(".")
        out.setdefault(table, []).append(column)
    return out


def schema_json(ex: Example, joins: bool = False) -> str:
    columns = columns_by_table(ex)
    obj: dict[str, Any] = {"tables": list(columns), "columns": columns}
    if joins:
        obj["joins"] = []
    return json.dumps(obj)


def reasoning_line(ex: Example) -> str:
    """One short line naming what the query uses (the model learns the habit, not prose)."""
    tables = ", ".join(ex.gold_tables) or "the tables in the schema"
    columns = ", ".join(ex.gold_columns)
    line = f"The question needs {tables}" + (f"; columns {columns}." if columns else ".")
    if ex.evidence:
        line += f" Evidence: {ex.evidence}"
    return line


def tool_call_text(tool: str, ex: Example, sql: str) -> str:
    return "<tool_call>" + json.dumps({"name": tool, "arguments": {"db_id": ex.db_id, "sql": sql}}) + "</tool_call>"


def gold_sql_of(ex: Example) -> str:
    if not ex.gold_sql.strip():
        raise ConfigError(f"example {ex.id!r} has no gold SQL: demonstrations need it")
    return ex.gold_sql.strip()


# ----------------------------------------------------------------------------- playing them


@dataclass
class Demonstrations:
    trajectories: list[Trajectory]
    kept_examples: int
    dropped: dict[str, int] = field(default_factory=dict)  # reason -> examples dropped


def record_demonstrations(
    agent: Any, examples: Sequence[Example], tokenizer: Any, limits: RolloutLimits, script: Script
) -> Demonstrations:
    """Play ``script``'s turns through the rollout driver for every example.

    Each script sees the episode's own turn budget. Turns of the phases the agent's
    protocol lacks (its ``omitted_phases``, e.g. TRUST-SQL without propose) are left out
    of the script before it plays, and so are the blocks its turns lack (its
    ``omitted_blocks``, e.g. Think2SQL's ``<think>`` in the answer-only arm). An example is kept when all its
    episodes (DualSQL: linker and generator) ended with an answer and every turn passed
    the format check; the reason for each drop is counted.
    """
    from tools import get_database
    from training.rollout import EpisodeScheduler, GenerationOutput, SamplingParams
    from training.rollout.chat_segments import ChatSegments

    segments = ChatSegments(tokenizer)
    eos = turn_end_token(segments, tokenizer)
    omitted = tuple(getattr(agent, "omitted_phases", ()))
    blocks = tuple(getattr(agent, "omitted_blocks", ()))
    requests = [(ex, get_database(ex.db_path), 0) for ex in examples]
    scheduler = EpisodeScheduler(agent, requests, segments, SamplingParams(temperature=0.0), limits)
    while waiting := scheduler.waiting():
        for i in waiting:  # the script is the model: each episode's next turn, from its gold SQL
            runner = scheduler.runner(i)
            episode = runner.episode
            turns = script(examples[i], episode.role, int(getattr(episode, "max_turns", 1) or 1))
            turns = [strip_blocks(t, blocks) for t in turns if not phase_dropped(t, omitted)]
            text = turns[runner.turns] if runner.turns < len(turns) else ""
            scheduler.feed(i, GenerationOutput(token_ids=segments.encode(text) + eos))
    kept: list[Trajectory] = []
    dropped: dict[str, int] = {}
    for slot in scheduler.slots:
        reason = _drop_reason(slot.trajectories)
        if reason:
            dropped[reason] = dropped.get(reason, 0) + 1
        else:
            kept.extend(slot.trajectories)
    return Demonstrations(kept, len(examples) - sum(dropped.values()), dropped)


def strip_blocks(text: str, tags: Sequence[str]) -> str:
    """``text`` without its ``<tag>…</tag>`` blocks (and the whitespace after each).

    >>> strip_blocks("<think>\\nwhy\\n</think>\\n<answer>SELECT 1</answer>", ["think"])
    '<answer>SELECT 1</answer>'
    """
    for tag in tags:
        text = re.sub(rf"<{re.escape(tag)}>.*?</{re.escape(tag)}>\s*", "", text, flags=re.DOTALL)
    return text.strip() if tags else text


def phase_dropped(text: str, phases: Sequence[str]) -> bool:
    """Whether a turn names one of ``phases`` as its ``<action>`` (TRUST-SQL's turn format)."""
    return any(f"<action>{p}</action>" in text for p in phases)


def turn_end_token(segments: Any, tokenizer: Any) -> list[int]:
    """The token a model ends its turn with: the chat template's end-of-turn token when
    it is a stop token (``<|im_end|>``), else the tokenizer's EOS."""
    first = segments.encode(segments.end_of_turn)[:1]
    if first and first[0] in segments.eos_ids:
        return first
    return [int(tokenizer.eos_token_id)] if tokenizer.eos_token_id is not None else []


def _drop_reason(trajectories: Sequence[Trajectory]) -> str:
    for t in trajectories:
        if t.result.end_reason != "answer":
            return f"{t.role}: ended by {t.result.end_reason}"
        bad = [turn.format_reason for turn in t.result.turns if not turn.format_ok]
        if bad:
            return f"{t.role}: {bad[0][:80]}"
    return ""
