"""Tool specs, OpenAI function schemas and the one dispatcher (``ToolBox.call``).

The dispatcher takes a tool name and the arguments as a model writes them (a JSON string
or a mapping) and returns a ``ToolResponse``; it never raises. Unknown tools, bad JSON,
missing / unknown / mistyped arguments and a foreign ``db_id`` come back as structured
errors (``unknown_tool``, ``bad_arguments``, ``unknown_database``), so a rollout can count
them and the model can read what to fix.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tools.db.backend import Backend
from tools.db.dialects import dialect_info
from tools.db.limits import PRESETS
from tools.db.results import QueryResult, ToolError
from tools.errors import ConfigError
from tools.explore.bm25 import bm25_search_sqlite
from tools.explore.fts import fts_search
from tools.explore.peek import sqlite_peek
from tools.plugins import DESIGN_GROUP, Registry
from tools.schema.profile import DatabaseProfile
from tools.spelling import did_you_mean

log = logging.getLogger(__name__)

ToolOutput = QueryResult | ToolError | dict[str, Any]
Runner = Callable[[Backend, dict[str, Any], str | None], ToolOutput]


@dataclass(frozen=True)
class ToolSpec:
    """One tool: its OpenAI-visible description and parameters, and how to run it.
    ``run(db, arguments, preset)`` receives validated arguments (defaults filled in).
    ``other_dialects``: the description on a database of another dialect than SQLite, with
    ``$dialect`` / ``$catalogue`` filled from its ``tools.db.dialects`` entry (empty: the
    SQLite description serves every dialect)."""

    name: str
    description: str
    properties: Mapping[str, Mapping[str, Any]]
    required: tuple[str, ...]
    run: Runner
    defaults: Mapping[str, Any] = field(default_factory=dict)
    other_dialects: str = ""

    def schema(self, dialect: str = "sqlite") -> dict[str, Any]:
        """The OpenAI function-calling schema (also used in veRL's tool config), as a model
        on a database of ``dialect`` sees it (the backend's ``dialect``)."""
        description, properties = self.description, {k: dict(v) for k, v in self.properties.items()}
        if dialect != "sqlite":
            info = dialect_info(dialect)
            description = info.fill(self.other_dialects) if self.other_dialects else description
            if properties.get("sql") == SQL_PROPERTY:
                properties["sql"] = {**SQL_PROPERTY, "description": f"One {info.display} statement."}
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": description,
                "parameters": {
                    "type": "object",
                    "properties": properties,
                    "required": list(self.required),
                },
            },
        }


TOOLS: Registry[ToolSpec] = Registry("tool", plugins=DESIGN_GROUP)


def register_tool(spec: ToolSpec) -> ToolSpec:
    return TOOLS.register(spec.name)(spec)


DB_ID_PROPERTY = {"type": "string", "description": "The database id given in the task."}
SQL_PROPERTY = {"type": "string", "description": "One SQLite statement."}
_WHERE = {
    "type": ["string", "null"],
    "description": 'Optional SQL predicate restricting the rows, e.g. "year = 2020" (read-only).',
}


register_tool(
    ToolSpec(
        name="sqlite_peek",
        description=(
            "Profile columns of a table over at most 5,000 rows: declared type, null and "
            "distinct counts, min/max, character classes (digits, letters, mixed, date-like, "
            "percent-like), common prefixes, top values with frequencies and samples."
        ),
        properties={
            "db_id": DB_ID_PROPERTY,
            "table": {"type": "string", "description": "Table name."},
            "columns": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Column names to profile (empty list = all columns).",
            },
            "limit": {
                "type": "integer",
                "description": "Top values and samples per column (default 10).",
                "minimum": 1,
                "maximum": 50,
            },
            "where": _WHERE,
        },
        required=("db_id", "table", "columns"),
        run=lambda db, a, _p: sqlite_peek(db, a["table"], a["columns"], a["limit"], a.get("where")),
        defaults={"limit": 10, "where": None},
    )
)
register_tool(
    ToolSpec(
        name="bm25_search_sqlite",
        description=(
            "Search the stored values of one column for a phrase (case-insensitive): BM25-"
            "ranked values plus substring matches, up to 2*top_k hits with scores. Use it to "
            "find the exact spelling of a value before writing a WHERE clause."
        ),
        properties={
            "db_id": DB_ID_PROPERTY,
            "table": {"type": "string", "description": "Table name."},
            "column": {"type": "string", "description": "Column whose values to search."},
            "query": {"type": "string", "description": "Words or phrase to look for."},
            "top_k": {"type": "integer", "description": "Hits per matcher (default 10).", "minimum": 1, "maximum": 50},
            "where": _WHERE,
        },
        required=("db_id", "table", "column", "query"),
        run=lambda db, a, _p: bm25_search_sqlite(db, a["table"], a["column"], a["query"], a["top_k"], a.get("where")),
        defaults={"top_k": 10, "where": None},
    )
)
register_tool(
    ToolSpec(
        name="fts_search",
        description=(
            "Full-text search over table names, column names and cell values; returns the "
            "matching tables/columns and up to 5 distinct matching values per column."
        ),
        properties={
            "db_id": DB_ID_PROPERTY,
            "query": {"type": "string", "description": "Keywords to look for."},
            "k": {
                "type": "integer",
                "description": "Most schema matches and most value columns (default 10).",
                "minimum": 1,
                "maximum": 50,
            },
        },
        required=("db_id", "query"),
        run=lambda db, a, _p: fts_search(db, a["query"], a["k"]),
        defaults={"k": 10},
    )
)


