"""Fixtures of the design tests: the agent tests' database and examples
(tests/helpers/agent_db.py) and the reward tests' database (tests/helpers/reward_cases.py)."""

from __future__ import annotations

from tests.helpers.agent_db import _cache_dir, db, db_path, example, join_example
from tests.helpers.reward_cases import school_db

__all__ = ["_cache_dir", "db", "db_path", "example", "join_example", "school_db"]
