"""The ablation report as a wandb report (``wandb-workspaces``), and its offline twin.

``build_report`` turns a ``Study`` (eval/reports/ablation.py) into a ``wandb_workspaces`` Report:

1. training curves (``training.runs.samples.CURVES`` plus every ``reward/<component>``), one
   line plot each, over one runset per sweep (filtered on the run's ``sweep`` config =
   its wandb group), grouped by the swept keys except the seeds (``config.ablation.<key>``),
   seeds aggregated as mean with a standard-deviation band;
2. final held-out EX / official EX / REX / QATCH, overall and per difficulty, as bar plots
   of the ``eval_after/...`` metrics with the same grouping;
3. the differences against the baseline arm with bootstrap confidence intervals and the
   "within noise" statements, as Markdown;
4. sample trajectories: the ``samples`` table the local engine logs, plus a Markdown table
   of a few of them.

The runsets name no entity or project: they read the report's own project, so the
specification can be built without a wandb login. ``write_report`` saves the report when
the user is logged in (``training.runs.logger.wandb_mode() == "online"``) and prints its
URL; otherwise (and always) it writes the specification as ``report_spec.json`` and the
same panels as ``report.html`` (eval/reports/report_page.py).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from eval.reports.ablation import SCORES, Study, curve_keys, study
from eval.units import pct

Say = Callable[[str], None]
SPEC = "report_spec.json"


def _wr() -> Any:
    try:
        import wandb_workspaces.reports.v2 as wr
    except ImportError as err:  # a declared dependency: only a broken install lands here
        from tools.errors import ConfigError

        raise ConfigError(f"--report needs wandb-workspaces ({err}); pip install -e . installs it") from err
    return wr


def score_metrics(s: Study) -> list[tuple[str, str]]:
    """(wandb metric, title) of each held-out score, overall then per difficulty."""
    out = []
    for key, name in SCORES:
        out.append((f"eval_after/{key}", f"{name} (all)"))
        out += [(f"eval_after/{key}/{d}", f"{name} ({d})") for d in s.difficulties]
    return out


def runsets(s: Study) -> list[Any]:
    """One runset per sweep (all runs of this project when the runs belong to none)."""
    wr = _wr()
    groupby = [f"config.ablation.{k}" for k in s.grouping]
    if not s.sweeps:
        return [wr.Runset(entity="", project="", name="runs", groupby=groupby)]
    return [
        wr.Runset(entity="", project="", name=name, filters=f"Config('sweep') = '{name}'", groupby=groupby)
        for name in s.sweeps
    ]


def delta_markdown(s: Study) -> str:
    """The table of differences against the baseline and one statement per difference."""
    lines = [
        f"Baseline: **{s.baseline.label}** ({s.baseline.seeds} seed(s)). Differences are arm minus baseline; "
        "95% bootstrap intervals over questions (each question averaged over seeds first).",
        "",
        "| arm | score | questions | difference | 95% CI | |",
        "|---|---|---|---|---|---|",
    ]
    for d in s.deltas:
        name = dict(SCORES)[d.score]
        lines.append(
            f"| {d.arm} | {name} ({d.slice}) | {d.questions} | {pct(d.value)} | {pct(d.low)} to {pct(d.high)} "
            f"| {'within noise' if d.within_noise else 'outside noise'} |"
        )
    if not s.deltas:
        lines.append("| - | - | - | - | - | only one arm, or no held-out records |")
    return "\n".join(lines)


def samples_markdown(s: Study) -> str:
    lines = ["| arm | step | question | final SQL | reward | outcome |", "|---|---|---|---|---|---|"]
    for r in s.samples:
        sql = (r.get("final_sql") or "").replace("|", "\\|").replace("\n", " ")
        lines.append(
            f"| {r['arm']} | {r['step']} | {str(r.get('question', '')).replace('|', ' ')} | `{sql}` | "
            f"{r.get('reward', 0.0):.3f} | {r.get('outcome') or '-'} |"
        )
    return "\n".join(lines) + "\n\nEvery trajectory, token by token: `python -m eval.view RUN_DIR`."


def build_report(s: Study, project: str, entity: str | None = None, title: str | None = None) -> Any:
    """The wandb report object (nothing is sent anywhere)."""
    wr = _wr()
    grouped = dict(groupby_aggfunc="mean", groupby_rangefunc="stddev")
    curves = [wr.LinePlot(title=key, x="Step", y=[key], **grouped) for key in curve_keys(s)]
    bars = [wr.BarPlot(title=name, metrics=[metric], orientation="v", **grouped) for metric, name in score_metrics(s)]
    samples = [wr.WeavePanelSummaryTable(table_name="samples")]
    arms = ", ".join(f"{a.label} ({a.seeds} seed(s))" for a in s.arms)
    kwargs = {"entity": entity} if entity is not None else {}
    return wr.Report(
        project=project,
        title=(title or f"Ablation: {', '.join(s.grouping) or 'runs'}")[:128],
        description=f"Sweep(s) {', '.join(s.sweeps) or '-'}; swept {', '.join(s.swept) or '-'}; arms: {arms}.",
        blocks=[
            wr.H2("Training curves (mean over seeds, band: standard deviation)"),
            wr.PanelGrid(runsets=runsets(s), panels=curves),
            wr.H2("Held-out scores after training, per difficulty"),
            wr.PanelGrid(runsets=runsets(s), panels=bars),
            wr.H2("Differences against the baseline"),
            wr.MarkdownBlock(text=delta_markdown(s)),
            wr.H2("Sample trajectories"),
            wr.PanelGrid(runsets=runsets(s), panels=samples),
            wr.MarkdownBlock(text=samples_markdown(s)),
        ],
        **kwargs,
    )


def report_spec(report: Any) -> dict[str, Any]:
    """The specification wandb stores for the report (its view spec)."""
    model = report._to_model()  # the library's own conversion, as Report.save uses it
    return {
        "title": report.title,
        "project": report.project,
        "entity": report.entity,
        "description": report.description,
        "spec": json.loads(model.spec.model_dump_json(by_alias=True, exclude_none=True)),
    }


def write_report(
    views: Sequence[Any],
    out: Path,
    project: str,
    entity: str | None = None,
    baseline: str | None = None,
    use_wandb: bool = True,
    say: Say = print,
) -> dict[str, Any]:
    """Build the report; save it when logged in; always write the spec and the HTML twin."""
    from eval.reports.report_page import write_html
    from training.runs.logger import wandb_mode

    s = study(views, baseline)
    online = use_wandb and wandb_mode() == "online"
    report = build_report(s, project, entity if entity is not None or online else os.environ.get("WANDB_ENTITY", ""))
    spec_path = out / SPEC
    spec_path.write_text(json.dumps(report_spec(report), indent=1), encoding="utf-8")
    html = write_html(s, out)
    for d in s.deltas:
        if d.slice == "all":
            say(f"[report] {d.statement()}")
    url = None
    if online:
        try:
            report.save()
            url = report.url
            say(f"[report] wandb report {url}")
        except Exception as err:  # noqa: BLE001 - the offline files are written; say why wandb failed
            say(f"[report] wandb report not saved ({type(err).__name__}: {err})")
    else:
        say("[report] not logged in to wandb: report not saved (wandb login to save it)")
    say(f"[report] wrote {spec_path} and {html}")
    return {"study": s, "report": report, "spec": str(spec_path), "html": str(html), "url": url}
