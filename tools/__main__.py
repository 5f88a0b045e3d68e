"""Command line for people debugging a database: runs one tool and prints its JSON.

    python -m tools sqlite_query --db x.sqlite --sql "SELECT 1"
    python -m tools sqlite_peek --db x.sqlite --table t --columns a,b
    python -m tools bm25_search_sqlite --db x.sqlite --table t --column c --query "new york"
    python -m tools profile --db x.sqlite
    python -m tools schema --db x.sqlite --format mschema|ddl|compact [--tables a,b]
    python -m tools build-cache data=bird data.root=PATH      # every profile and index, once (tools/build_cache.py)
    python -m tools build-cache --db x.sqlite --db y.sqlite

Exit status: 0 when the tool succeeded, 1 when it returned an error, 2 on bad usage.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from tools.db.connection import get_database
from tools.db.limits import PRESETS
from tools.errors import ConfigError, ToolkitError
from tools.toolbox import TOOLS, ToolBox


def _option(name: str) -> str:
    return "--" + name.replace("_", "-")


def _add_tool_parser(sub: argparse._SubParsersAction, name: str) -> None:
    spec = TOOLS.get(name)
    parser = sub.add_parser(name, help=spec.description.split(".")[0])
    _add_common(parser)
    parser.add_argument("--preset", choices=sorted(PRESETS), help="executor preset for SQL tools")
    for prop, schema in spec.properties.items():
        if prop == "db_id":
            continue
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        kind = int if "integer" in types else str
        hint = "comma-separated" if "array" in types else None
        parser.add_argument(
            _option(prop),
            dest=prop,
            type=kind,
            required=prop in spec.required and "array" not in types,
            help=" ".join(x for x in (schema.get("description", ""), hint) if x),
        )


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", required=True, help="path of the .sqlite (or .duckdb) file")
    parser.add_argument("--db-id", help="database id (default: the file stem)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools", description="Run a read-only database tool and print its JSON."
    )
    sub = parser.add_subparsers(dest="tool", required=True)
    for name in TOOLS.names():
        _add_tool_parser(sub, name)
    profile = sub.add_parser("profile", help="the full database profile (cached)")
    _add_common(profile)
    schema = sub.add_parser("schema", help="the schema as M-Schema, DDL or a compact list")
    _add_common(schema)
    schema.add_argument("--format", choices=("mschema", "ddl", "compact"), default="mschema")
    schema.add_argument("--tables", help="comma-separated tables to keep")
    schema.add_argument("--columns", help="comma-separated table.column names to keep")
    build = sub.add_parser("build-cache", help="build every database profile and search index once, before training")
    build.add_argument(
        "overrides",
        nargs="*",
        metavar="data=<kind> data.<key>=<value>",
        help="the benchmark whose training and held-out databases to build (default data=minibird)",
    )
    build.add_argument(
        "--db", dest="db_paths", action="append", default=[], help="a .sqlite or .duckdb file (repeatable)"
    )
    build.add_argument("--only", help="comma-separated subset of profile,fts,bm25 (default: all three)")
    build.add_argument(
        "--bm25-columns",
        choices=("all", "text"),
        default="all",
        help="BM25 indexes for every column (default) or only columns holding text",
    )
    return parser


def _split(text: str | None) -> list[str] | None:
    return [x.strip() for x in text.split(",") if x.strip()] if text is not None else None


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.tool == "build-cache":
        from tools.build_cache import main as build_cache

        try:
            if args.overrides and args.db_paths:
                raise ConfigError("pass data=<kind> [data.<key>=<value> ...] or --db PATH, not both")
            paths = args.db_paths
            if not paths:  # a benchmark's databases: the data layer resolves them (this entry point sits on top)
                from eval.data.databases import databases_of_data

                paths = databases_of_data(args.overrides or ["data=minibird"])
            return build_cache(paths, args.only, args.bm25_columns)
        except ToolkitError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    try:
        db = get_database(args.db, args.db_id)
    except ToolkitError as exc:
        print(json.dumps({"error": {"kind": "unknown_database", "message": str(exc)}}), file=sys.stderr)
        return 2
    if args.tool == "profile":
        print(json.dumps(db.profile().to_json(), indent=2, ensure_ascii=False, default=str))
        return 0
    if args.tool == "schema":
        from tools.schema import compact_schema, ddl_schema, m_schema

        render = {"mschema": m_schema, "ddl": ddl_schema, "compact": compact_schema}[args.format]
        print(render(db.profile(), _split(args.tables), _split(args.columns)))
        return 0
    spec = TOOLS.get(args.tool)
    call: dict[str, Any] = {"db_id": db.db_id}
    for prop, schema in spec.properties.items():
        value = getattr(args, prop, None)
        if prop == "db_id" or value is None:
            continue
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        call[prop] = _split(value) if "array" in types else value
    if "columns" in spec.required and "columns" not in call:
        call["columns"] = []
    response = ToolBox(db, [args.tool], preset=args.preset).call(args.tool, call)
    print(json.dumps(response.payload, indent=2, ensure_ascii=False, default=str))
    return 0 if response.ok else 1


if __name__ == "__main__":
    sys.exit(main())
