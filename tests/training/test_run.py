"""``python -m training.run ... dry_run=true`` in a subprocess from a temporary directory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers.commands import run_module
from tests.helpers.designs import project_designs


def run(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
    return run_module("training.run", *overrides, cwd=tmp_path)


def effective(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = proc.stdout
    return yaml.safe_load(text[text.index("# effective configuration") :])


@pytest.mark.slow
@pytest.mark.parametrize("recipe", project_designs())
def test_dry_run_prints_each_recipe(tmp_path: Path, recipe: str) -> None:
    proc = run(tmp_path, f"recipe={recipe}", "dry_run=true", "engine=local", "engine.device=cpu")
    cfg = effective(proc)
    assert cfg["recipe_name"] == recipe and cfg["agent"]["name"] == recipe
    assert "[laptop profile]" in proc.stdout and "algorithm.group_size" in proc.stdout
    assert cfg["algorithm"]["group_size"] == 4  # the laptop profile on CPU
    assert list(tmp_path.iterdir()) == []  # a dry run writes nothing: no runs/<recipe>/.hydra, no run.log


@pytest.mark.slow
def test_command_line_beats_recipe_and_profile(tmp_path: Path) -> None:
    proc = run(
        tmp_path,
        "recipe=trustsql",
        "advantage=grpo",
        "reward.exec_metric=rex",
        "algorithm.group_size=6",
        "dry_run=true",
        "engine=local",
        "engine.device=cpu",
    )
    cfg = effective(proc)
    assert cfg["advantage"]["estimator"] == "grpo"
    assert cfg["reward"]["exec_metric"] == "rex"
    assert cfg["algorithm"]["group_size"] == 6


@pytest.mark.slow
def test_paper_sizes_without_the_profile(tmp_path: Path) -> None:
    cfg = effective(
        run(
            tmp_path,
            "recipe=dualsql",
            "agent.guardrails=false",
            "dry_run=true",
            "engine=local",
            "engine.device=cpu",
            "engine.laptop_profile=off",
        )
    )
    assert cfg["agent"]["guardrails"] is False
    assert cfg["algorithm"]["group_size"] == 16 and cfg["agent"]["generator_max_turns"] == 10


@pytest.mark.slow
def test_bad_values_exit_with_the_fix(tmp_path: Path) -> None:
    proc = run(tmp_path, "recipe=trustsql", "algorithm.group_size=1", "dry_run=true")
    assert proc.returncode == 2
    assert "G >= 2" in proc.stderr and "Traceback" not in proc.stderr
    proc = run(tmp_path, "dry_run=true")
    assert proc.returncode == 2 and "recipe=<name>, one of: dualsql, retoolsql" in proc.stderr
    assert list(tmp_path.iterdir()) == []  # no runs/None/


@pytest.mark.slow
@pytest.mark.parametrize(
    "override,message",
    [
        ("fresh=maybe", "fresh='maybe': expected a boolean (true or false)"),
        ("resume=maybe", "resume='maybe': choose one of auto, never, must (true = auto, false = never)"),
        ("trainer.total_steps=abc", "trainer.total_steps='abc': expected an integer or null"),
        ("engine.laptop_profile=[on]", "expected text; allowed values: auto, on, off"),
    ],
)
def test_values_of_the_wrong_type_exit_with_key_type_and_allowed_values(
    tmp_path: Path, override: str, message: str
) -> None:
    proc = run(tmp_path, "recipe=trustsql", override, "dry_run=true")
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.slow
def test_cfg_job_says_it_is_not_the_configuration_that_runs(tmp_path: Path) -> None:
    proc = run(tmp_path, "recipe=trustsql", "--cfg", "job")
    assert proc.returncode == 0, proc.stderr
    first = proc.stdout.splitlines()[0]
    assert first.startswith("# note: --cfg") and "dry_run=true" in first and "laptop profile" in first
    assert yaml.safe_load(proc.stdout)["algorithm"]["group_size"] == 8  # the recipe's, before the profile
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_a_model_path_that_is_not_a_directory_says_so(tmp_path: Path) -> None:
    proc = run(
        tmp_path,
        "recipe=think2sql",
        "model.path=runs/nothing/final",
        "engine=local",
        "engine.device=cpu",
        "logger=[console]",
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"the directory {tmp_path.resolve() / 'runs/nothing/final'} does not exist" in proc.stderr
    assert "Repo id" not in proc.stderr
    assert "does not exist" in (tmp_path / "runs" / "think2sql" / "run.log").read_text()  # the log has the error


@pytest.mark.slow
def test_unknown_recipe_lists_the_available_ones(tmp_path: Path) -> None:
    proc = run(tmp_path, "recipe=trustsq", "dry_run=true")
    assert proc.returncode != 0
    assert "trustsql" in proc.stderr and "retoolsql" in proc.stderr


def test_console_log_copies_whole_lines_without_progress_redraws(tmp_path: Path, capsys) -> None:
    from training.runs.logger import ConsoleLog

    log = tmp_path / "run" / "run.log"
    with ConsoleLog(log, earlier=["[engine] picked"]):
        print("[data] 3 examples")
        sys.stderr.write("train:  50%\rtrain: 100%\n")
        print("unfinished", end="")
    text = log.read_text()
    assert text.splitlines()[1:] == ["[engine] picked", "[data] 3 examples", "train: 100%", "unfinished"]
    assert text.startswith("==== ") and "[data] 3 examples" in capsys.readouterr().out
