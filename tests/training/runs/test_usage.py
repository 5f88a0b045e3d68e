"""training/runs/usage.py: the wall time and peak resident memory a command reports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

CHILD = """
import json, time
from training.runs.usage import process_usage
before = process_usage()
block = bytearray(300 * 1024 * 1024)  # touched below: resident, not just reserved
for i in range(0, len(block), 4096):
    block[i] = 1
del block
time.sleep(0.2)
print(json.dumps([before, process_usage()]))
"""


def test_peak_memory_keeps_the_high_water_mark_and_the_clock_runs_from_the_start() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD], cwd=REPO, capture_output=True, text=True, timeout=120, check=True
    )
    before, after = json.loads(proc.stdout)
    assert before["peak_rss_bytes"] < 200 * 1024**2  # its own, not this large test process's
    assert after["peak_rss_bytes"] - before["peak_rss_bytes"] > 250 * 1024**2  # freed, still the peak
    assert after["wall_seconds"] >= before["wall_seconds"] + 0.2
