"""``python -m eval.compare RUN_OR_SWEEP_DIR [...] [--out DIR] [--report]``: runs side by side.

A run directory is either an ``eval.run`` output (``summary.json`` with per-difficulty
numbers, ``records.jsonl`` per question) or a ``training.run`` directory
(``metrics.jsonl`` from ``training/runs/logger.py``: one JSON record per line with
``step``, ``kind`` - ``config`` (the effective config with its ``sweep`` and ``ablation``),
``train`` or ``eval_before`` / ``eval_val`` / ``eval_after`` - and the metrics named in
``training.runs.samples.METRICS``; ``heldout_after.jsonl`` per question). A sweep directory
(``training.run -m``) stands for every run in it. Writes ``compare.md`` and ``compare.csv``
(also printed; a schema-linking table beside them, ``compare_linking.csv``, when a run has
linking figures), ``ex_by_difficulty.png`` and ``training_curves.png`` with matplotlib's Agg
backend, and logs a wandb table and the images when wandb is online (offline: skipped with
a message; wandb never makes the comparison fail).

``--report`` adds the ablation report (eval/reports/ablation.py for the numbers): a wandb report
built with ``wandb-workspaces`` (eval/reports/wandb_report.py), saved to the project when logged in;
offline its specification is written as ``report_spec.json`` and the same panels as a
self-contained ``report.html`` (eval/reports/report_page.py) beside the Markdown and PNGs.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.types import difficulty_order
from eval.reports.linking_table import linking_scores, linking_table
from eval.reports.plots import pyplot
from tools.errors import ConfigError, DataError, ToolkitError

Say = Callable[[str], None]


@dataclass
class RunView:
    """What the comparison reads from one run directory."""

    name: str
    path: Path
    kind: str  # "eval" | "train"
    n: int | None = None
    ex: float | None = None
    ex_official: float | None = None
    ex_test_suite: float | None = None
    ex_before: float | None = None
    rex: float | None = None
    qatch: float | None = None
    sc_ex: float | None = None
    pass_at_k: dict[str, float] = field(default_factory=dict)
    by_difficulty: dict[str, float | None] = field(default_factory=dict)
    steps: list[int] = field(default_factory=list)
    curves: dict[str, list[float | None]] = field(default_factory=dict)
    sweep: str | None = None
    ablation: dict[str, Any] = field(default_factory=dict)
    scores: dict[str, dict[str, float | None]] = field(default_factory=dict)  # "all"|difficulty -> score -> value
    questions: list[dict[str, Any]] = field(default_factory=list)  # per question: id, difficulty, ex, rex, ...
    linking: dict[str, dict[str, Any]] = field(default_factory=dict)  # "all"|difficulty -> linking figures


CURVES = (("reward/total", "reward"), ("ex/batch", "EX (batch)"))


def expand_paths(paths: Sequence[str | Path]) -> list[Path]:
    """Run directories as given; a sweep directory (no run files, run directories inside)
    becomes its runs, in job-number order."""
    out: list[Path] = []
    for p in paths:
        folder = Path(p).expanduser()
        if folder.is_dir() and not _is_run(folder):
            runs = [c for c in folder.iterdir() if c.is_dir() and _is_run(c)]
            if runs:
                out.extend(
                    sorted(runs, key=lambda c: (not c.name.isdigit(), int(c.name) if c.name.isdigit() else 0, c.name))
                )
                continue
        out.append(folder)
    return out


def _is_run(folder: Path) -> bool:
    return (folder / "summary.json").is_file() or (folder / "metrics.jsonl").is_file()


def load_run(path: str | Path) -> RunView:
    """Read an eval or training run directory (a ``summary.json`` / ``metrics.jsonl`` path
    is taken as its folder)."""
    folder = Path(path).expanduser()
    if folder.is_file():
        folder = folder.parent
    if not folder.is_dir():
        raise DataError(f"{path}: no such run directory; pass eval.run output folders or training run_dir folders")
    summary = folder / "summary.json"
    if summary.is_file():
        data = _read_json(summary)
        if "by_difficulty" in data:
            return _eval_view(folder, data)
    metrics = folder / "metrics.jsonl"
    if metrics.is_file():
        return _train_view(folder, metrics)
    raise DataError(
        f"{folder} holds neither an eval.run summary.json nor a training metrics.jsonl; "
        "pass the folder eval.run wrote (eval.out_dir) or a training run_dir"
    )


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise DataError(f"{path}: cannot read it as JSON ({err})") from err
    if not isinstance(data, dict):
        raise DataError(f"{path}: expected a JSON object")
    return data


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The records of a JSONL file; a line cut by a killed run is skipped."""
    out: list[dict[str, Any]] = []
    if not path.is_file():
        return out
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict):
                out.append(record)
    return out


