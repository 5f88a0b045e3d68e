"""Finding a dataset's files on disk, and collecting every layout problem before failing.

Users hold BIRD, Spider and their own data in slightly different shapes (a split folder
or its parent, ``dev_20240627``, MINIDEV's ``mini_dev_sqlite.json``, Spider's
``database/``). Each ``resolve_*`` function looks in the known places and returns a
``Layout``; whatever it cannot find goes into a ``Problems`` list that names the paths it
tried, so one run reports everything that is wrong at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tools.errors import DataError

MAX_IDS_SHOWN = 8


class Problems:
    """An ordered list of layout problems; ``raise_if_any`` turns them into one DataError."""

    def __init__(self, kind: str, root: Path, split: str) -> None:
        self.kind, self.root, self.split = kind, root, split
        self.items: list[str] = []

    def add(self, message: str) -> None:
        self.items.append(message)

    def __bool__(self) -> bool:
        return bool(self.items)

    def raise_if_any(self) -> None:
        if not self.items:
            return
        lines = "\n".join(f"  - {item}" for item in self.items)
        raise DataError(
            f"{self.kind} dataset at {self.root} (split {self.split!r}): {len(self.items)} problem(s):\n{lines}"
        )


def show_ids(ids: Sequence[str]) -> str:
    shown = ", ".join(ids[:MAX_IDS_SHOWN])
    more = f" and {len(ids) - MAX_IDS_SHOWN} more" if len(ids) > MAX_IDS_SHOWN else ""
    return f"example{'s' if len(ids) > 1 else ''} {shown}{more}"


@dataclass
class Layout:
    """Where one split of a dataset lives.

    ``question_files`` are read in order (Spider's train is two files). ``db_dirs`` are
    searched in order for ``<db_id>/<db_id>.sqlite`` and ``<db_id>.sqlite`` (or ``.db``), then
    the same with ``.duckdb`` (read by DuckDB, ``tools.db.duckdb_backend``).
    """

    question_files: list[Path]
    db_dirs: list[Path]
    tables_file: Path | None = None
    notes: list[str] = field(default_factory=list)
    dialect_question_files: dict[str, list[Path]] = field(default_factory=dict)
    """The same questions with their gold SQL in another engine's dialect, by dialect
    (MINIDEV's ``mini_dev_postgresql.json`` under ``"postgres"``): read instead of
    ``question_files`` when the databases are that engine's (``data.dsn``)."""

    def database(self, db_id: str) -> Path | None:
        for folder in self.db_dirs:
            for candidate in (
                folder / db_id / f"{db_id}.sqlite",
                folder / db_id / f"{db_id}.db",
                folder / f"{db_id}.sqlite",
                folder / f"{db_id}.db",
                folder / db_id / f"{db_id}.duckdb",
                folder / f"{db_id}.duckdb",
            ):
                if candidate.is_file():
                    return candidate
        return None

    def expected_database(self, db_id: str) -> Path:
        folder = self.db_dirs[0] if self.db_dirs else Path(".")
        return folder / db_id / f"{db_id}.sqlite"


def first_file(folder: Path, names: Sequence[str]) -> Path | None:
    for name in names:
        if (folder / name).is_file():
            return folder / name
    return None


def _first_dir(folder: Path, names: Sequence[str]) -> Path | None:
    for name in names:
        if (folder / name).is_dir():
            return folder / name
    return None


def tried_paths(folders: Sequence[Path], names: Sequence[str]) -> str:
    return "; looked for " + ", ".join(names) + " in " + ", ".join(str(f) for f in dict.fromkeys(folders))


def _zip_hint(folder: Path, names: Sequence[str]) -> str:
    for name in names:
        if (folder / f"{name}.zip").is_file():
            return f" ({folder / (name + '.zip')} exists: unzip it first)"
    return ""


def resolve_bird(root: Path, split: str, problems: Problems) -> Layout:
    """BIRD layout: ``root`` is the split folder or its parent.

    Questions: ``<split>.json`` or MINIDEV's ``mini_<split>_sqlite.json`` /
    ``mini_<split>.json``; MINIDEV's ``mini_<split>_postgresql.json`` (the same questions,
    gold SQL in PostgreSQL's dialect) beside them is the dataset's questions when its
    databases are on a PostgreSQL server (``data.dsn``); databases:
    ``<split>_databases/<db_id>/<db_id>.sqlite``;
    tables: ``<split>_tables.json`` or ``tables.json`` (optional: schemas are read from
    the SQLite files). Split folders may carry a release suffix (``dev_20240627``).
    ``mini_dev_sqlite.json`` repeats question ids 137 and 138; the loader keeps every
    question and renames the repeats ``<id>@<position>`` (``eval.data.question_order``).
    """
    q_names = [f"{split}.json", f"mini_{split}_sqlite.json", f"mini_{split}.json"]
    postgres_names = [f"mini_{split}_postgresql.json"]
    db_names = [f"{split}_databases", "databases"]
    folders = [
        root / split,
        *sorted(p for p in root.glob(f"{split}_*") if p.is_dir() and not p.name.endswith("_databases")),
        root,
    ]
    folder = next((f for f in folders if first_file(f, q_names)), None)
    postgres_file = next((p for f in folders if (p := first_file(f, postgres_names))), None)
    by_dialect = {"postgres": [postgres_file]} if postgres_file else {}
    if folder is None and postgres_file is not None:  # only PostgreSQL's file: ``load_split`` decides
        folder = postgres_file.parent
    elif folder is None:
        sibling = root.parent / split
        hint = f" (did you mean data.root={root.parent}? it holds {sibling.name}/)" if sibling.is_dir() else ""
        problems.add(f"missing questions file for split {split!r}{tried_paths(folders, q_names)}{hint}")
        folder = next((f for f in folders if f.is_dir() and _first_dir(f, db_names)), folders[0])
    questions = first_file(folder, q_names)
    db_dir = _first_dir(folder, db_names)
    if db_dir is None:
        problems.add(f"missing databases folder{tried_paths([folder], db_names)}{_zip_hint(folder, db_names)}")
    tables = first_file(folder, [f"{split}_tables.json", "tables.json", f"mini_{split}_tables.json"])
    files = [questions] if questions else []
    return Layout(files, [db_dir] if db_dir else [], tables, dialect_question_files=by_dialect)


def resolve_spider(root: Path, split: str, problems: Problems) -> Layout:
    """Spider layout: ``train_spider.json`` (+ ``train_others.json``), ``dev.json``,
    ``test.json``; databases in ``database/<db_id>/<db_id>.sqlite`` (``test_database/``
    first for the test split); ``tables.json``."""
    names = {"train": ["train_spider.json", "train.json"]}.get(split, [f"{split}.json"])
    first = first_file(root, names)
    files = [first] if first else []
    others = root / "train_others.json"
    if first is None and split == "train" and others.is_file():
        import warnings

        warnings.warn(
            f"Spider at {root}: no train_spider.json, training on train_others.json alone (1,659 "
            "questions on other databases - not Spider's training set); add train_spider.json for "
            "the standard 8,659-question split",
            UserWarning,
            stacklevel=2,
        )
        files = [others]
    elif first is None:
        problems.add(f"missing questions file for split {split!r}{tried_paths([root], names)}")
    elif split == "train" and (root / "train_others.json").is_file():
        files.append(root / "train_others.json")
    db_names = [f"{split}_database", "database"]
    db_dirs = [root / n for n in db_names if (root / n).is_dir()]
    if not db_dirs:
        problems.add(f"missing databases folder{tried_paths([root], db_names)}{_zip_hint(root, db_names)}")
    tables = first_file(root, [f"{split}_tables.json", "tables.json"])
    return Layout(files, db_dirs, tables)


def resolve_jsonl(root: Path, split: str, problems: Problems) -> Layout:
    """Your own data: ``root`` is a ``.jsonl`` file or a folder holding ``<split>.jsonl``.

    Databases are searched next to it: ``<db_id>.sqlite``, ``<db_id>/<db_id>.sqlite``, and
    the same under ``databases/`` and ``<split>_databases/``.
    """
    if root.suffix == ".jsonl" or root.is_file():
        file, folder = root, root.parent
        if not root.is_file():
            problems.add(f"missing questions file {root}")
    else:
        folder = root
        file = root / f"{split}.jsonl"
        if not file.is_file():
            problems.add(f"missing questions file{tried_paths([root], [f'{split}.jsonl'])}")
    db_dirs = [folder, *(folder / n for n in ("databases", f"{split}_databases") if (folder / n).is_dir())]
    return Layout([file] if file.is_file() else [], db_dirs, None)
