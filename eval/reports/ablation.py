"""The numbers of an ablation study: arms, seed-aggregated curves, deltas with confidence.

An *arm* is the set of runs that share every ablation value except the seed keys
(``ablation.seed_keys``, default ``seed``); its runs are its seeds. For every arm:

- curves: per step, the mean and standard deviation of each metric over its seeds;
- final held-out numbers (EX, official EX, REX, QATCH; overall and per difficulty), each
  the mean over seeds, with the spread over seeds;
- against the baseline arm: the difference of each number, with a bootstrap confidence
  interval over questions (paired by question id: each question's score is averaged over
  the arm's seeds first, then questions are resampled with replacement). A difference
  whose interval contains 0 is *within noise*, and the report says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

SEED_KEYS = ("seed",)
SCORES = (("ex", "EX"), ("ex_official", "EX official"), ("rex", "REX"), ("qatch", "QATCH"))
BOOTSTRAP = 2000
LEVEL = 0.95


@dataclass
class Arm:
    """Runs sharing their ablation values except the seed keys."""

    label: str
    values: dict[str, Any]
    runs: list[Any]  # eval.compare.RunView
    curves: dict[str, dict[int, tuple[float, float, int]]] = field(
        default_factory=dict
    )  # key -> step -> (mean, std, n)
    scores: dict[str, dict[str, tuple[float, float]]] = field(default_factory=dict)  # slice -> score -> (mean, std)
    per_question: dict[str, dict[str, float]] = field(default_factory=dict)  # score -> qid -> seed mean

    @property
    def seeds(self) -> int:
        return len(self.runs)


@dataclass(frozen=True)
class Delta:
    """Arm minus baseline for one score on one slice of the questions."""

    arm: str
    score: str
    slice: str
    value: float
    low: float
    high: float
    questions: int

    @property
    def within_noise(self) -> bool:
        return self.low <= 0.0 <= self.high

    def statement(self) -> str:
        from eval.units import pct

        span = f"{pct(self.value)} (95% CI {pct(self.low)} to {pct(self.high)}, {self.questions} questions)"
        name = dict(SCORES).get(self.score, self.score)
        if self.within_noise:
            return f"{self.arm}: {name} ({self.slice}) {span} - within noise"
        return f"{self.arm}: {name} ({self.slice}) {span} - {'better' if self.value > 0 else 'worse'} than the baseline"


def arm_label(values: Mapping[str, Any]) -> str:
    """``advantage=grpo, reward.exec_metric=rex`` (``baseline`` when nothing was swept)."""
    return ", ".join(f"{k}={v}" for k, v in values.items()) or "(no ablation)"


def make_arms(views: Sequence[Any], seed_keys: Sequence[str] = SEED_KEYS) -> list[Arm]:
    """Group runs into arms, in the order their first run appears."""
    arms: dict[str, Arm] = {}
    for v in views:
        values = {k: val for k, val in (v.ablation or {}).items() if k not in seed_keys}
        label = arm_label(values) if v.ablation else v.name
        arms.setdefault(label, Arm(label=label, values=values, runs=[])).runs.append(v)
    for arm in arms.values():
        arm.curves = seed_curves(arm.runs)
        arm.scores = seed_scores(arm.runs)
        arm.per_question = question_means(arm.runs)
    return list(arms.values())


def seed_curves(runs: Sequence[Any]) -> dict[str, dict[int, tuple[float, float, int]]]:
    """metric -> step -> (mean, std, seeds with a value) over the runs' training curves."""
    out: dict[str, dict[int, tuple[float, float, int]]] = {}
    for key in sorted({k for r in runs for k in r.curves}):
        points: dict[int, list[float]] = {}
        for r in runs:
            # zip(strict=False): a run may lack this curve (then no points)
            for step, y in zip(r.steps, r.curves.get(key, []), strict=False):
                if y is not None:
                    points.setdefault(step, []).append(y)
        out[key] = {s: (float(np.mean(ys)), float(np.std(ys)), len(ys)) for s, ys in sorted(points.items())}
    return out


def seed_scores(runs: Sequence[Any]) -> dict[str, dict[str, tuple[float, float]]]:
    """slice ("all" or a difficulty) -> score -> (mean, std) over the runs that have it."""
    slices: dict[str, dict[str, list[float]]] = {}
    for r in runs:
        for sl, block in r.scores.items():
            for score, value in block.items():
                if value is not None:
                    slices.setdefault(sl, {}).setdefault(score, []).append(value)
    return {sl: {s: (float(np.mean(v)), float(np.std(v))) for s, v in scores.items()} for sl, scores in slices.items()}


def question_means(runs: Sequence[Any]) -> dict[str, dict[str, float]]:
    """score -> question id -> mean over the runs that scored that question."""
    acc: dict[str, dict[str, list[float]]] = {}
    for r in runs:
        for q in r.questions:
            for score, _ in SCORES:
                if q.get(score) is not None:
                    acc.setdefault(score, {}).setdefault(q["id"], []).append(float(q[score]))
    return {s: {q: float(np.mean(v)) for q, v in per.items()} for s, per in acc.items()}


