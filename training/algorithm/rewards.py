"""The reward registry, the pieces every design's reward shares, and the single-metric
rewards ``ex``, ``rex`` and ``qatch`` (for ablations: the execution score alone, no format
or length terms; a trajectory without final SQL scores 0).

A reward is a small frozen dataclass whose fields are its options (validated in
``__post_init__``) and whose ``__call__(trajectory, example, db)`` returns a
``RewardBreakdown``. ``get_reward(name, **options)`` builds one; an unknown option is a
``ConfigError`` naming the valid ones. Rewards never raise: a reward that cannot be
computed (the gold SQL fails, the database is missing) returns ``error=reason`` so the
trainer logs and counts it.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agents.types import Example, RewardBreakdown, RewardFn, SchemaSelection, Trajectory
from rex.linking import gold_sets, linked_sets, precision_recall_f1
from rex.scorer import METRICS, ExecScore, ExecScorer, check_metric
from tools.db.limits import METRIC_MAX_RESULT_BYTES, METRIC_MAX_RESULT_ROWS, check_result_budget
from tools.errors import ConfigError, DataError
from tools.plugins import DESIGN_GROUP, Registry

if TYPE_CHECKING:
    from tools import Backend

log = logging.getLogger(__name__)

REWARDS: Registry[type] = Registry("reward", plugins=DESIGN_GROUP)


def register_reward(name: str) -> Callable[[type], type]:
    """Class decorator: ``@register_reward("trustsql")`` on a reward dataclass."""
    return REWARDS.register(name)


def list_rewards() -> list[str]:
    """The registered reward names, sorted."""
    return REWARDS.names()


def get_reward(name: str, **options: Any) -> RewardFn:
    """The reward ``name`` built with ``options`` (its dataclass fields).

    >>> get_reward("trustsql", schema_mode="sparse_coupled").schema_mode
    'sparse_coupled'
    """
    cls = REWARDS.get(name)
    valid = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(options) - valid)
    if unknown:
        raise ConfigError(f"reward {name!r} has no option(s) {unknown}; its options are: {', '.join(sorted(valid))}")
    return cls(**options)


# --------------------------------------------------------------------------- scoring


_SCORERS: dict[tuple[float, int | None, int | None], ExecScorer] = {}
_SCORERS_LOCK = threading.Lock()


def shared_scorer(
    timeout_s: float,
    max_result_rows: int | None = METRIC_MAX_RESULT_ROWS,
    max_result_bytes: int | None = METRIC_MAX_RESULT_BYTES,
) -> ExecScorer:
    """One ``ExecScorer`` per timeout and result budget per process, so every reward shares
    the gold cache."""
    key = (timeout_s, max_result_rows, max_result_bytes)
    with _SCORERS_LOCK:
        scorer = _SCORERS.get(key)
        if scorer is None:
            scorer = _SCORERS[key] = ExecScorer(
                timeout_s=timeout_s, max_result_rows=max_result_rows, max_result_bytes=max_result_bytes
            )
        return scorer


def check_exec_metric(metric: str) -> None:
    """Validate the execution-metric knob (a ``ConfigError`` names the valid values)."""
    check_metric(metric)


def check_budget(reward: str, max_result_rows: int | None, max_result_bytes: int | None) -> None:
    """Validate a reward's result budget (``+reward.max_result_rows`` / ``max_result_bytes``)."""
    check_result_budget(f"{reward} ", max_result_rows, max_result_bytes)


def check_positive(name: str, value: float) -> None:
    if not (isinstance(value, (int, float)) and value > 0):
        raise ConfigError(f"{name}={value!r}; use a positive number")


