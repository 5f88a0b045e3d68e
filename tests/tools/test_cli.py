"""``python -m tools`` run as a user would, in a subprocess from another directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def _run(args: list[str], cwd: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SQLAGENT_RL_CACHE": str(cache)}
    return subprocess.run(
        [sys.executable, "-m", "tools", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.slow
def test_cli_tools_profile_and_schema(school_db: Path, tmp_path: Path, _cache_dir: Path) -> None:
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    db = str(school_db)
    out = _run(["sqlite_query", "--db", db, "--sql", "SELECT 1"], cwd, _cache_dir)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["rows"] == [[1]]

    out = _run(["sqlite_query", "--db", db, "--sql", "SELECT nme FROM schools"], cwd, _cache_dir)
    assert out.returncode == 1
    assert json.loads(out.stdout)["error"]["kind"] == "no_such_column"

    out = _run(
        ["sqlite_peek", "--db", db, "--table", "schools", "--columns", "city,enrollment", "--limit", "2"],
        cwd,
        _cache_dir,
    )
    assert out.returncode == 0 and list(json.loads(out.stdout)["columns"]) == ["city", "enrollment"]

    out = _run(
        ["bm25_search_sqlite", "--db", db, "--table", "events", "--column", "kind", "--query", "open"], cwd, _cache_dir
    )
    assert out.returncode == 0 and json.loads(out.stdout)["hits"][0]["value"] == "open day"

    out = _run(["profile", "--db", db], cwd, _cache_dir)
    assert out.returncode == 0
    profile = json.loads(out.stdout)
    assert profile["db_id"] == "schools" and [t["name"] for t in profile["tables"]] == ["schools", "scores", "events"]

    out = _run(["schema", "--db", db, "--format", "ddl", "--tables", "scores"], cwd, _cache_dir)
    assert out.returncode == 0 and out.stdout.startswith("CREATE TABLE scores (")

    out = _run(["execute_sql", "--db", db, "--sql", "SELECT * FROM events"], cwd, _cache_dir)
    assert len(json.loads(out.stdout)["rows"]) == 10


@pytest.mark.slow
def test_cli_bad_usage(tmp_path: Path, _cache_dir: Path) -> None:
    out = _run(["sqlite_query", "--db", str(tmp_path / "missing.sqlite"), "--sql", "SELECT 1"], tmp_path, _cache_dir)
    assert out.returncode == 2 and "no SQLite database" in out.stderr
    out = _run(["no_such_tool", "--db", "x"], tmp_path, _cache_dir)
    assert out.returncode == 2 and "invalid choice" in out.stderr
