"""Reward functions of the four designs, registered by name.

``get_reward(name, **options)`` returns a ``RewardFn``: ``(trajectory, example, db) ->
RewardBreakdown`` with ``total``, named ``components`` (always ``exec``) and ``tracks``
(always ``full``; TRUST-SQL adds ``schema``). Registered: ``composite`` (ReToolSQL),
``think2sql``, ``trustsql``, ``dualsql``, and the single-metric ``ex``, ``rex``,
``qatch``. Every reward takes ``exec_metric`` (ex | rex | qatch).
"""

from __future__ import annotations

from training.rewards import composite, dualsql, single, think2sql, trustsql  # noqa: F401  (register)
from training.rewards.base import (
    REWARDS,
    dapo_overlong_penalty,
    get_reward,
    list_rewards,
    register_reward,
)
from training.rewards.composite import CompositeReward
from training.rewards.dualsql import DualSQLReward
from training.rewards.single import EXReward, QATCHReward, REXReward
from training.rewards.think2sql import Think2SQLReward
from training.rewards.trustsql import TrustSQLReward

__all__ = [
    "REWARDS",
    "CompositeReward",
    "DualSQLReward",
    "EXReward",
    "QATCHReward",
    "REXReward",
    "Think2SQLReward",
    "TrustSQLReward",
    "dapo_overlong_penalty",
    "get_reward",
    "list_rewards",
    "register_reward",
]
