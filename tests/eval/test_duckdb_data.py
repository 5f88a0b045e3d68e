"""The bundled benchmark written with DuckDB files, and a BIRD layout of ``<db>.duckdb``
files read like one of ``<db>.sqlite`` files."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import pytest

from eval.data import minibird
from eval.data.duckdb_copy import copy_sqlite_to_duckdb
from eval.data.loaders import load_split
from eval.data.minibird.domains import all_domains
from tools import QueryResult, get_database
from tools.db.duckdb_backend import DuckDBDatabase
from tools.errors import DataError

BUILD = minibird.build


def _two_domain_build(out: Path) -> Path:
    """minibird with one train and one dev database (the full build takes longer)."""
    domains = all_domains()
    train = next(d for d in domains if d.split == "train")
    dev = next(d for d in domains if d.split == "dev")
    return BUILD(out, [train, dev])


@pytest.mark.slow
def test_command_line_writes_duckdb_files_that_load_like_sqlite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from eval.data.__main__ import main

    monkeypatch.setattr(minibird, "build", _two_domain_build)
    assert main(["minibird", "--out", str(tmp_path / "duck"), "--format", "duckdb"]) == 0
    assert "split dev:" in capsys.readouterr().out
    _two_domain_build(tmp_path / "lite")
    root = tmp_path / "duck"
    assert not list(root.rglob("*.sqlite")) and len(list(root.rglob("*.duckdb"))) == 2
    manifest = json.loads((root / "MANIFEST.json").read_text(encoding="utf-8"))
    assert manifest["format"] == "duckdb"
    for name, digest in manifest["files"].items():
        assert hashlib.sha256((root / name).read_bytes()).hexdigest() == digest
    duck, lite = load_split("minibird", root, "dev"), load_split("minibird", tmp_path / "lite", "dev")
    assert [e.question for e in duck.examples] == [e.question for e in lite.examples]
    first = duck.examples[0]
    db = get_database(first.db_path)
    assert isinstance(db, DuckDBDatabase) and db.schema() == get_database(lite.examples[0].db_path).schema()
    assert isinstance(db.execute("SELECT COUNT(*) FROM " + next(iter(db.schema()))), QueryResult)


def test_duckdb_format_needs_an_out_folder(capsys: pytest.CaptureFixture[str]) -> None:
    from eval.data.__main__ import main

    assert main(["minibird", "--format", "duckdb"]) == 2
    assert "--out" in capsys.readouterr().err


def test_copy_keeps_values_and_refuses_to_overwrite(tmp_path: Path) -> None:
    source = tmp_path / "t.sqlite"
    conn = sqlite3.connect(source)
    conn.executescript(
        "CREATE TABLE t (i INTEGER, r REAL, s TEXT, d DATE, b BLOB, m, e INTEGER);"
        "INSERT INTO t VALUES (1, 2.5, 'x', '2020-01-02', X'00ff', 7, NULL);"
        "INSERT INTO t VALUES (2, 3, NULL, '02/01/2020', NULL, 'seven', NULL);"
    )
    conn.commit()
    conn.close()
    target = tmp_path / "t.duckdb"
    assert copy_sqlite_to_duckdb(source, target) == ["t.m"]  # mixed text and numbers: now text
    out = get_database(target).execute("SELECT * FROM t ORDER BY i")
    assert isinstance(out, QueryResult)
    assert out.rows == (
        (1, 2.5, "x", "2020-01-02", b"\x00\xff", "7", None),
        (2, 3.0, None, "02/01/2020", None, "seven", None),
    )
    with pytest.raises(DataError, match="exists"):
        copy_sqlite_to_duckdb(source, target)