def profile_json(profile: DatabaseProfile, tables: Sequence[str] | None = None) -> dict[str, Any]:
    """The profile as the ``get_profile`` observation: descriptions, keys (inferred ones
    marked), per-column statistics; empty fields dropped; optionally some tables only."""
    wanted = {t.lower() for t in tables} if tables else None
    shown = [t for t in profile.tables if wanted is None or t.name.lower() in wanted]
    names = {t.name for t in shown}
    return {
        "db_id": profile.db_id,
        "tables": [
            {
                "name": t.name,
                "rows": t.row_count,
                "primary_key": list(t.primary_key),
                "columns": [_column_json(c) for c in t.columns],
            }
            for t in shown
        ],
        "foreign_keys": [
            {"from": f"{fk.table}.{fk.column}", "to": f"{fk.ref_table}.{fk.ref_column}", "inferred": fk.inferred}
            for fk in profile.foreign_keys
            if fk.table in names and fk.ref_table in names
        ],
    }


def _column_json(col: Any) -> dict[str, Any]:
    data = {
        "name": col.name,
        "type": col.declared_type,
        "description": col.description,
        "full_name": col.full_name,
        "value_description": col.value_description,
        "nulls": col.nulls,
        "distinct": col.distinct,
        "min": col.min,
        "max": col.max,
        "avg": col.avg,
        "numbers_stored_as_text": col.numeric_text or None,
        "top_values": [list(tv) for tv in col.top_values],
        "examples": list(col.examples),
    }
    return {k: v for k, v in data.items() if v not in (None, "", [])}


def _run_get_profile(db: Backend, args: dict[str, Any], _preset: str | None) -> ToolOutput:
    tables = args.get("tables")
    if tables:
        known = {t.lower() for t in db.schema()}
        missing = [t for t in tables if t.lower() not in known]
        if missing:
            return ToolError(
                "no_such_table",
                f"no such table: {', '.join(missing)}",
                did_you_mean(missing[0], list(db.schema())).lstrip("; ") or f"tables: {', '.join(db.schema())}",
            )
    return profile_json(db.profile(), tables)


register_tool(
    ToolSpec(
        name="get_profile",
        description=(
            "The database profile: tables, columns with types and descriptions, primary and "
            "foreign keys (inferred ones marked), per-column statistics and example values."
        ),
        properties={
            "db_id": DB_ID_PROPERTY,
            "tables": {
                "type": ["array", "null"],
                "items": {"type": "string"},
                "description": "Only these tables (default: all).",
            },
        },
        required=("db_id",),
        run=_run_get_profile,
        defaults={"tables": None},
    )
)


def tool_schemas() -> dict[str, dict[str, Any]]:
    """Every registered tool's OpenAI function schema, by name (the designs' tools included)."""
    return {name: TOOLS.get(name).schema() for name in TOOLS.names()}


"""OpenAI function schema of every tool, by name."""


# --------------------------------------------------------------------------- dispatch


@dataclass(frozen=True)
class ToolResponse:
    """What a tool call gives back: ``payload`` is the JSON observation (``{"error": …}``
    on failure), ``error_kind`` the ``ToolError`` kind or None."""

    ok: bool
    payload: dict[str, Any]
    error_kind: str | None = None

    @property
    def text(self) -> str:
        """The observation as the model sees it (compact JSON)."""
        return json.dumps(self.payload, ensure_ascii=False, default=str)

    @classmethod
    def from_output(cls, output: ToolOutput) -> ToolResponse:
        if isinstance(output, ToolError):
            return cls(False, {"error": output.to_json()}, output.kind)
        if isinstance(output, QueryResult):
            return cls(True, output.to_json())
        return cls(True, output)


