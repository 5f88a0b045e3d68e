"""The project's commands run as a user runs them: ``python -m <module> ...`` in a child process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_module(module: str, *args: str, cwd: Path, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    """``python -m module args`` in ``cwd`` with the project importable; ``env`` adds variables."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, PYTHONPATH=str(REPO), **env),
    )
