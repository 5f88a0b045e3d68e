"""Spider's robustness sets as their releases lay them out: Spider-Syn, Spider-DK and
Spider-Realistic.

Each ships questions only (Spider-DK's repository also ships a ``tables.json``); the
databases are Spider's own. ``data.root`` is the set's folder; its databases are looked for
in ``<root>/database`` (a copy or a link), then in a Spider release beside it
(``<root>/../spider/database`` and ``test_database``), then in ``<root>/../database``.

- Spider-Syn (github.com/ygan/Spider-Syn): the folder ``Spider-Syn/`` holding ``dev.json``
  and ``train_spider.json`` (the repository root is accepted too); the question is
  ``SpiderSynQuestion`` (``SpiderQuestion`` keeps Spider's wording).
- Spider-DK (github.com/ygan/Spider-DK): ``Spider-DK.json``, one evaluation split.
- Spider-Realistic (zenodo.org/records/5205322): ``spider-realistic.json``, one evaluation
  split (the ``dev.json`` beside it is Spider's original dev set).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from eval.data.layout import Layout, Problems, first_file, tried_paths

EVAL_ONLY_SPLITS = ("dev", "test")


def _spider_databases(bases: Sequence[Path]) -> list[Path]:
    """Folders that may hold Spider's ``<db_id>/<db_id>.sqlite`` for a questions-only set
    whose files are in one of ``bases`` (the set's folder, ``data.root`` and its parent)."""
    candidates = [
        folder
        for root in bases
        for folder in (
            root / "database",
            root / "test_database",
            root.parent / "spider" / "test_database",
            root.parent / "spider" / "database",
            root.parent / "database",
            root.parent / "test_database",
        )
    ]
    return [folder for folder in dict.fromkeys(candidates) if folder.is_dir()]


def _layout(
    name: str, root: Path, question_names: Sequence[str], folders: Sequence[Path], problems: Problems
) -> Layout:
    folder = next((f for f in folders if first_file(f, question_names)), None)
    questions = first_file(folder, question_names) if folder is not None else None
    if questions is None:
        problems.add(f"missing {name} questions file{tried_paths(folders, question_names)}")
    base = folder if folder is not None else root
    db_dirs = _spider_databases([base, root, root.parent])  # root.parent: a folder inside its repository
    if not db_dirs:
        problems.add(
            f"{name} ships questions only and no Spider databases were found; put Spider's database/ folder "
            f"(or a link to it) in {base}, or unpack Spider beside it as {base.parent / 'spider'}"
        )
    tables = first_file(base, ["tables.json"])
    return Layout([questions] if questions else [], db_dirs, tables)


def _one_split(name: str, split: str, problems: Problems) -> bool:
    if split in EVAL_ONLY_SPLITS:
        return True
    problems.add(
        f"{name} is an evaluation set with one split, dev, not {split!r}: train on data=spider and evaluate "
        f"with eval.run (data.eval_split=dev; data.split=dev when scoring a predictions file)"
    )
    return False


def resolve_spider_syn(root: Path, split: str, problems: Problems) -> Layout:
    """Spider-Syn: ``dev.json`` / ``train_spider.json`` in ``root`` or ``root/Spider-Syn``."""
    names = {"train": ["train_spider.json", "train.json"]}.get(split, [f"{split}.json"])
    return _layout("Spider-Syn", root, names, [root, root / "Spider-Syn"], problems)


def resolve_spider_dk(root: Path, split: str, problems: Problems) -> Layout:
    """Spider-DK: ``Spider-DK.json`` in ``root`` (its one split, named dev here)."""
    _one_split("Spider-DK", split, problems)
    return _layout("Spider-DK", root, ["Spider-DK.json"], [root, root / "Spider-DK"], problems)


def resolve_spider_realistic(root: Path, split: str, problems: Problems) -> Layout:
    """Spider-Realistic: ``spider-realistic.json`` in ``root`` (its one split, named dev here)."""
    _one_split("Spider-Realistic", split, problems)
    folders = [root, root / "spider-realistic"]
    return _layout("Spider-Realistic", root, ["spider-realistic.json"], folders, problems)
