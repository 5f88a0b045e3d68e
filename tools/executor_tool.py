"""The SQL executor tool: one ``tools.db.connection.execute`` call, registered by each design
under its own name, description and preset (``register_executor_tool``).

Designs differ in what their executor may do (rows returned, cell width, metadata PRAGMAs,
schema queries in full), not in how it runs: every one of them is this tool with its own
``QueryLimits``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tools.db.backend import Backend
from tools.db.connection import execute
from tools.db.limits import PRESETS, QueryLimits, register_preset
from tools.db.results import QueryResult, ToolError
from tools.toolbox import DB_ID_PROPERTY, SQL_PROPERTY, ToolOutput, ToolSpec, register_tool

MAX_RETURN_ROWS_CAP = 1000
"""The most rows a model may ask an executor with a ``max_return_rows`` argument for."""


def run_sql(
    db: Backend, sql: str, limits: QueryLimits | str, max_return_rows: int | None = None
) -> QueryResult | ToolError:
    """Execute ``sql`` under a preset (by name or value); ``max_return_rows`` overrides
    the preset's row cap, clamped to ``MAX_RETURN_ROWS_CAP``."""
    if isinstance(limits, str):
        if limits not in PRESETS:
            return ToolError("bad_arguments", f"unknown preset {limits!r}; use one of {sorted(PRESETS)}")
        limits = PRESETS[limits]
    if max_return_rows is not None:
        if isinstance(max_return_rows, bool) or not isinstance(max_return_rows, int) or max_return_rows < 1:
            return ToolError("bad_arguments", f"max_return_rows must be a positive integer, got {max_return_rows!r}")
        limits = dataclasses.replace(limits, max_rows=min(max_return_rows, MAX_RETURN_ROWS_CAP))
    return execute(db, sql, limits)


def register_executor_tool(
    name: str,
    description: str,
    preset: str,
    limits: QueryLimits,
    *,
    max_return_rows: int | None = None,
    other_dialects: str = "",
) -> ToolSpec:
    """Register the executor tool ``name`` running under preset ``preset`` (registered too).

    ``max_return_rows``: give the tool a ``max_return_rows`` argument with this default (the
    model picks its row cap up to ``MAX_RETURN_ROWS_CAP``); None: the preset's cap only.
    A toolbox built with an explicit preset runs the tool under that one instead.
    ``other_dialects``: the description on a non-SQLite database (``ToolSpec.other_dialects``).
    """
    register_preset(preset, limits)
    properties: dict[str, Any] = {"db_id": DB_ID_PROPERTY, "sql": SQL_PROPERTY}
    defaults: dict[str, Any] = {}
    if max_return_rows is not None:
        properties["max_return_rows"] = {
            "type": "integer",
            "description": f"Most rows to return (default {max_return_rows}).",
            "minimum": 1,
            "maximum": MAX_RETURN_ROWS_CAP,
        }
        defaults["max_return_rows"] = max_return_rows

    def run(db: Backend, args: dict[str, Any], toolbox_preset: str | None) -> ToolOutput:
        return run_sql(db, args["sql"], toolbox_preset or preset, args.get("max_return_rows"))

    spec = ToolSpec(
        name=name,
        description=description,
        properties=properties,
        required=("db_id", "sql"),
        run=run,
        defaults=defaults,
        other_dialects=other_dialects,
    )
    return register_tool(spec)
