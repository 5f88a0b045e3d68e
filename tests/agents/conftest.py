"""The agent tests' small real SQLite database and examples (tests/helpers/agent_db.py)."""

from __future__ import annotations

from tests.helpers.agent_db import _cache_dir, db, db_path, example, join_example

__all__ = ["_cache_dir", "db", "db_path", "example", "join_example"]
