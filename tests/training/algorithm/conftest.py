"""The reward tests' small real SQLite database (tests/helpers/reward_cases.py)."""

from __future__ import annotations

from tests.helpers.reward_cases import school_db

__all__ = ["school_db"]
