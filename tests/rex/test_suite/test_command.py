"""``python -m rex suite build data=...``: every database of a benchmark's splits gets its
suite, chosen for the gold queries of its questions; a second run builds nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from rex.__main__ import main
from tests.eval.conftest import write_bird


def test_the_command_builds_every_database_once(
    tmp_path: Path, suite_cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bird = write_bird(tmp_path / "bird").parent
    args = ["suite", "build", "data=bird", f"data.root={bird}", "data.split=dev", "--neighbours", "2"]
    assert main(args) == 0
    first = capsys.readouterr()
    assert first.out.count(": built in ") == 2 and "music" in first.out and "shop" in first.out
    assert "test suites" in first.err  # the progress bar
    folders = sorted(p.name for p in (suite_cache / "test_suites").iterdir())
    assert len(folders) == 2
    assert main(args) == 0
    assert capsys.readouterr().out.count(": cached in ") == 2
    assert sorted(p.name for p in (suite_cache / "test_suites").iterdir()) == folders


def test_bad_settings_are_a_clear_error(tmp_path: Path, suite_cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bird = write_bird(tmp_path / "bird").parent
    assert main(["suite", "build", "data=bird", f"data.root={bird}", "--neighbours", "0"]) == 2
    assert "test_suite.neighbours=0; use a positive integer" in capsys.readouterr().err
