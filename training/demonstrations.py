"""Demonstrations: gold trajectories written in each design's own turn protocol.

The SFT warm start (``training/warm_start.py``) teaches a small model the protocol before
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
under a taken name is an error unless ``replace=True``); a custom agent gets a warm start by
registering one.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agents.types import Example, Trajectory
from tools.errors import ConfigError
from tools.registry import Registry
from tools.spelling import did_you_mean

if TYPE_CHECKING:
    from training.rollout import RolloutLimits

Script = Callable[[Example, str, int], list[str]]
SCRIPTS: Registry[Script] = Registry("demonstration script")


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
            "register one with training.demonstrations.register_script or set stage.warm_start.enable=false"
        )
    return SCRIPTS.get(agent_name)


# ----------------------------------------------------------------------------- gold schema text


def _columns_by_table(ex: Example) -> dict[str, list[str]]:
    """``{table: [column, ...]}`` from the example's gold tables and ``table.column`` list."""
    out: dict[str, list[str]] = {t: [] for t in ex.gold_tables}
    for item in ex.gold_columns:
        table, _, column = item.partition(".")
        out.setdefault(table, []).append(column)
    return out


def _schema_json(ex: Example, joins: bool = False) -> str:
    columns = _columns_by_table(ex)
    obj: dict[str, Any] = {"tables": list(columns), "columns": columns}
    if joins:
        obj["joins"] = []
    return json.dumps(obj)


def _reasoning(ex: Example) -> str:
    """One short line naming what the query uses (the model learns the habit, not prose)."""
    tables = ", ".join(ex.gold_tables) or "the tables in the schema"
    columns = ", ".join(ex.gold_columns)
    line = f"The question needs {tables}" + (f"; columns {columns}." if columns else ".")
    if ex.evidence:
        line += f" Evidence: {ex.evidence}"
    return line


def _call(tool: str, ex: Example, sql: str) -> str:
    return "<tool_call>" + json.dumps({"name": tool, "arguments": {"db_id": ex.db_id, "sql": sql}}) + "</tool_call>"


def _need_sql(ex: Example) -> str:
    if not ex.gold_sql.strip():
        raise ConfigError(f"example {ex.id!r} has no gold SQL: demonstrations need it")
    return ex.gold_sql.strip()


# ----------------------------------------------------------------------------- the four scripts


@register_script("think2sql")
def think2sql_script(ex: Example, role: str, max_turns: int) -> list[str]:
    sql = _need_sql(ex)
    return [f"<think>\n{_reasoning(ex)}\n</think>\n<answer>\n```sql\n{sql}\n```\n</answer>"]


@register_script("retoolsql")
def retoolsql_script(ex: Example, role: str, max_turns: int) -> list[str]:
    """Verify first (one ``sqlite_query`` of the candidate), then answer; with a one-turn
    budget, answer at once."""
    sql = _need_sql(ex)
    # short scratch pads: the tool call and the final answer already carry the SQL twice,
    # and the laptop profile allows 128 tokens per turn
    final = (
        "<scratch_pad>\nThe result answers the question.\n</scratch_pad>\n"
        f"<relevant_tables>{', '.join(ex.gold_tables)}</relevant_tables>\n"
        f"<relevant_columns>{', '.join(ex.gold_columns)}</relevant_columns>\n"
        f"<final_answer>```sql\n{sql}\n```</final_answer>"
    )
    if max_turns < 2:
        return [final]
    check = f"<scratch_pad>\n{_reasoning(ex)}\n</scratch_pad>\n{_call('sqlite_query', ex, sql)}"
    return [check, final]


TRUSTSQL_EXPLORE = "SELECT name, sql FROM sqlite_master WHERE type = 'table'"


@register_script("trustsql")
def trustsql_script(ex: Example, role: str, max_turns: int) -> list[str]:
    """explore_schema (the table DDL) → propose_schema (the gold tables/columns) →
    generate_sql (run the gold SQL, when the budget has 4 turns) → confirm_answer."""
    sql = _need_sql(ex)

    def turn(think: str, action: str, body: str) -> str:
        return f"<think>\n{think}\n</think>\n<action>{action}</action>\n{body}"

    turns = [
        turn("List the tables and their columns.", "explore_schema", _call("execute_sql_query", ex, TRUSTSQL_EXPLORE)),
        turn(_reasoning(ex), "propose_schema", f"<schema>{_schema_json(ex, joins=True)}</schema>"),
    ]
    if max_turns >= 4:
        turns.append(turn("Run the candidate query.", "generate_sql", _call("execute_sql_query", ex, sql)))
    turns.append(turn("The query answers the question.", "confirm_answer", f"<answer>```sql\n{sql}\n```</answer>"))
    return turns[-max_turns:] if len(turns) > max_turns else turns


@register_script("dualsql")
def dualsql_script(ex: Example, role: str, max_turns: int) -> list[str]:
    """Linker: the gold tables/columns as a ```json block; generator: the gold SQL."""
    if role == "linker":
        return [f"<think>\n{_reasoning(ex)}\n</think>\n```json\n{_schema_json(ex)}\n```"]
    return [f"<think>\n{_reasoning(ex)}\n</think>\n```sql\n{_need_sql(ex)}\n```"]


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

    Each script sees the episode's own turn budget. An example is kept when all its
    episodes (DualSQL: linker and generator) ended with an answer and every turn passed
    the format check; the reason for each drop is counted.
    """
    from tools import get_database
    from training.chat_segments import ChatSegments
    from training.rollout import EpisodeSlot, GenerationOutput, SamplingParams

    segments = ChatSegments(tokenizer)
    eos = turn_end_token(segments, tokenizer)
    sampling = SamplingParams(temperature=0.0)
    kept: list[Trajectory] = []
    dropped: dict[str, int] = {}
    for ex in examples:
        slot = EpisodeSlot(ex, get_database(ex.db_path), 0)
        slot.advance(agent, segments, sampling, limits)
        while slot.runner is not None:
            runner = slot.runner
            episode = runner.episode
            turns = script(ex, episode.role, int(getattr(episode, "max_turns", 1) or 1))
            index = runner.turns
            text = turns[index] if index < len(turns) else ""
            runner.feed(GenerationOutput(token_ids=segments.encode(text) + eos))
            slot.advance(agent, segments, sampling, limits)
        reason = _drop_reason(slot.trajectories)
        if reason:
            dropped[reason] = dropped.get(reason, 0) + 1
        else:
            kept.extend(slot.trajectories)
    return Demonstrations(kept, len(examples) - sum(dropped.values()), dropped)


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