def execution(
    trajectory: Trajectory,
    example: Example,
    db: Backend | str | os.PathLike[str] | None,
    metric: str,
    timeout_s: float,
    max_result_rows: int | None = METRIC_MAX_RESULT_ROWS,
    max_result_bytes: int | None = METRIC_MAX_RESULT_BYTES,
) -> tuple[ExecScore | None, str | None]:
    """Score the episode's final SQL against the gold SQL, or say why it cannot be.

    Returns ``(score, None)``, or ``(None, reason)`` when the reward cannot be computed:
    no database, no gold SQL, or the gold SQL itself fails (``gold_error`` /
    ``gold_timeout`` / ``gold_too_large``). A missing or failing prediction is a score (0),
    not a reason; so is a prediction past the result budget (``pred_too_large``).
    """
    if db is None:
        return None, f"example {example.id!r}: no database to execute on"
    if isinstance(db, (str, os.PathLike)):
        from tools import get_database

        db = get_database(db)
    if not example.gold_sql or not example.gold_sql.strip():
        return None, f"example {example.id!r} has no gold SQL"
    scorer = shared_scorer(timeout_s, max_result_rows, max_result_bytes)
    score = scorer.score(db, example.gold_sql, trajectory.result.final_sql, metric)
    if score.gold_failed:
        why = score.details.get("gold_error", score.outcome)
        return None, f"example {example.id!r}: gold SQL failed ({score.outcome}: {why})"
    return score, None


def failure(reason: str, components: Iterable[str] = (), tracks: Iterable[str] = ()) -> RewardBreakdown:
    """A reward that could not be computed: total 0, the named components and tracks 0
    (``exec`` and ``full`` always present), ``error`` set to ``reason``."""
    return RewardBreakdown(
        total=0.0,
        components={name: 0.0 for name in dict.fromkeys(["exec", *components])},
        tracks={name: 0.0 for name in dict.fromkeys(["full", *tracks])},
        error=reason,
    )


def guarded(fn: Callable[..., RewardBreakdown]) -> Callable[..., RewardBreakdown]:
    """Wrap a reward's ``__call__`` so an unexpected exception becomes a counted error
    (with its type and message) instead of killing a rollout worker. Bugs stay visible:
    the error is logged and counted by the trainer, never turned into a silent 0."""

    def wrapper(self: Any, trajectory: Trajectory, example: Example, db: Backend | None) -> RewardBreakdown:
        try:
            return fn(self, trajectory, example, db)
        except Exception as err:  # noqa: BLE001 - reported, counted, never silent
            return failure(
                f"{type(self).__name__} raised {type(err).__name__}: {err}"[:500],
                getattr(self, "component_names", ()),
                getattr(self, "track_names", ()),
            )

    wrapper.__doc__ = fn.__doc__
    wrapper.__name__ = fn.__name__
    return wrapper


# --------------------------------------------------------------------------- length


def dapo_overlong_penalty(length: int, max_length: int, buffer: int) -> float:
    """DAPO's soft overlong penalty in [-1, 0], shared by every design.

    0 while ``length <= max_length - buffer``; then linear down to -1 at ``max_length``;
    -1 beyond. ``length`` counts policy tokens only (``Trajectory.num_policy_tokens``).

    >>> [dapo_overlong_penalty(n, 8000, 2000) for n in (5000, 6000, 7000, 8000, 9000)]
    [0.0, 0.0, -0.5, -1.0, -1.0]
    """
    if buffer <= 0 or max_length <= buffer:
        raise ConfigError(
            f"overlong penalty with max_length={max_length}, buffer={buffer}; "
            "use 0 < buffer < max_length (e.g. 8000 and 2000)"
        )
    start = max_length - buffer
    if length <= start:
        return 0.0
    if length >= max_length:
        return -1.0
    return -(length - start) / buffer


# --------------------------------------------------------------------------- schema sets


def gold_references(example: Example, db: Backend | None) -> tuple[frozenset[str], frozenset[str]]:
    """Gold tables and ``table.column``s: the example's, or read from its gold SQL.

    Loaders fill ``Example.gold_tables`` / ``gold_columns``; an example without them
    (e.g. built by hand) gets them from ``rex.sql.referenced_schema`` on the database
    schema (``rex.linking.gold_sets``).
    """
    if example.gold_tables or example.gold_columns:
        return gold_sets(example.gold_tables, example.gold_columns, example.gold_sql)
    return gold_sets((), (), example.gold_sql, _db_schema(db))


_SCHEMA_WARNED: set[str] = set()


