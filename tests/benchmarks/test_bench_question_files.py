"""benchmarks/bench_question_files.py on a small file: it writes the SynSQL folder, loads the
limit from it in a fresh interpreter and prints the seconds and peak memory."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a fresh interpreter

REPO = Path(__file__).resolve().parents[2]


def test_the_benchmark_prints_seconds_and_peak_memory_of_a_limited_load() -> None:
    command = [
        sys.executable,
        "benchmarks/bench_question_files.py",
        "--entries",
        "300",
        "--cot-chars",
        "10",
        "--limit",
        "3",
    ]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "# data.json: 300 entries" in done.stdout
    line = next(x for x in done.stdout.splitlines() if x.startswith("this checkout"))
    assert re.search(r"\d+\.\d\d s  peak +\d+ MB .*; 3 questions\)", line), line
