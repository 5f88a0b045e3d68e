"""Per-step numbers on how far a step's rewards can be trusted, the same on both engines.

- ``reward/suspect_positive_rate``: the share of positive execution rewards (``exec`` > 0)
  that carry a reward-trust flag (``rex.trust.FLAGS``); 0 when no reward is positive.
- ``reward/unscored_rate``: the share of rollouts whose reward could not be computed
  (``RewardBreakdown.error``), and ``reward/unscored/<reason>`` their count per reason
  (``UNSCORED_REASONS``). Each step with any logs one warning naming the reasons and one
  message of each, so an unscored reward is never a silent 0.

Dynamic sampling reads :func:`decision_values`: with
``algorithm.dynamic_sampling.flagged_positive_as_unknown`` a flagged positive takes no part
in deciding whether its group's rewards vary.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence

from rex.trust import flagged_positive

log = logging.getLogger(__name__)

UNSCORED_REASONS: tuple[tuple[str, str], ...] = (
    ("gold_timeout", "gold SQL failed (gold_timeout"),
    ("gold_error", "gold SQL failed (gold_error"),
    ("no_database", "no database to execute on"),
    ("no_gold_sql", "has no gold SQL"),
    ("reward_raised", " raised "),
)
"""(reason, the phrase of ``training.algorithm.rewards`` errors that names it); any other
error is ``other``."""


def unscored_reason(error: str) -> str:
    """The reason name of a reward error.

    >>> unscored_reason("example 'q1': gold SQL failed (gold_timeout: timeout: 30 s)")
    'gold_timeout'
    """
    return next((name for name, phrase in UNSCORED_REASONS if phrase in error), "other")


def trust_metrics(
    exec_scores: Sequence[float], flags: Sequence[Sequence[str]], errors: Sequence[str | None]
) -> dict[str, float]:
    """The module's metrics for one step: ``exec_scores`` and ``flags`` of the rollouts that
    give a final answer (DualSQL's linker rows score linking, not execution), ``errors`` of
    every rollout.

    >>> trust_metrics([1.0, 1.0, 0.0, 0.0], [["gold_empty"], [], ["gold_empty"], []], [None, None, None, "x raised y"])
    {'reward/suspect_positive_rate': 0.5, 'reward/unscored_rate': 0.25, 'reward/unscored/reward_raised': 1.0}
    """
    positives = [f for score, f in zip(exec_scores, flags, strict=True) if score > 0]
    out = {"reward/suspect_positive_rate": sum(map(bool, positives)) / len(positives) if positives else 0.0}
    failed = [e for e in errors if e]
    out["reward/unscored_rate"] = len(failed) / len(errors) if errors else 0.0
    reasons: Counter[str] = Counter(unscored_reason(e) for e in failed)
    for reason, count in sorted(reasons.items()):
        out[f"reward/unscored/{reason}"] = float(count)
    if failed:
        first = {unscored_reason(e): e for e in reversed(failed)}
        log.warning(
            "rewards not computed for %d of %d rollouts (counted in reward/unscored_rate): %s",
            len(failed),
            len(errors),
            "; ".join(f"{reason} x{reasons[reason]}, e.g. {first[reason][:300]}" for reason in sorted(reasons)),
        )
    return out


def decision_values(
    metric: Sequence[float], exec_scores: Sequence[float], flags: Sequence[Sequence[str]], as_unknown: bool
) -> list[float | None]:
    """The values dynamic sampling decides on: ``metric``, with None (unknown) for each
    flagged positive when ``as_unknown``.

    >>> decision_values([1.0, 0.0], [1.0, 0.0], [["gold_empty"], []], True)
    [None, 0.0]
    """
    return [
        None if as_unknown and flagged_positive(score, f) else float(value)
        for value, score, f in zip(metric, exec_scores, flags, strict=True)
    ]
