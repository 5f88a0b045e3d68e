"""KL-to-reference coefficient as a step schedule.

ReToolSQL anneals beta 0.005 -> 0.001 -> 0 at steps 40 / 80; the others use 0. veRL has a
fixed ``kl_loss_coef`` and no schedule, so the schedule lives here and both engines read
it. While beta is 0 from some step on, no reference model is needed from then on (the
local engine frees it and skips the reference forward pass). The KL term itself is veRL's
(``core_algos.kl_penalty``): the local engine adds it in ``training.engines.local.loss.grpo_loss``, the veRL
engine in its actor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tools.errors import ConfigError


@dataclass(frozen=True)
class KLSchedule:
    """Piecewise-constant beta: ``points`` are ``(from_step, beta)`` sorted by step.

    >>> s = KLSchedule.from_pairs([[0, 0.005], [40, 0.001], [80, 0.0]])
    >>> s.beta(0), s.beta(39), s.beta(40), s.beta(80), s.beta(1000)
    (0.005, 0.005, 0.001, 0.0, 0.0)
    >>> s.needs_reference(79), s.needs_reference(80)
    (True, False)
    """

    points: tuple[tuple[int, float], ...]

    @classmethod
    def from_pairs(cls, pairs: Sequence[Sequence[Any]]) -> KLSchedule:
        """Validate ``[[step, beta], ...]``; the first step must be 0."""
        points: list[tuple[int, float]] = []
        for pair in pairs:
            if len(pair) != 2:
                raise ConfigError(f"algorithm.kl_schedule entry {list(pair)!r}: write [from_step, beta]")
            step, beta = int(pair[0]), float(pair[1])
            if step < 0 or beta < 0:
                raise ConfigError(f"algorithm.kl_schedule entry {list(pair)!r}: step and beta must be >= 0")
            points.append((step, beta))
        if not points or points[0][0] != 0:
            raise ConfigError(
                f"algorithm.kl_schedule={[list(p) for p in pairs]!r}: start with [0, beta], "
                "e.g. [[0, 0.005], [40, 0.001], [80, 0.0]] or [[0, 0.0]] for no KL"
            )
        steps = [s for s, _ in points]
        if steps != sorted(set(steps)):
            raise ConfigError(f"algorithm.kl_schedule steps {steps}: strictly increasing, please")
        return cls(tuple(points))

    def beta(self, step: int) -> float:
        """The coefficient in force at ``step`` (0-based optimizer step)."""
        value = self.points[0][1]
        for start, beta in self.points:
            if step >= start:
                value = beta
        return value

    def needs_reference(self, step: int) -> bool:
        """True if beta is positive at ``step`` or any later step."""
        return self.beta(step) > 0 or any(beta > 0 for start, beta in self.points if start > step)
