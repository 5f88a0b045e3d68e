"""The shared, read-only database tool layer (see docs/INTERFACES.md).

Every tool, reward and evaluation runs SQL through ``tools.connection``: one read-only
connection helper with an authorizer, a VM-step limit and a wall-clock deadline.
"""

from __future__ import annotations

from tools.connection import Database, execute, get_database
from tools.limits import INTERNAL_LIMITS, METADATA_PRAGMAS, PRESETS, QueryLimits
from tools.results import ERROR_KINDS, QueryResult, ToolError
from tools.toolbox import TOOL_SCHEMAS, TOOLS, ToolBox, ToolResponse, ToolSpec

__all__ = [
    "ERROR_KINDS",
    "INTERNAL_LIMITS",
    "METADATA_PRAGMAS",
    "PRESETS",
    "TOOLS",
    "TOOL_SCHEMAS",
    "Database",
    "QueryLimits",
    "QueryResult",
    "ToolBox",
    "ToolError",
    "ToolResponse",
    "ToolSpec",
    "execute",
    "get_database",
]