class ToolBox:
    """The tools one episode may call on one database.

    ``preset`` names the ``QueryLimits`` preset the executor tools use; ``None`` lets each
    executor run under the preset its design registered with it (``tools.executor_tool``).
    """

    def __init__(self, db: Backend, tool_names: Sequence[str], preset: str | None = None) -> None:
        self.db = db
        self.specs = [TOOLS.get(name) for name in tool_names]
        if preset is not None and preset not in PRESETS:
            raise ConfigError(
                f"unknown executor preset {preset!r}{did_you_mean(preset, list(PRESETS))} use one of {sorted(PRESETS)}"
            )
        self.preset = preset

    @property
    def tool_names(self) -> list[str]:
        return [s.name for s in self.specs]

    def schemas(self) -> list[dict[str, Any]]:
        """The tools' schemas as a model on this toolbox's database sees them (its dialect)."""
        return [s.schema(self.db.dialect) for s in self.specs]

    def call(self, name: Any, arguments: Any) -> ToolResponse:
        """Run one tool call; every failure is a structured ``ToolResponse`` error."""
        try:
            return ToolResponse.from_output(self._call(name, arguments))
        except Exception as exc:
            log.exception("tool %r failed on %s", name, self.db.db_id)
            return ToolResponse.from_output(ToolError("other", f"internal tool error: {type(exc).__name__}: {exc}"))

    def _call(self, name: Any, arguments: Any) -> ToolOutput:
        spec = next((s for s in self.specs if s.name == name), None)
        if spec is None:
            offered = self.tool_names
            return ToolError(
                "unknown_tool",
                f"unknown tool {name!r}{did_you_mean(str(name), offered)}",
                f"available tools: {', '.join(offered)}",
            )
        args = parse_arguments(arguments)
        if isinstance(args, ToolError):
            return args
        checked = validate_arguments(spec, args)
        if isinstance(checked, ToolError):
            return checked
        db_id = checked["db_id"]
        if db_id != self.db.db_id:
            return ToolError(
                "unknown_database",
                f"unknown database {db_id!r}",
                f"this task's database is {self.db.db_id!r}; pass db_id={self.db.db_id!r}",
            )
        return spec.run(self.db, checked, self.preset)


def parse_arguments(arguments: Any) -> dict[str, Any] | ToolError:
    """Model-written arguments -> a dict: a JSON object string (double-encoded JSON is
    unwrapped once), a mapping, or None (no arguments)."""
    if arguments is None:
        return {}
    if isinstance(arguments, Mapping):
        return dict(arguments)
    if not isinstance(arguments, str):
        return ToolError("bad_arguments", f"arguments must be a JSON object, got {type(arguments).__name__}")
    text = arguments.strip() or "{}"
    try:
        value = json.loads(text)
        if isinstance(value, str):
            value = json.loads(value)
    except json.JSONDecodeError as exc:
        return ToolError(
            "bad_arguments",
            f"arguments are not valid JSON ({exc.msg} at character {exc.pos})",
            'write them as a JSON object, e.g. {"db_id": "…", "sql": "SELECT …"}',
        )
    if not isinstance(value, dict):
        return ToolError("bad_arguments", f"arguments must be a JSON object, got {type(value).__name__}")
    return value


_JSON_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer()),
    "array": lambda v: isinstance(v, list),
    "null": lambda v: v is None,
}


def validate_arguments(spec: ToolSpec, args: dict[str, Any]) -> dict[str, Any] | ToolError:
    """Check names, presence and JSON types against the spec; fill in defaults."""
    usage = f"{spec.name}({', '.join(spec.properties)})"
    unknown = [k for k in args if k not in spec.properties]
    if unknown:
        return ToolError(
            "bad_arguments",
            f"unknown argument {unknown[0]!r}{did_you_mean(unknown[0], list(spec.properties))}",
            f"arguments: {usage}",
        )
    missing = [k for k in spec.required if k not in args]
    if missing:
        return ToolError(
            "bad_arguments",
            f"missing required argument {missing[0]!r}",
            f"arguments: {usage}; required: {', '.join(spec.required)}",
        )
    out = dict(spec.defaults)
    for key, value in args.items():
        checked = _check_value(spec.name, key, spec.properties[key], value)
        if isinstance(checked, ToolError):
            return checked
        out[key] = checked
    return out


def _check_value(tool: str, key: str, prop: Mapping[str, Any], value: Any) -> Any:
    types = prop["type"] if isinstance(prop["type"], list) else [prop["type"]]
    if key == "columns" and isinstance(value, str):
        value = [c.strip() for c in value.split(",") if c.strip()]  # "a, b" is a common slip
    if not any(_JSON_TYPES[t](value) for t in types):
        wanted = " or ".join(types)
        return ToolError(
            "bad_arguments", f"{tool}: argument {key!r} must be {wanted}, got {type(value).__name__} {value!r:.60}"
        )
    if "integer" in types and value is not None:
        value = int(value)
        low, high = prop.get("minimum"), prop.get("maximum")
        if (low is not None and value < low) or (high is not None and value > high):
            return ToolError("bad_arguments", f"{tool}: argument {key!r}={value} is out of range [{low}, {high}]")
    if "array" in types and isinstance(value, list):
        if not all(isinstance(v, str) for v in value):
            return ToolError("bad_arguments", f"{tool}: argument {key!r} must be a list of strings")
    return value
