"""The bundled benchmark written into PostgreSQL (one schema per ``db_id`` and a SELECT-only
role) and loaded with ``dsn``: questions from the files, databases from the server."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg
import pytest

from eval.data import load_from_config, minibird
from eval.data.loaders import load_split
from eval.data.minibird.domains import all_domains
from eval.data.postgres_copy import copy_sqlite_to_postgres, role_dsn
from rex.scorer import ExecScorer
from tests.helpers.pg_server import PgServer
from tools import get_database
from tools.db.postgres_backend import PostgresDatabase
from tools.errors import DataError

BUILD = minibird.build


def _two_domain_build(out: Path) -> Path:
    """minibird with one train and one dev database (the full build takes longer)."""
    domains = all_domains()
    return BUILD(out, [next(d for d in domains if d.split == "train"), next(d for d in domains if d.split == "dev")])


@pytest.mark.slow
def test_command_line_writes_minibird_into_postgres_and_the_loader_reads_it(
    pg_server: PgServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from eval.data.__main__ import dsn_override, main

    monkeypatch.setattr(minibird, "build", _two_domain_build)
    admin = pg_server.new_database("bench")
    root = tmp_path / "mb"
    assert main(["minibird", "--out", str(root), "--format", "postgres", "--dsn", admin, "--role", "bench_reader"]) == 0
    reader = role_dsn(admin, "bench_reader")
    assert dsn_override(reader) in capsys.readouterr().out  # quoted for the shell and Hydra
    served = load_split("minibird", root, "dev", dsn=reader)
    files = load_split("minibird", root, "dev")
    assert [e.id for e in served.examples] == [e.id for e in files.examples]
    # minibird's gold SQL is SQLite's: the few using strftime or SQLite's loose GROUP BY fail here.
    running = load_split("minibird", root, "dev", drop_failing_gold=True, dsn=reader).examples
    assert len(files.examples) > len(running) >= 0.85 * len(files.examples)
    first = served.examples[0]
    assert first.db_path.startswith(reader) and first.db_path.endswith(f"#{first.db_id}")
    db = get_database(first.db_path)
    assert isinstance(db, PostgresDatabase) and db.schema() == get_database(files.examples[0].db_path).schema()
    scorer = ExecScorer()
    for ex in running[:10]:
        assert scorer.score(db, ex.gold_sql, ex.gold_sql, "ex").ex_match, ex.gold_sql
    config = {"kind": "minibird", "root": str(root), "split": "train", "limit": 3, "drop_failing_gold": False}
    trained = load_from_config({**config, "dsn": reader, "eval_split": "dev", "eval_limit": None})
    assert len(trained) == 3 and all(isinstance(get_database(e.db_path), PostgresDatabase) for e in trained)


def test_postgres_format_needs_a_dsn(capsys: pytest.CaptureFixture[str]) -> None:
    from eval.data.__main__ import main

    assert main(["minibird", "--format", "postgres"]) == 2
    assert "--dsn" in capsys.readouterr().err


def test_copy_keeps_values_and_refuses_an_existing_schema(pg_server: PgServer, tmp_path: Path) -> None:
    source = tmp_path / "t.sqlite"
    conn = sqlite3.connect(source)
    conn.executescript(
        "CREATE TABLE t (i INTEGER, r REAL, s TEXT, d DATE, b BLOB, m, e INTEGER);"
        "INSERT INTO t VALUES (1, 2.5, 'x' || char(0) || 'y', '2020-01-02', X'00ff', 7, NULL);"
        "INSERT INTO t VALUES (2, 3, NULL, '02/01/2020', NULL, 'seven', NULL);"
    )
    conn.commit()
    conn.close()
    admin = pg_server.new_database("copies")
    with psycopg.connect(admin) as pg:
        assert copy_sqlite_to_postgres(source, pg, "t") == ["t.m"]  # mixed text and numbers: now text
        rows = pg.execute("SELECT * FROM t.t ORDER BY i").fetchall()
        with pytest.raises(DataError, match="schema 't' exists"):
            copy_sqlite_to_postgres(source, pg, "t")
    assert rows == [
        (1, 2.5, "xy", "2020-01-02", b"\x00\xff", "7", None),
        (2, 3.0, None, "02/01/2020", None, "seven", None),
    ]