def _scores(summary: Mapping[str, Any]) -> dict[str, dict[str, float | None]]:
    """The four held-out scores of a summary (eval.summary.summarize), overall and per difficulty."""

    def block(b: Mapping[str, Any]) -> dict[str, float | None]:
        return {
            "ex": _number(b.get("ex")),
            "ex_official": _number(b.get("ex_official")),
            "ex_test_suite": _number(b.get("ex_test_suite")),
            "rex": _number(b.get("rex")),
            "qatch": _number((b.get("qatch") or {}).get("mean")),
        }

    out = {"all": block(summary)}
    out.update({d: block(b) for d, b in (summary.get("by_difficulty") or {}).items()})
    return out


def _questions(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per-question scores from eval records (scorable questions; ex_official counts every one)."""
    out = []
    for r in records:
        scorable = not r.get("gold_failed")
        out.append(
            {
                "id": str(r["id"]),
                "difficulty": r.get("difficulty", "unknown"),
                "ex": float(r["ex"]) if scorable else None,
                "ex_official": float(r.get("ex_official", r["ex"])),
                "ex_test_suite": float(r["ex_test_suite"]) if scorable and "ex_test_suite" in r else None,
                "rex": float(r["rex"]) if scorable else None,
                "qatch": float((r.get("qatch") or {}).get("mean", 0.0)) if scorable else None,
            }
        )
    return out


def _eval_view(folder: Path, s: dict[str, Any]) -> RunView:
    from eval.run_store import RECORDS

    return RunView(
        name=folder.name,
        path=folder,
        kind="eval",
        n=s.get("n"),
        ex=s.get("ex"),
        ex_official=s.get("ex_official"),
        ex_test_suite=s.get("ex_test_suite"),
        rex=s.get("rex"),
        qatch=(s.get("qatch") or {}).get("mean"),
        sc_ex=(s.get("sc") or {}).get("ex"),
        pass_at_k=dict(s.get("pass_at_k") or {}),
        by_difficulty={d: b["ex"] for d, b in s["by_difficulty"].items()},
        scores=_scores(s),
        questions=_questions(read_jsonl(folder / RECORDS)),
        linking=linking_scores(s),
    )


def _train_view(folder: Path, metrics: Path) -> RunView:
    from eval.summary import summarize
    from training.runs.samples import CURVES as TRAIN_CURVES

    view = RunView(name=folder.name, path=folder, kind="train")
    evals: dict[str, dict[str, Any]] = {}
    train: list[dict[str, Any]] = []
    for record in read_jsonl(metrics):
        kind = record.get("kind", "train")
        if kind == "train":
            train.append(record)
        elif kind == "config":
            view.sweep, view.ablation = record.get("sweep"), dict(record.get("ablation") or {})
        elif kind.startswith("eval_"):
            evals[kind] = record
    train.sort(key=lambda r: r.get("step", 0))
    view.steps = [int(r.get("step", i)) for i, r in enumerate(train)]
    keys = [k for k, _ in TRAIN_CURVES] + sorted({k for r in train for k in r if k.startswith("reward/")})
    for key in dict.fromkeys(keys):
        values = [_number(r.get(key)) for r in train]
        if any(v is not None for v in values):
            view.curves[key] = values
    before, after = evals.get("eval_before"), evals.get("eval_after")
    view.ex_before = _number(before.get("ex")) if before else None
    view.ex = _number(after.get("ex")) if after else None
    view.n = (after or before or {}).get("n")
    heldout = read_jsonl(folder / "heldout_after.jsonl")
    if heldout:
        summary = summarize(heldout, {})
        view.scores = _scores(summary)
        view.ex_official, view.rex = view.scores["all"]["ex_official"], view.scores["all"]["rex"]
        view.ex_test_suite = view.scores["all"]["ex_test_suite"]
        view.qatch = view.scores["all"]["qatch"]
        view.by_difficulty = {d: b["ex"] for d, b in view.scores.items() if d != "all"}
        view.questions = _questions(heldout)
        view.linking = linking_scores(summary)
    return view


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return None if math.isnan(value) else float(value)


def _unique_names(views: list[RunView]) -> None:
    """Two runs with the same folder name get their parent's name in front."""
    seen: dict[str, int] = {}
    for v in views:
        seen[v.name] = seen.get(v.name, 0) + 1
    for v in views:
        if seen[v.name] > 1:
            v.name = f"{v.path.parent.name}/{v.name}"


# ----------------------------------------------------------------------------- table


def table(views: Sequence[RunView]) -> tuple[list[str], list[list[Any]]]:
    """Header and rows: one row per run, EX per difficulty in BIRD order."""
    labels = difficulty_order([d for v in views for d in v.by_difficulty])
    ks = sorted({k for v in views for k in v.pass_at_k}, key=int)
    swept = any(v.ablation for v in views)
    header = [
        "run",
        "kind",
        "n",
        "EX",
        "EX official",
        "EX suite",
        "EX before",
        "REX",
        "QATCH",
        "SC EX",
        *[f"EX {d}" for d in labels],
        *[f"pass@{k}" for k in ks],
        *(["ablation"] if swept else []),
    ]
    rows = []
    for v in views:
        rows.append(
            [
                v.name,
                v.kind,
                v.n,
                v.ex,
                v.ex_official,
                v.ex_test_suite,
                v.ex_before,
                v.rex,
                v.qatch,
                v.sc_ex,
                *[v.by_difficulty.get(d) for d in labels],
                *[v.pass_at_k.get(k) for k in ks],
                *([", ".join(f"{k}={x}" for k, x in v.ablation.items())] if swept else []),
            ]
        )
    return header, rows


def _cell(value: Any) -> str:
    from eval.units import pct

    if value is None:
        return "-"
    if isinstance(value, float):
        return pct(value)
    return str(value)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Scores as percentages (with a % sign); '-' where a run has no such number."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def csv_text(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Raw fractions (not percentages); empty where a run has no such number."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    writer.writerows([["" if c is None else c for c in row] for row in rows])
    return buf.getvalue()


# ----------------------------------------------------------------------------- plots


def plot_ex_by_difficulty(views: Sequence[RunView], path: Path) -> Path | None:
    """Grouped bars: difficulties on the x axis, one bar per run (eval runs only)."""
    runs = [v for v in views if v.by_difficulty]
    if not runs:
        return None
    plt = pyplot()
    labels = [*difficulty_order([d for v in runs for d in v.by_difficulty]), "all"]
    width = 0.8 / len(runs)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(labels) + 0.4 * len(runs)), 4.0))
    for i, v in enumerate(runs):
        values = [100 * (v.by_difficulty.get(d) or 0.0) for d in labels[:-1]] + [100 * (v.ex or 0.0)]
        xs = [j + (i - (len(runs) - 1) / 2) * width for j in range(len(labels))]
        ax.bar(xs, values, width=width, label=v.name)
    ax.set_xticks(range(len(labels)), labels)
    ax.set_ylabel("EX (%)")
    ax.set_ylim(0, 100)
    ax.set_title("Execution accuracy by difficulty")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_training_curves(views: Sequence[RunView], path: Path) -> Path | None:
    """Reward and batch EX over steps for every training run, before/after EX as markers."""
    runs = [v for v in views if v.kind == "train" and v.steps]
    if not runs:
        return None
    plt = pyplot()
    fig, axes = plt.subplots(1, len(CURVES), figsize=(5.0 * len(CURVES), 3.6))
    for ax, (key, label) in zip(axes, CURVES, strict=True):
        for v in runs:
            # zip(strict=False): a run may lack this curve (then no points)
            points = [(s, y) for s, y in zip(v.steps, v.curves.get(key, []), strict=False) if y is not None]
            if points:
                line = ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=v.name)[0]
                if key == "ex/batch":
                    for value, step, mark in ((v.ex_before, 0, "s"), (v.ex, v.steps[-1], "^")):
                        if value is not None:
                            ax.plot([step], [value], marker=mark, color=line.get_color(), linestyle="none")
        ax.set_xlabel("step")
        ax.set_ylabel(label)
        ax.set_title(
            label + (" (squares: held-out EX before, triangles: after)" if key == "ex/batch" else ""), fontsize="small"
        )
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


