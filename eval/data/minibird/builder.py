"""Building minibird: rows -> SQLite -> checked questions -> BIRD-layout files + manifest."""

from __future__ import annotations

import hashlib
import logging
import os
import random
import shutil
import sqlite3
import tempfile
from collections.abc import Sequence
from pathlib import Path

from eval.data.minibird import questions as qgen
from eval.data.minibird import writer
from eval.data.minibird.spec import Domain

log = logging.getLogger(__name__)

FORMAT = "1"
"""Bump by hand when the layout changes; the generator's source hash is added to it."""

SPLITS = ("train", "dev")
QUESTIONS_PER_DB = {"train": 110, "dev": 112}
MANIFEST = "MANIFEST.json"


def version() -> str:
    """``<FORMAT>-<hash of the generator's source>``: any change to the generator is a new
    version, so a cache built by older code is never reused."""
    digest = hashlib.sha256()
    root = Path(__file__).parent
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    return f"{FORMAT}-{digest.hexdigest()[:10]}"


def _domains() -> tuple[Domain, ...]:
    from eval.data.minibird.domains import all_domains

    return all_domains()


def build(out_dir: str | os.PathLike[str], domains: Sequence[Domain] | None = None) -> Path:
    """Write the benchmark into ``out_dir`` (created; must be empty or absent) and return it.

    Raises ``GenerationError`` when a gold SQL does not execute or returns nothing.
    """
    out = Path(out_dir).resolve()  # sqlite URIs (read-only checks) need an absolute path
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} is not empty; minibird builds into an empty or new folder")
    out.mkdir(parents=True, exist_ok=True)
    domains = tuple(domains or _domains())
    for split in SPLITS:
        _build_split(out, split, [d for d in domains if d.split == split])
    verify(out)
    _write_manifest(out)
    return out


def _build_split(out: Path, split: str, domains: list[Domain]) -> None:
    split_dir = out / split
    db_root = split_dir / f"{split}_databases"
    db_root.mkdir(parents=True)
    records: list[dict] = []
    tables = []
    for domain in domains:
        db_dir = db_root / domain.db_id
        db_dir.mkdir()
        rows = domain.make_rows(random.Random(f"minibird-rows-{domain.db_id}"))
        db_path = db_dir / f"{domain.db_id}.sqlite"
        writer.write_sqlite(domain, rows, db_path)
        writer.write_descriptions(domain, db_dir)
        tables.append(writer.tables_json_entry(domain))
        conn = sqlite3.connect(f"{db_path.as_uri()}?mode=ro", uri=True)
        try:
            drafts = qgen.generate(
                domain, conn, QUESTIONS_PER_DB[split], random.Random(f"minibird-questions-{domain.db_id}")
            )
        finally:
            conn.close()
        for draft in drafts:
            records.append(
                {
                    "question_id": len(records),
                    "db_id": domain.db_id,
                    "question": draft.question,
                    "evidence": draft.evidence,
                    "SQL": draft.sql,
                    "difficulty": draft.difficulty,
                }
            )
    writer.write_json(split_dir / f"{split}.json", records)
    writer.write_json(split_dir / f"{split}_tables.json", tables)


def verify(root: Path) -> None:
    """Execute every gold SQL of every split on its database; raise listing each failure."""
    import json

    failures = []
    for split in SPLITS:
        records = json.loads((root / split / f"{split}.json").read_text(encoding="utf-8"))
        conns: dict[str, sqlite3.Connection] = {}
        try:
            for rec in records:
                db = rec["db_id"]
                if db not in conns:
                    path = root / split / f"{split}_databases" / db / f"{db}.sqlite"
                    conns[db] = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
                try:
                    rows = conns[db].execute(rec["SQL"]).fetchall()
                except sqlite3.Error as err:
                    failures.append(f"{split} question {rec['question_id']} ({db}): {err}: {rec['SQL']}")
                    continue
                if not rows or all(v is None for row in rows for v in row):
                    failures.append(f"{split} question {rec['question_id']} ({db}): empty result: {rec['SQL']}")
        finally:
            for conn in conns.values():
                conn.close()
    if failures:
        raise qgen.GenerationError(f"{len(failures)} minibird gold SQL failed:\n" + "\n".join(failures))


def _write_manifest(root: Path) -> None:
    files = {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }
    writer.write_json(root / MANIFEST, {"name": "minibird", "version": version(), "files": files})


def ensure() -> Path:
    """The cached benchmark root, building it first if absent (atomically: temp dir + rename)."""
    from tools.cache import cache_root

    base = cache_root()
    target = base / f"minibird-{version()}"
    if (target / MANIFEST).is_file():
        return target
    log.info("building minibird %s into %s (once)", version(), target)
    tmp = Path(tempfile.mkdtemp(prefix=".minibird-build-", dir=base))
    try:
        build(tmp)
        try:
            os.rename(tmp, target)
        except OSError:
            if not (target / MANIFEST).is_file():  # not a concurrent builder winning the race
                if target.exists():  # a leftover without manifest (older, killed copy): replace it
                    shutil.rmtree(target)
                    os.rename(tmp, target)
                else:
                    raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target
