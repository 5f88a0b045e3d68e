"""Public module paths that moved with the layout by subsystem still import: the same module
object as the new path (so registries are shared), with a ``DeprecationWarning`` naming it."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import tools
import training


def moved() -> list[tuple[str, str]]:
    return sorted({**training.MOVED, **tools.MOVED}.items())


@pytest.mark.parametrize(("old", "new"), moved())
def test_an_old_path_gives_the_module_at_the_new_one(old: str, new: str) -> None:
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {new}"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)


def test_a_plugin_written_against_the_old_paths_still_registers() -> None:
    """What the extension points of docs/INTERFACES.md used to import, in a fresh interpreter."""
    code = (
        "import warnings; warnings.simplefilter('ignore')\n"
        "from training.rewards import get_reward, register_reward\n"
        "from training.advantages import register_estimator, get_estimator\n"
        "from training.demonstrations import register_script, get_script\n"
        "from tools.bm25 import register_bm25_engine\n"
        "@register_estimator('old_path_sign')\n"
        "def sign(tracks, groups, opts): return tracks\n"
        "assert get_estimator('old_path_sign') is sign\n"
        "assert get_reward('ex').exec_metric == 'ex'\n"
        "print('ok')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-2000:]