# ----------------------------------------------------------------------------- wandb


def log_wandb(
    header: Sequence[str], rows: Sequence[Sequence[Any]], images: Sequence[Path], project: str, say: Say
) -> bool:
    """Log the table and plots as a wandb run when wandb is online; True when logged."""
    from training.runs.logger import wandb_mode

    mode = wandb_mode()
    if mode != "online":
        say(f"[compare] wandb is {mode}: no wandb report (log in with `wandb login` to get one)")
        return False
    try:
        import wandb

        run = wandb.init(project=project, job_type="compare", reinit="finish_previous")
        payload: dict[str, Any] = {"comparison": wandb.Table(columns=list(header), data=[list(r) for r in rows])}
        payload.update({p.stem: wandb.Image(str(p)) for p in images})
        run.log(payload)
        say(f"[compare] wandb run {run.url}")
        run.finish()
        return True
    except Exception as err:  # noqa: BLE001 - the report is optional; the files are written
        say(f"[compare] wandb report skipped ({type(err).__name__}: {err})")
        return False


# ----------------------------------------------------------------------------- entry point


def compare(
    paths: Sequence[str | Path],
    out_dir: str | Path,
    project: str = "sqlagent-rl",
    use_wandb: bool = True,
    say: Say = print,
    report: bool = False,
    baseline: str | None = None,
    entity: str | None = None,
) -> dict[str, Any]:
    """Load the runs, write table + CSV + plots into ``out_dir``, print the table; with
    ``report`` also the ablation report (saved to wandb when logged in, else JSON + HTML)."""
    if not paths:
        raise ConfigError("no run directories given; usage: python -m eval.compare RUN_DIR [RUN_DIR ...] [--out DIR]")
    views = [load_run(p) for p in expand_paths(paths)]
    _unique_names(views)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    header, rows = table(views)
    md = markdown_table(header, rows)
    linking = linking_table(views)  # schema linking per run and difficulty (eval/reports/linking_table.py)
    if linking is not None:
        md += "\n## Schema linking\n\n" + markdown_table(*linking)
        (out / "compare_linking.csv").write_text(csv_text(*linking), encoding="utf-8")
    (out / "compare.md").write_text("# Runs compared\n\n" + md, encoding="utf-8")
    (out / "compare.csv").write_text(csv_text(header, rows), encoding="utf-8")
    images = [
        p
        for p in (
            plot_ex_by_difficulty(views, out / "ex_by_difficulty.png"),
            plot_training_curves(views, out / "training_curves.png"),
        )
        if p is not None
    ]
    say(md)
    say(f"[compare] wrote {out / 'compare.md'}, {out / 'compare.csv'}" + "".join(f", {p}" for p in images))
    logged = log_wandb(header, rows, images, project, say) if use_wandb else False
    result: dict[str, Any] = {"header": header, "rows": rows, "images": [str(p) for p in images], "wandb": logged}
    result["linking"] = {"header": linking[0], "rows": linking[1]} if linking is not None else None
    if report:
        from eval.reports.wandb_report import write_report

        result["report"] = write_report(
            views, out, project=project, entity=entity, baseline=baseline, use_wandb=use_wandb, say=say
        )
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eval.compare", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "runs", nargs="+", metavar="RUN_OR_SWEEP_DIR", help="eval.run output, training run or sweep directories"
    )
    parser.add_argument("--out", default="runs/compare", help="where the table and plots go (default runs/compare)")
    parser.add_argument("--project", default="sqlagent-rl", help="wandb project of the report")
    parser.add_argument("--entity", default=None, help="wandb entity of the report (default: yours when logged in)")
    parser.add_argument("--no-wandb", action="store_true", help="never log to wandb")
    parser.add_argument(
        "--report",
        action="store_true",
        help="the ablation report: wandb when logged in, else report_spec.json + report.html",
    )
    parser.add_argument(
        "--baseline",
        default=None,
        help="the arm deltas are taken against, e.g. advantage=grpo (default: the first arm)",
    )
    args = parser.parse_args(argv)
    try:
        compare(
            args.runs,
            args.out,
            args.project,
            not args.no_wandb,
            report=args.report,
            baseline=args.baseline,
            entity=args.entity,
        )
    except ToolkitError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
