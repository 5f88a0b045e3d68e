"""The ``eval`` block of ``recipes/eval.yaml`` (``EvalSettings``), read from a composed
config, and where a run writes by default. Shared by every ``eval.run`` path."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.db.limits import METRIC_MAX_RESULT_BYTES, METRIC_MAX_RESULT_ROWS, check_result_budget
from tools.errors import ConfigError

Say = Callable[[str], None]

DEFAULT_SAMPLES = 16  # ReToolSQL's self-consistency draws N = 16
MODES = ("greedy", "sample", "sc", "passk")
"""greedy: one temperature-0 answer; sample: one sampled answer (Think2SQL's protocol);
sc: a vote over N samples (self-consistency / majority voting); passk: N samples, sample 0
reported, pass@k over all."""


@dataclass(frozen=True)
class EvalSettings:
    """The ``eval`` block of ``recipes/eval.yaml`` (null = the recipe's ``evaluation``)."""

    mode: str | None = None
    samples: int | None = None
    temperature: float | None = None
    limit: int | None = None
    out_dir: str | None = None
    fresh: bool = False
    batch_size: int = 8
    timeout_s: float = 30.0
    max_result_rows: int | None = METRIC_MAX_RESULT_ROWS  # result budget per query; past it: *_too_large
    max_result_bytes: int | None = METRIC_MAX_RESULT_BYTES
    ex_metric: str | None = None  # the reported EX rule: ex (BIRD) | spider; null = data.ex_metric
    test_suite: bool = True  # also report ex_test_suite: EX on each database and its neighbours (rex.test_suite)

    def __post_init__(self) -> None:
        if self.mode is not None and self.mode not in MODES:
            raise ConfigError(f"eval.mode={self.mode!r}; choose one of {', '.join(MODES)}")
        if self.samples is not None and (not isinstance(self.samples, int) or self.samples < 1):
            raise ConfigError(f"eval.samples={self.samples!r}: a positive integer or null")
        if self.mode in ("greedy", "sample") and self.samples not in (None, 1):  # (None: the recipe's)
            raise ConfigError(
                f"eval.samples={self.samples} with eval.mode={self.mode}: this mode gives one "
                "answer per question; use eval.mode=sc or eval.mode=passk to draw several"
            )
        if self.temperature is not None and self.temperature <= 0:
            raise ConfigError(f"eval.temperature={self.temperature}: sampling needs > 0 (greedy is eval.mode=greedy)")
        if self.limit is not None and (not isinstance(self.limit, int) or self.limit < 1):
            raise ConfigError(f"eval.limit={self.limit!r}: a positive integer or null")
        if not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ConfigError(f"eval.batch_size={self.batch_size!r}: a positive integer")
        if self.timeout_s <= 0:
            raise ConfigError(f"eval.timeout_s={self.timeout_s}: a positive number of seconds")
        check_result_budget("eval.", self.max_result_rows, self.max_result_bytes)
        if self.ex_metric not in (None, "ex", "spider", "spider_strict"):
            raise ConfigError(
                f"eval.ex_metric={self.ex_metric!r}; choose ex (BIRD's set rule) or spider "
                "(Spider's official execution match; spider_strict: on the SQL as written), or null for data.ex_metric"
            )

    @property
    def num_samples(self) -> int:
        if self.mode in (None, "greedy", "sample"):
            return 1
        return self.samples or DEFAULT_SAMPLES


def settings_from(raw: Mapping[str, Any]) -> EvalSettings:
    """The ``eval`` block of a composed config; an unknown key is named beside the known ones."""
    block = dict(raw.get("eval") or {})
    known = {f.name for f in dataclasses.fields(EvalSettings)}
    unknown = sorted(set(block) - known)
    if unknown:
        raise ConfigError(f"unknown eval option(s) {unknown}; known: {', '.join(sorted(known))}")
    return EvalSettings(**block)


def default_out_dir(name: str, data_kind: str, split: str, settings: EvalSettings) -> str:
    mode = settings.mode or "greedy"
    suffix = mode if mode in ("greedy", "sample") else f"{mode}{settings.num_samples}"
    return str(Path("runs") / "eval" / f"{name}-{data_kind}-{split}-{suffix}")
