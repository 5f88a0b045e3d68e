"""``reward.exec_metric=test_suite`` through each design's real reward function (a role-split
reward, DualSQL's, is scored on its last role: the one that writes the SQL)."""

from __future__ import annotations

import importlib
from typing import Any

import pytest

from agents.types import Example
from rex.test_suite import SuiteSettings, ensure_suite
from tests.helpers.designs import project_designs
from tests.helpers.reward_cases import trajectory, turn
from tests.rex.test_suite.conftest import GOLDS, OVER_100
from training.algorithm.rewards import get_reward


def exec_component(design: str, sql: str, db: Any) -> float:
    example = Example(
        id="q1", db_id="shop", db_path=str(db.path), question="How many orders over 100?", gold_sql=OVER_100
    )
    from agents.designs import get_design

    roles = getattr(importlib.import_module(f"designs.{design}.reward"), "ROLES", ("agent",))
    traj = trajectory(sql, [turn(0, "answer", text=f"<answer>{sql}</answer>")], role=roles[-1])
    breakdown = get_reward(get_design(design).reward, exec_metric="test_suite")(traj, example, db)
    assert breakdown.error is None
    return breakdown.components["exec"]


@pytest.mark.parametrize("design", project_designs())
def test_a_query_matching_only_on_the_original_earns_no_execution_reward(shop: Any, design: str) -> None:
    ensure_suite(shop, GOLDS, SuiteSettings(neighbours=4, rows_per_table=12))
    assert exec_component(design, OVER_100, shop) == 1.0
    assert exec_component(design, "SELECT COUNT(id) FROM orders WHERE amount > 100.0", shop) == 1.0
    assert exec_component(design, "SELECT COUNT(*) FROM orders", shop) == 0.0
