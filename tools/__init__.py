"""The shared, read-only database tool layer (see docs/INTERFACES.md).

Every tool, reward and evaluation runs SQL through ``tools.db.connection``: one read-only
connection helper with an authorizer, a VM-step limit and a wall-clock deadline. A database
is a ``Backend`` (``tools.db.backend``): SQLite (``Database``), DuckDB (a ``.duckdb`` file)
or one schema of a PostgreSQL database (a ``postgresql://…#schema`` locator).
"""

from __future__ import annotations

from tools.db.backend import Backend
from tools.db.connection import Database, execute, get_database
from tools.db.limits import DEFAULT_LIMITS, INTERNAL_LIMITS, METADATA_PRAGMAS, PRESETS, QueryLimits, register_preset
from tools.db.results import ERROR_KINDS, QueryResult, ToolError
from tools.moved import install_moved_modules
from tools.toolbox import TOOLS, ToolBox, ToolResponse, ToolSpec, tool_schemas

MOVED = {"tools.bm25": "tools.explore.bm25", "tools.profile": "tools.schema.profile", "tools.registry": "tools.plugins"}
"""Public module paths that moved (docs/INTERFACES.md "Extension points" and the profile types)."""
install_moved_modules(MOVED)

__all__ = [
    "DEFAULT_LIMITS",
    "ERROR_KINDS",
    "INTERNAL_LIMITS",
    "METADATA_PRAGMAS",
    "PRESETS",
    "TOOLS",
    "Backend",
    "Database",
    "QueryLimits",
    "QueryResult",
    "ToolBox",
    "ToolError",
    "ToolResponse",
    "ToolSpec",
    "execute",
    "get_database",
    "register_preset",
    "tool_schemas",
]