def bootstrap_ci(
    diffs: Sequence[float], resamples: int = BOOTSTRAP, level: float = LEVEL, seed: int = 0
) -> tuple[float, float]:
    """Percentile interval of the mean of ``diffs`` under resampling with replacement.

    >>> bootstrap_ci([0.0, 0.0, 0.0])
    (0.0, 0.0)
    """
    values = np.asarray(diffs, dtype=float)
    if values.size == 0:
        return (float("nan"), float("nan"))
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, values.size, size=(resamples, values.size))].mean(axis=1)
    tail = (1.0 - level) / 2
    return float(np.quantile(means, tail)), float(np.quantile(means, 1.0 - tail))


def deltas(arms: Sequence[Arm], baseline: Arm, difficulty: Mapping[str, str]) -> list[Delta]:
    """Every arm against the baseline, per score, overall and per difficulty (paired questions)."""
    out: list[Delta] = []
    for arm in arms:
        if arm is baseline:
            continue
        for score, _ in SCORES:
            mine, base = arm.per_question.get(score, {}), baseline.per_question.get(score, {})
            shared = sorted(set(mine) & set(base))
            slices = {"all": shared}
            for q in shared:
                slices.setdefault(difficulty.get(q, "unknown"), []).append(q)
            for sl, qs in slices.items():
                if not qs:
                    continue
                diffs = [mine[q] - base[q] for q in qs]
                low, high = bootstrap_ci(diffs)
                out.append(Delta(arm.label, score, sl, float(np.mean(diffs)), low, high, len(qs)))
    return out


def pick_baseline(arms: Sequence[Arm], wanted: str | None) -> Arm:
    """The arm named by ``--baseline`` (its label, or ``key=value`` pairs it holds), else the first."""
    from tools.errors import ConfigError

    if not arms:
        raise ConfigError("no runs to compare")
    if not wanted:
        return arms[0]
    pairs = [p.strip() for p in wanted.split(",") if p.strip()]
    for arm in arms:
        held = {f"{k}={v}" for k, v in arm.values.items()}
        if arm.label == wanted or (pairs and set(pairs) <= held):
            return arm
    raise ConfigError(f"--baseline {wanted!r} names no arm; arms: {'; '.join(a.label for a in arms)}")


@dataclass
class Study:
    """Everything a report shows, computed once from the runs."""

    arms: list[Arm]
    baseline: Arm
    deltas: list[Delta]
    swept: list[str]  # swept keys, seed keys included
    grouping: list[str]  # swept keys that make the arms (seed keys left out)
    sweeps: list[str]  # sweep names (wandb groups) of the runs
    difficulties: list[str]
    samples: list[dict[str, Any]]  # a few sampled trajectories per arm (samples.jsonl records)


def study(
    views: Sequence[Any], baseline: str | None = None, seed_keys: Sequence[str] = SEED_KEYS, samples_per_arm: int = 3
) -> Study:
    """Arms, baseline and deltas of a set of runs (see the module docstring)."""
    from agents.types import difficulty_order

    arms = make_arms(views, seed_keys)
    base = pick_baseline(arms, baseline)
    difficulty = {q["id"]: q["difficulty"] for v in views for q in v.questions}
    swept = list(dict.fromkeys(k for v in views for k in (v.ablation or {})))
    return Study(
        arms=arms,
        baseline=base,
        deltas=deltas(arms, base, difficulty),
        swept=swept,
        grouping=[k for k in swept if k not in seed_keys],
        sweeps=sorted({v.sweep for v in views if v.sweep}),
        difficulties=difficulty_order([d for v in views for d in v.scores if d != "all"]),
        samples=[s for arm in arms for s in arm_samples(arm, samples_per_arm)],
    )


def arm_samples(arm: Arm, count: int) -> list[dict[str, Any]]:
    """The last step's first ``count`` sampled trajectories of the arm's first run."""
    import json
    from pathlib import Path

    for run in arm.runs:
        path = Path(run.path) / "samples.jsonl"
        if not path.is_file():
            continue
        records = []
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        if records:
            last = max(r.get("step", 0) for r in records)
            chosen = [r for r in records if r.get("step", 0) == last][:count]
            return [
                {
                    "arm": arm.label,
                    "run": run.name,
                    "step": r.get("step"),
                    "question": r.get("question"),
                    "difficulty": r.get("difficulty"),
                    "gold_sql": r.get("gold_sql"),
                    "final_sql": r.get("final_sql"),
                    "reward": r.get("reward"),
                    "outcome": r.get("outcome"),
                }
                for r in chosen
            ]
    return []


def curve_keys(s: Study) -> list[str]:
    """Curves the runs logged, in ``training.runs.samples.CURVES`` order, then reward components."""
    from training.runs.samples import CURVES

    logged = {k for arm in s.arms for k in arm.curves}
    known = [k for k, _ in CURVES if k in logged]
    return known + sorted(k for k in logged if k.startswith("reward/") and k not in known)
