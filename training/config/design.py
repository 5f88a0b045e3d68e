"""The design groups of the typed configuration (``training.config`` builds them): ``agent``,
``reward`` and ``advantage``, the three a recipe picks its paper's design with. Each names a
plugin that is checked against its registry when the value is checked (``training.config.fields``),
so a plugin a user registered is accepted exactly like a built-in one.

Agent and reward options differ per design: their group files hold ``name`` plus the
design's keyword options, which are kept in ``options`` and passed to ``make_agent`` /
``get_reward`` as they are (a typo is caught by Hydra's struct mode, a wrong option by the
factory's signature).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tools.errors import ConfigError
from training.config.fields import _f, _need, agent_names, estimator_names, exec_metric_names, need_choice, reward_names

GROUP_BY = ("role", "question")


@dataclass
class AgentConfig:
    """``agent`` group: which design drives the episodes, and its options."""

    name: str = _f("", "registered agent name (agents.list_agents()); the recipe picks it", agent_names)
    options: dict[str, Any] = _f({}, "keyword options for agents.make_agent, from the group file")

    def __post_init__(self) -> None:
        if not self.name:
            from training.config.search_path import list_recipes

            raise ConfigError(
                f"no recipe chosen; run with recipe=<name>, one of: {', '.join(list_recipes())} "
                f"(or pick an agent with agent=<{'|'.join(agent_names())}>)"
            )
        need_choice("agent.name", self.name, agent_names, " (or register one with agents.register_agent)")
        for key, value in self.options.items():
            if "max_turns" in key:
                _need(
                    isinstance(value, int) and value >= 1, f"agent.{key}={value!r}: a turn budget is a positive integer"
                )

    def turn_budget_keys(self) -> list[str]:
        """Option names that are turn budgets (the laptop profile caps them)."""
        return [k for k in self.options if "max_turns" in k]


@dataclass
class RewardConfig:
    """``reward`` group: the reward function and its execution metric."""

    name: str = _f(
        "", "registered reward name (training.algorithm.rewards.list_rewards()); the recipe picks it", reward_names
    )
    exec_metric: str = _f(
        "ex",
        "execution score inside the reward: a registered metric - ex | rex | qatch | "
        "spider | test_suite, or one added with rex.register_metric",
        exec_metric_names,
    )
    options: dict[str, Any] = _f({}, "other keyword options for training.algorithm.rewards.get_reward")

    def __post_init__(self) -> None:
        need_choice(
            "reward.name", self.name, reward_names, " (or register one with training.algorithm.rewards.register_reward)"
        )
        need_choice(
            "reward.exec_metric", self.exec_metric, exec_metric_names, " (or register one with rex.register_metric)"
        )


@dataclass
class AdvantageConfig:
    """``advantage`` group: how rewards become per-token advantages."""

    estimator: str = _f(
        "grpo",
        "a registered estimator: grpo (one track) | two_track (TRUST-SQL phase-aware), "
        "or one added with training.algorithm.advantages.register_estimator",
        estimator_names,
    )
    epsilon: float = _f(1e-6, "added to the group std before dividing")
    norm_by_std: bool = _f(True, "divide by the group std (False = Dr.GRPO, mean-centred only)")
    group_by: str = _f(
        "role",
        "role: one group per (question, role) - e.g. separate linker and "
        "generator groups; question: one group per question",
        GROUP_BY,
    )
    clamp: float | None = _f(None, "clamp advantages to +-clamp (TRUST-SQL: 10); null = no clamp")
    schema_weight: float = _f(0.25, "two_track: lambda in loss = lambda*PG_schema + PG_full")
    schema_track: str = _f("schema", "two_track: the reward track normalised on the phase prefix")

    def __post_init__(self) -> None:
        need_choice(
            "advantage.estimator",
            self.estimator,
            estimator_names,
            " (or the group: advantage=grpo / advantage=two_track)",
        )
        _need(self.group_by in GROUP_BY, f"advantage.group_by={self.group_by!r}; choose one of {GROUP_BY}")
        _need(self.epsilon > 0, f"advantage.epsilon={self.epsilon}: must be > 0 (it guards a division)")
        _need(self.clamp is None or self.clamp > 0, f"advantage.clamp={self.clamp}: positive or null")
        _need(self.schema_weight >= 0, f"advantage.schema_weight={self.schema_weight}: must be >= 0")