def _db_schema(db: Backend | None) -> dict[str, list[str]] | None:
    """The database schema, or None when it cannot be read. A schema only helps expand
    ``*`` in the gold SQL, so the reward goes on without it, but says why (once per
    database and cause, not once per rollout)."""
    if db is None:
        return None
    try:
        return db.schema()
    except (DataError, OSError) as err:  # unreadable or vanished file; a failed schema query
        key = f"{db.path}: {err}"
        if key not in _SCHEMA_WARNED:
            _SCHEMA_WARNED.add(key)
            log.warning(
                "reward: cannot read the schema of %s (%s); gold columns behind `*` are not expanded", db.path, err
            )
        return None


def selection_sets(selection: SchemaSelection | None, db: Backend | None) -> tuple[frozenset[str], frozenset[str]]:
    """Predicted tables and ``table.column``s from a proposed / linked / annotated schema.

    Names are lower-cased and unquoted; ``t.*`` stands for every column of ``t`` and a
    bare ``*`` for every column of the selected tables (designs/retoolsql/README.md); an unqualified
    column goes to the one selected table that has it. Tables named only through their
    columns count as selected (``rex.linking.linked_sets``, which evaluation's linking
    metrics use too).
    """
    if selection is None:
        return frozenset(), frozenset()
    return linked_sets(selection.tables, selection.columns, _db_schema(db))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """|A∩B| / |A∪B| with J(∅, ∅) = 1 (e.g. ``SELECT COUNT(*)`` references no column).

    >>> jaccard(frozenset({"t.a", "t.b"}), frozenset({"t.a"}))
    0.5
    """
    union = a | b
    return len(a & b) / len(union) if union else 1.0


__all__ = [
    "METRICS",
    "METRIC_MAX_RESULT_BYTES",
    "METRIC_MAX_RESULT_ROWS",
    "REWARDS",
    "check_budget",
    "check_exec_metric",
    "dapo_overlong_penalty",
    "execution",
    "failure",
    "get_reward",
    "gold_references",
    "guarded",
    "jaccard",
    "list_rewards",
    "precision_recall_f1",
    "register_reward",
    "selection_sets",
    "shared_scorer",
]


# --------------------------------------------------------------------------- single-metric rewards


@dataclass(frozen=True)
class ExecReward:
    """The execution score alone. ``exec_metric`` must name the reward's own metric (it
    is accepted so that every reward takes the same knob)."""

    exec_metric: str = "ex"
    timeout_s: float = 30.0
    max_result_rows: int | None = METRIC_MAX_RESULT_ROWS
    max_result_bytes: int | None = METRIC_MAX_RESULT_BYTES

    metric = "ex"
    component_names = ("exec",)
    track_names = ()

    def __post_init__(self) -> None:
        check_exec_metric(self.exec_metric)
        if self.exec_metric != self.metric:
            raise ConfigError(
                f"reward {self.metric!r} scores with {self.metric}, but exec_metric={self.exec_metric!r}; "
                f"use reward={self.exec_metric} or exec_metric={self.metric}"
            )
        check_positive(f"{self.metric} timeout_s", self.timeout_s)
        check_budget(self.metric, self.max_result_rows, self.max_result_bytes)

    @guarded
    def __call__(self, trajectory: Trajectory, example: Example, db: Backend | None) -> RewardBreakdown:
        score, reason = execution(
            trajectory, example, db, self.metric, self.timeout_s, self.max_result_rows, self.max_result_bytes
        )
        if score is None:
            return failure(reason or "execution failed")
        value = score.score if trajectory.result.final_sql is not None else 0.0
        return RewardBreakdown(total=value, components={"exec": value}, tracks={"full": value}, flags=score.flags)


@register_reward("ex")
@dataclass(frozen=True)
class EXReward(ExecReward):
    """EX: 1 iff set(pred rows) == set(gold rows)."""

    exec_metric: str = "ex"
    metric = "ex"


@register_reward("rex")
@dataclass(frozen=True)
class REXReward(ExecReward):
    """REX score in [0, 1]."""

    exec_metric: str = "rex"
    metric = "rex"


@register_reward("qatch")
@dataclass(frozen=True)
class QATCHReward(ExecReward):
    """QATCH mean(CP, CR, TC)."""

    exec_metric: str = "qatch"
    metric = "qatch"
