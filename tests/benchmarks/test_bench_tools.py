"""benchmarks/bench_tools.py's backend overhead parts run at their smallest size and print
the tool-over-raw-driver ratios (figures, not timing assertions)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TITLES = {
    "overhead": "1. SQLite: the executor tool vs raw sqlite3",
    "duckdb": "4. DuckDB: the executor tool vs its raw connection",
    "postgres": "5. PostgreSQL: the executor tool vs raw psycopg",
}
FAMILIES = ("point_lookup", "indexed_filter", "pk_range_aggregate", "full_scan_aggregate")


def run_bench(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "bench_tools.py"), "--workdir", str(tmp_path), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
        check=False,
    )


@pytest.mark.slow
@pytest.mark.parametrize("part", sorted(TITLES))
def test_each_backend_part_prints_its_ratios(part: str, tmp_path: Path) -> None:
    if part == "postgres":
        from tests.helpers.pg_server import postgres_bindir

        if postgres_bindir() is None:
            message = "no PostgreSQL server binaries (initdb): install Debian's postgresql package"
            if os.environ.get("CI") == "true":
                pytest.fail(message)
            pytest.skip(message)
    proc = run_bench(tmp_path, "--rows", "2000", "--queries", "8", "--repeat", "1", "--parts", part)
    assert proc.returncode == 0, proc.stderr[-3000:]
    section = proc.stdout.split(TITLES[part], 1)[1]
    assert re.search(r"^  queries: 8$", section, re.M), section
    assert re.search(r"^  tool_errors: 0$", section, re.M), section
    for name in ("median_ratio", "p90_ratio", "total_time_ratio"):
        assert re.search(rf"^  {name}: \d+\.\d+$", section, re.M), (name, section)
    for family in FAMILIES:  # two queries of each family: median / p90 seconds and the ratio
        line = re.search(rf"^  {family}: (.*)$", section, re.M)
        assert line is not None, (family, section)
        assert [kv.split("=")[0] for kv in line.group(1).split(", ")] == [
            "raw_median_s",
            "raw_p90_s",
            "tool_median_s",
            "tool_p90_s",
            "ratio",
        ]
    if part == "overhead":
        assert re.search(r"^  median_ratio_with_dispatcher_and_json: \d+\.\d+$", section, re.M), section


def test_an_unknown_part_is_refused_by_name(tmp_path: Path) -> None:
    proc = run_bench(tmp_path, "--rows", "10", "--parts", "overhead,postgress")
    assert proc.returncode == 2
    assert "unknown --parts ['postgress']" in proc.stderr and "postgres" in proc.stderr
