"""``python -m agents``: inspect the agents without a model.

    python -m agents list
    python -m agents show trustsql --db path/to/db.sqlite --question "How many …?"
    python -m agents show dualsql --role generator --linked "schools.city, schools.name" --db … --question …
    python -m agents show think2sql --gold-sql "SELECT …" --db … --question …   # gold-table schema

``show`` prints the chat messages a model would see first (system prompt with the tool
descriptions, then the user prompt); ``--json`` prints them as JSON instead.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agents import agent_options, get_agent, list_agents, make_agent
from agents.parsing import parse_column_list
from agents.types import EpisodeResult, Example, Message, SchemaSelection
from tools.errors import ToolkitError


def _option(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"options are key=value, got {text!r}")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m agents", description="Inspect the registered agents.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="registered agents and their options")
    show = sub.add_parser("show", help="render the prompt an agent gives the model")
    show.add_argument("agent", help=f"one of: {', '.join(list_agents())}")
    show.add_argument("--db", required=True, type=Path, help="SQLite database file")
    show.add_argument("--question", required=True)
    show.add_argument("--evidence", default="")
    show.add_argument("--gold-sql", default="", help="gold SQL (an agent may restrict the schema to its tables)")
    show.add_argument(
        "--role",
        default=None,
        help="the episode role, for agents with several (e.g. linker, generator); default: the first",
    )
    show.add_argument(
        "--linked", default="", help="a generator role's linked table.column list (the linker's result it starts from)"
    )
    show.add_argument("--option", "-o", action="append", type=_option, default=[], help="agent option key=value")
    show.add_argument("--json", action="store_true", help="print the messages as JSON")
    return parser


def build_example(db_path: Path, question: str, evidence: str = "", gold_sql: str = "") -> tuple[Example, Any]:
    """An ad-hoc example on ``db_path`` (gold tables/columns read from ``gold_sql``)."""
    from tools import get_database

    if not db_path.is_file():
        raise ToolkitError(f"no database file at {db_path}; pass --db path/to/database.sqlite")
    db = get_database(db_path)
    tables: tuple[str, ...] = ()
    columns: tuple[str, ...] = ()
    if gold_sql:
        from rex.sql import referenced_schema

        ref = referenced_schema(gold_sql, db.schema())
        tables, columns = tuple(ref.tables), tuple(ref.columns)
    example = Example(
        id="cli",
        db_id=db.db_id,
        db_path=str(db_path),
        question=question,
        evidence=evidence,
        gold_sql=gold_sql,
        gold_tables=tables,
        gold_columns=columns,
    )
    return example, db


def prompt_messages(
    agent_name: str, example: Example, db: Any, options: dict[str, Any], role: str | None = None, linked: str = ""
) -> list[Message]:
    """The first messages of ``agent_name``'s episode (``role`` picks the episode of an agent with several roles)."""
    agent = make_agent(agent_name, **options)
    previous: Sequence[EpisodeResult] = ()
    if role == "generator":
        columns = parse_column_list(linked)
        schema = SchemaSelection(tables=tuple(dict.fromkeys(c.split(".", 1)[0] for c in columns)), columns=columns)
        previous = (EpisodeResult("linker", None, schema if columns else None, [], "answer"),)
    elif role not in (None, "linker", "agent"):
        raise ToolkitError(f"unknown role {role!r}; use linker or generator, or leave --role out")
    episode = agent.start(example, db, previous)
    if episode is None:
        raise ToolkitError(f"agent {agent_name!r} has no episode for role {role!r}")
    return list(episode.messages)


def format_messages(messages: Sequence[Message]) -> str:
    return "\n\n".join(f"=== {m['role']} ===\n{m['content']}" for m in messages) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)  # the parser lists the agents: a broken design fails here
        if args.command == "list":
            for name in list_agents():
                opts = ", ".join(f"{k}={v!r}" for k, v in agent_options(name).items())
                print(f"{name}: {opts}")
            return 0
        get_agent(args.agent)  # an unknown name is reported first, with the registered ones
        example, db = build_example(args.db, args.question, args.evidence, args.gold_sql)
        messages = prompt_messages(args.agent, example, db, dict(args.option), args.role, args.linked)
    except ToolkitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(messages, indent=2, ensure_ascii=False) if args.json else format_messages(messages), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
