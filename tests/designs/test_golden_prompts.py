"""Each agent's rendered prompt against a golden file, and ``python -m agents show``.

Regenerate the golden files after an intended prompt change with
``UPDATE_GOLDEN=1 python -m pytest tests/designs/test_golden_prompts.py`` and review the diff.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agents.__main__ import format_messages, prompt_messages
from agents.designs import get_design
from tests.designs.retoolsql.test_agent import _pool
from tests.helpers.designs import project_designs

HERE = Path(__file__).parent
REPO = Path(__file__).resolve().parents[2]
LINKED = "schools.id, schools.city, satscores.school_id, satscores.avg_math"
OPTIONS = {
    # (design, role): (agent options, linked schema) where the default ({}, "") does not do
    ("retoolsql", "agent"): ({"few_shot_pool": _pool()}, ""),
    ("dualsql", "generator"): ({}, LINKED),
}


def golden_cases() -> list[tuple[str, str]]:
    """``(design, role)`` for every golden file under tests/designs/<design>/golden/."""
    return [(d, path.stem) for d in project_designs() for path in sorted((HERE / d / "golden").glob("*.txt"))]


def golden(design: str, role: str) -> Path:
    return HERE / design / "golden" / f"{role}.txt"


def test_every_project_design_has_a_golden_prompt() -> None:
    assert sorted({d for d, _ in golden_cases()}) == project_designs()


@pytest.mark.parametrize(("design", "role"), golden_cases())
def test_prompt_matches_golden_file(design: str, role: str, join_example, db) -> None:
    options, linked = OPTIONS.get((design, role), ({}, ""))
    agent = get_design(design).agent
    text = format_messages(prompt_messages(agent, join_example, db, options, None if role == "agent" else role, linked))
    path = golden(design, role)
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8"), (
        f"prompt of {design}/{role} changed; if intended, regenerate with UPDATE_GOLDEN=1"
    )


def _cli(*args: str, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "SQLAGENT_RL_CACHE": str(cache)}
    return subprocess.run(
        [sys.executable, "-m", "agents", *args], capture_output=True, text=True, env=env, cwd=REPO, timeout=120
    )


@pytest.mark.slow
def test_cli_show_renders_the_prompt(db_path: Path, join_example, tmp_path: Path) -> None:
    proc = _cli(
        "show",
        "dualsql",
        "--role",
        "generator",
        "--db",
        str(db_path),
        "--question",
        join_example.question,
        "--evidence",
        join_example.evidence,
        "--linked",
        LINKED,
        cache=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == golden("dualsql", "generator").read_text(encoding="utf-8")
    proc = _cli(
        "show",
        "think2sql",
        "--db",
        str(db_path),
        "--question",
        "How many?",
        "--gold-sql",
        "SELECT COUNT(*) FROM satscores",
        "-o",
        'schema_format="compact"',
        cache=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "satscores(" in proc.stdout and "schools(" not in proc.stdout and "=== system ===" in proc.stdout


@pytest.mark.slow
def test_cli_errors_say_how_to_fix(db_path: Path, tmp_path: Path) -> None:
    proc = _cli("show", "trustsql", "--db", str(tmp_path / "missing.sqlite"), "--question", "q", cache=tmp_path)
    assert proc.returncode == 2 and "no database file" in proc.stderr
    proc = _cli("show", "trustsq", "--db", str(db_path), "--question", "q", cache=tmp_path)
    assert proc.returncode == 2 and "did you mean 'trustsql'" in proc.stderr
    proc = _cli("show", "foo", "--db", str(tmp_path / "missing.sqlite"), "--question", "q", cache=tmp_path)
    assert proc.returncode == 2  # the unknown agent is reported first, in a sentence that reads
    assert proc.stderr.strip() == (
        "error: unknown agent 'foo'; registered agents: dualsql, retoolsql, think2sql, trustsql"
    )
    proc = _cli("show", "trustsql", "--db", str(db_path), "--question", "q", "-o", "max_turn=3", cache=tmp_path)
    assert proc.returncode == 2 and "max_turns" in proc.stderr
    proc = _cli("list", cache=tmp_path)
    assert proc.returncode == 0 and "linker_max_turns=5" in proc.stdout
