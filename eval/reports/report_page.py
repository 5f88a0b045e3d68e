"""The ablation report as one self-contained HTML page (the offline twin of the wandb report).

Same panels as eval/reports/wandb_report.py: seed-aggregated training curves, held-out scores per
difficulty, the differences against the baseline with their confidence intervals and
"within noise" statements, and sample trajectories. The plots are also written as PNG
files next to the page (``report_curves.png``, ``report_scores.png``) and embedded in it
as data URIs, so the page opens anywhere without its folder.
"""

from __future__ import annotations

import base64
import html
import math
from pathlib import Path
from typing import Any

from eval.reports.ablation import SCORES, Study, curve_keys
from eval.reports.plots import pyplot
from eval.units import pct

PAGE = "report.html"
CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:14px}th,td{border:1px solid #ccc;padding:4px 8px;text-align:left}
th{background:#f3f3f3}img{max-width:100%;border:1px solid #eee}.noise{color:#777}.signal{font-weight:600}
code{font-size:12px}"""


def plot_curves(s: Study, keys: list[str], path: Path) -> Path | None:
    """One subplot per curve: each arm's mean over seeds with a +-1 std band."""
    if not keys:
        return None
    plt = pyplot()
    cols = min(3, len(keys))
    rows = math.ceil(len(keys) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.2 * rows), squeeze=False)
    # zip(strict=False): the grid may have more cells than keys
    for ax, key in zip(axes.flat, keys, strict=False):
        for arm in s.arms:
            points = arm.curves.get(key, {})
            if not points:
                continue
            steps = sorted(points)
            mean = [points[x][0] for x in steps]
            std = [points[x][1] for x in steps]
            line = ax.plot(steps, mean, marker="o", label=f"{arm.label} (n={arm.seeds})")[0]
            ax.fill_between(
                steps,
                [m - d for m, d in zip(mean, std, strict=True)],
                [m + d for m, d in zip(mean, std, strict=True)],
                color=line.get_color(),
                alpha=0.2,
            )
        ax.set_title(key, fontsize="small")
        ax.set_xlabel("step")
    for ax in list(axes.flat)[len(keys) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize="x-small")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def plot_scores(s: Study, path: Path) -> Path | None:
    """Bars per slice (all, then difficulties) for each score: arm means with seed std."""
    slices = ["all", *s.difficulties]
    if not any(arm.scores for arm in s.arms):
        return None
    plt = pyplot()
    fig, axes = plt.subplots(1, len(SCORES), figsize=(4.2 * len(SCORES), 3.4), squeeze=False)
    width = 0.8 / max(1, len(s.arms))
    for ax, (key, name) in zip(axes.flat, SCORES, strict=True):
        for i, arm in enumerate(s.arms):
            means = [100 * arm.scores.get(sl, {}).get(key, (0.0, 0.0))[0] for sl in slices]
            errs = [100 * arm.scores.get(sl, {}).get(key, (0.0, 0.0))[1] for sl in slices]
            xs = [j + (i - (len(s.arms) - 1) / 2) * width for j in range(len(slices))]
            ax.bar(xs, means, width=width, yerr=errs, label=arm.label)
        ax.set_xticks(range(len(slices)), slices)
        ax.set_ylim(0, 100)
        ax.set_title(f"{name} (%)", fontsize="small")
    axes.flat[0].legend(fontsize="x-small")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def _img(path: Path | None, alt: str) -> str:
    if path is None:
        return f"<p>No {html.escape(alt)} to plot.</p>"
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def _table(header: list[str], rows: list[list[Any]], cls: str = "") -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def scores_table(s: Study) -> str:
    """One row per score and slice, one column per arm: mean +- std over its seeds."""
    slices = ["all", *s.difficulties]
    rows = []
    for key, name in SCORES:
        for sl in slices:
            cells = []
            for arm in s.arms:
                value = arm.scores.get(sl, {}).get(key)
                cells.append("-" if value is None else f"{pct(value[0])} &plusmn; {pct(value[1])}")
            rows.append([f"{name} ({html.escape(sl)})", *cells])
    header = ["score", *[f"{a.label} ({a.seeds} seed(s))" for a in s.arms]]
    return _table(header, rows, "scores")


def deltas_table(s: Study) -> str:
    rows = [
        [
            html.escape(d.arm),
            f"{dict(SCORES)[d.score]} ({html.escape(d.slice)})",
            d.questions,
            pct(d.value),
            f"{pct(d.low)} to {pct(d.high)}",
            f'<span class="{"noise" if d.within_noise else "signal"}">'
            f"{'within noise' if d.within_noise else 'outside noise'}</span>",
        ]
        for d in s.deltas
    ]
    return _table(["arm", "score", "questions", "difference", "95% CI", "verdict"], rows, "deltas")


def samples_table(s: Study) -> str:
    rows = [
        [
            html.escape(r["arm"]),
            r["step"],
            html.escape(str(r.get("question") or "")),
            f"<code>{html.escape(r.get('gold_sql') or '')}</code>",
            f"<code>{html.escape(r.get('final_sql') or '-')}</code>",
            f"{r.get('reward') or 0.0:.3f}",
            html.escape(r.get("outcome") or "-"),
        ]
        for r in s.samples
    ]
    return _table(["arm", "step", "question", "gold SQL", "final SQL", "reward", "outcome"], rows, "samples")


def write_html(s: Study, out: Path) -> Path:
    """Write the PNGs and the page; return the page's path."""
    curves = plot_curves(s, curve_keys(s), out / "report_curves.png")
    scores = plot_scores(s, out / "report_scores.png")
    statements = "".join(f"<li>{html.escape(d.statement())}</li>" for d in s.deltas if d.slice == "all")
    arms = ", ".join(f"{html.escape(a.label)} ({a.seeds} seed(s))" for a in s.arms)
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>Ablation report</title>
<style>{CSS}</style></head><body>
<h1>Ablation: {html.escape(", ".join(s.grouping) or "runs")}</h1>
<p>Sweep(s): {html.escape(", ".join(s.sweeps) or "-")}. Swept: {html.escape(", ".join(s.swept) or "-")}.
Arms: {arms}. Baseline: <b>{html.escape(s.baseline.label)}</b>.</p>
<h2>Training curves (mean over seeds, band: standard deviation)</h2>{_img(curves, "training curves")}
<h2>Held-out scores after training, per difficulty (mean &plusmn; std over seeds)</h2>
{_img(scores, "held-out scores")}{scores_table(s)}
<h2>Differences against the baseline</h2>
<p>Arm minus baseline; 95% bootstrap intervals over questions (each question's score averaged over the
arm's seeds first). An interval that contains 0 is within noise.</p>
{deltas_table(s)}<ul class="statements">{statements}</ul>
<h2>Sample trajectories</h2>{samples_table(s)}
<p>Every trajectory, token by token: <code>python -m eval.view RUN_DIR</code>.</p>
</body></html>
"""
    path = out / PAGE
    path.write_text(page, encoding="utf-8")
    return path
