"""One unit convention: fractions in files, percent with a % sign wherever a person reads."""

from __future__ import annotations

import doctest
import re

import eval.units
from eval.summary import console_summary, markdown
from eval.units import pct
from training.runs.logger import format_metrics


def test_pct_formats_fractions_as_labelled_percent() -> None:
    assert pct(0.375) == "37.5%" and pct(0.0) == "0.0%" and pct(1) == "100.0%"
    assert pct(2 / 3, digits=2) == "66.67%" and pct(None) == "n/a" and pct(float("nan")) == "n/a"
    assert doctest.testmod(eval.units).failed == 0


def _summary() -> dict:
    block = {
        "n": 8,
        "scorable": 8,
        "matches": 3,
        "ex": 0.375,
        "ex_official": 0.375,
        "rex": 0.5,
        "qatch": {"cp": 0.5, "cr": 0.25, "tc": 0.125, "mean": 0.3},
        "outcomes": {"match": 3, "mismatch": 5},
    }
    return {
        "settings": {"recipe": "trustsql", "mode": "greedy"},
        **block,
        "by_difficulty": {"simple": block},
        "missing": 0,
        "executable": 0.625,
        "samples": 1,
    }


def test_report_and_console_show_percent_with_a_sign() -> None:
    text = markdown(_summary())
    assert "| EX (project: gold errors excluded) | 37.5% |" in text
    assert "| executable predictions | 62.5% |" in text and "| simple | 8 | 37.5% | 37.5% | 50.0% | 30.0% |" in text
    line = console_summary(_summary())
    assert line.startswith("EX 37.5% (official 37.5%) on 8 questions | REX 50.0% | QATCH 30.0%")
    # every number with a decimal point in the report is a labelled percent or a plain count/mean
    assert not re.search(r"\| 0\.\d+ \|", text)


def test_training_console_lines_show_accuracies_in_percent() -> None:
    train = format_metrics({"reward/total": 0.5, "ex/batch": 0.25, "time/step": 12.0})
    assert "ex=25.0%" in train and "reward=0.5" in train
    evaluation = format_metrics({"ex": 0.125, "n": 8, "executable": 0.5, "duration_s": 30.5})
    assert evaluation == "ex=12.5% n=8 executable=50.0% duration_s=30.5"
