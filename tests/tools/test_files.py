"""The one atomic-write helper: a reader sees the old file or the new one, never half."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from tools.files import atomic_path, atomic_write_text


def test_a_write_replaces_the_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "records.jsonl"
    target.write_text("old\n")
    assert atomic_write_text(target, "new\n") == target
    assert target.read_text() == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["records.jsonl"]


def test_a_failed_write_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "index.sqlite"
    target.write_text("old")
    with pytest.raises(RuntimeError, match="build failed"), atomic_path(target) as tmp:
        sqlite3.connect(tmp).execute("CREATE TABLE t (x)").connection.close()  # half-built
        raise RuntimeError("build failed")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index.sqlite"]


def test_concurrent_writers_never_mix_their_bytes(tmp_path: Path) -> None:
    target = tmp_path / "cache.json"
    texts = [str(i) * 100_000 for i in range(8)]
    threads = [threading.Thread(target=atomic_write_text, args=(target, t)) for t in texts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert target.read_text() in texts
    assert [p.name for p in tmp_path.iterdir()] == ["cache.json"]
