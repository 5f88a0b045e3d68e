"""``eval.compare --report`` on a real sweep: the wandb report object, saving only when
logged in, bootstrap intervals, and the offline HTML twin in headless Chromium."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from eval.compare import RunView, compare
from eval.reports.ablation import bootstrap_ci, deltas, make_arms
from tests.helpers.browser import chromium, console_errors


def _report(sweep: Path, out: Path, monkeypatch: pytest.MonkeyPatch, online: bool) -> tuple[dict, list[Any]]:
    import wandb_workspaces.reports.v2 as wr

    saved: list[Any] = []

    def fake_save(self: Any, draft: bool = False, clone: bool = False) -> Any:
        saved.append(self)  # nothing leaves the machine; a saved report has an id
        object.__setattr__(self, "id", "r1")
        return self

    monkeypatch.setattr(wr.Report, "save", fake_save)
    monkeypatch.setattr(wr.Report, "url", property(lambda self: f"https://wandb.example/{self.project}/{self.id}"))
    if online:
        import wandb

        def unreachable(*args: Any, **kwargs: Any) -> Any:  # what wandb.init raises with no network, without its wait
            raise wandb.errors.CommError("api.wandb.ai is unreachable from the test machine")

        monkeypatch.delenv("WANDB_MODE", raising=False)
        monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
        monkeypatch.setattr(wandb, "init", unreachable)
    else:
        monkeypatch.setenv("WANDB_MODE", "offline")
    said: list[str] = []
    out_dict = compare(
        [sweep], out, project="p", use_wandb=True, say=said.append, report=True, entity="me" if online else None
    )
    return {**out_dict, "said": said}, saved


@pytest.mark.slow
def test_report_object_has_the_panels_groupings_and_runsets(
    tiny_sweep: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import wandb_workspaces.reports.v2 as wr

    out, saved = _report(tiny_sweep, tmp_path / "cmp", monkeypatch, online=False)
    assert saved == []  # offline: never saved
    report, study = out["report"]["report"], out["report"]["study"]
    sweep = "/".join(tiny_sweep.resolve().parts[-2:])
    assert [a.label for a in study.arms] == ["reward.exec_metric=ex", "reward.exec_metric=qatch"]
    assert [a.seeds for a in study.arms] == [2, 2] and study.baseline is study.arms[0]
    grids = [b for b in report.blocks if isinstance(b, wr.PanelGrid)]
    assert len(grids) == 3
    for grid in grids:
        (runset,) = grid.runsets
        assert runset.name == sweep and runset.filters == f"Config('sweep') = '{sweep}'"
        assert runset.groupby == ["config.ablation.reward.exec_metric"]  # seeds aggregated, not grouped
    curves, bars, samples = (g.panels for g in grids)
    assert all(
        isinstance(p, wr.LinePlot) and p.groupby_aggfunc == "mean" and p.groupby_rangefunc == "stddev" for p in curves
    )
    plotted = [p.y[0] for p in curves]
    for key in (
        "reward/total",
        "ex/batch",
        "kl/beta",
        "policy/entropy",
        "length/response",
        "episode/turns",
        "tools/calls_per_episode",
        "sampling/fill_rate",
        "reward/exec",
        "reward/format",
    ):
        assert key in plotted, key
    metrics = {p.metrics[0] for p in bars}
    assert all(isinstance(p, wr.BarPlot) and p.groupby_aggfunc == "mean" for p in bars)
    for score in ("ex", "ex_official", "rex", "qatch"):
        assert f"eval_after/{score}" in metrics
        assert {f"eval_after/{score}/{d}" for d in study.difficulties} <= metrics
    assert [type(p) for p in samples] == [wr.WeavePanelSummaryTable] and samples[0].table_name == "samples"
    markdown = [b.text for b in report.blocks if isinstance(b, wr.MarkdownBlock)]
    assert len(markdown) == 2 and "| reward.exec_metric=qatch | EX (all) |" in markdown[0]
    assert {(d.score, d.slice) for d in study.deltas} >= {(s, "all") for s in ("ex", "ex_official", "rex", "qatch")}
    spec = Path(out["report"]["spec"])
    assert spec.is_file() and '"runSets"' in spec.read_text()
    assert any("not saved" in line for line in out["said"])


@pytest.mark.slow
def test_report_is_saved_only_when_logged_in(tiny_sweep: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out, saved = _report(tiny_sweep, tmp_path / "cmp", monkeypatch, online=True)
    assert len(saved) == 1 and saved[0] is out["report"]["report"]
    assert out["report"]["url"] == "https://wandb.example/p/r1"
    assert any("wandb report https://wandb.example/p/r1" in line for line in out["said"])


def _view(name: str, ablation: dict, ex: list[float]) -> RunView:
    questions = [
        {
            "id": f"q{i}",
            "difficulty": "simple" if i % 2 else "moderate",
            "ex": v,
            "ex_official": v,
            "rex": v,
            "qatch": v,
        }
        for i, v in enumerate(ex)
    ]
    return RunView(name=name, path=Path(name), kind="train", ablation=ablation, questions=questions)


def test_bootstrap_deltas_say_when_a_difference_is_within_noise() -> None:
    n = 40
    base = [_view("a", {"arm": "base", "seed": s}, [float(i % 4 == 0) for i in range(n)]) for s in (0, 1)]
    same = [_view("b", {"arm": "same", "seed": s}, [float(i % 4 == 0) for i in range(n)]) for s in (0, 1)]
    much = [_view("c", {"arm": "much", "seed": s}, [1.0] * n) for s in (0, 1)]
    arms = make_arms([*base, *same, *much])
    assert [a.label for a in arms] == ["arm=base", "arm=same", "arm=much"]
    found = {(d.arm, d.score, d.slice): d for d in deltas(arms, arms[0], {f"q{i}": "simple" for i in range(n)})}
    flat = found[("arm=same", "ex", "all")]
    assert flat.value == 0.0 and flat.within_noise and "within noise" in flat.statement()
    up = found[("arm=much", "ex", "all")]
    assert up.value == pytest.approx(0.75) and not up.within_noise and up.low > 0.5
    assert "better than the baseline" in up.statement() and "75.0%" in up.statement()
    low, high = bootstrap_ci([0.0, 1.0] * 50)
    assert 0.35 < low < 0.5 < high < 0.65  # the mean's interval at n=100 is about +-0.1


@pytest.mark.slow
def test_offline_html_report_opens_in_chromium_with_every_image_and_table(
    tiny_sweep: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out, _ = _report(tiny_sweep, tmp_path / "cmp", monkeypatch, online=False)
    page = Path(out["report"]["html"])
    assert page.name == "report.html" and (page.parent / "compare.md").is_file()
    assert (page.parent / "report_curves.png").is_file() and (page.parent / "report_scores.png").is_file()
    with chromium() as driver:
        driver.get(page.resolve().as_uri())
        images = driver.execute_script(
            "return [...document.images].map(i => [i.alt, i.complete && i.naturalWidth > 0])"
        )
        assert sorted(images) == [["held-out scores", True], ["training curves", True]]
        tables = driver.execute_script(
            "return Object.fromEntries([...document.querySelectorAll('table')].map("
            "t => [t.className, t.tBodies[0].rows.length]))"
        )
        study = out["report"]["study"]
        assert tables == {
            "scores": 4 * (1 + len(study.difficulties)),
            "deltas": len(study.deltas),
            "samples": len(study.samples),
        }
        assert tables["deltas"] > 0 and tables["samples"] > 0
        assert "within noise" in driver.find_element("css selector", "ul.statements").text
        assert console_errors(driver) == []


@pytest.mark.slow
def test_entry_point_writes_the_report_files_and_checks_the_baseline(tiny_sweep: Path, tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[3]
    env = dict(os.environ, PYTHONPATH=str(repo), WANDB_MODE="offline")
    cmd = [sys.executable, "-m", "eval.compare", str(tiny_sweep), "--report", "--out", "cmp"]
    proc = subprocess.run(
        [*cmd, "--baseline", "reward.exec_metric=qatch"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert {
        "compare.md",
        "compare.csv",
        "report.html",
        "report_spec.json",
        "report_curves.png",
        "report_scores.png",
    } <= {p.name for p in (tmp_path / "cmp").iterdir()}
    assert "reward.exec_metric=ex: EX (all)" in proc.stdout and "not saved" in proc.stdout
    proc = subprocess.run(
        [*cmd, "--baseline", "advantage=nope"], cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env
    )
    assert proc.returncode == 2 and "names no arm" in proc.stderr and "reward.exec_metric=ex" in proc.stderr
