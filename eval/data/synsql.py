"""SynSQL-2.5M (OmniSQL, arXiv 2503.02240) as its release lays it out.

The release folder ``SynSQL-2.5M/`` holds ``data.json`` (one JSON list; each entry has
``db_id``, ``question``, ``sql``, ``sql_complexity`` (``Simple``, ``Moderate``, ``Complex``,
``Highly Complex``), ``question_style``, ``external_knowledge`` and ``cot``), ``tables.json``
and ``databases/<db_id>/<db_id>.sqlite``. Its questions carry no id: an example's id is its
position in ``data.json``, so ids stay stable while the file does. ``external_knowledge`` is
the example's evidence and ``sql_complexity`` its difficulty (lower-cased: ``highly complex``).

SynSQL is a training set with one split, ``train``; ``data.root`` is the release folder (or
its parent, where the folder is named ``SynSQL-2.5M``). ``data.json`` is one JSON list of about
2.5 million entries; the loader parses it one entry at a time (``loaders._stream_json``), so a
``limit`` reads only the head of the file.
"""

from __future__ import annotations

from pathlib import Path

from eval.data.layout import Layout, Problems, first_file, tried_paths

FOLDER = "SynSQL-2.5M"
QUESTIONS = "data.json"


def resolve_synsql(root: Path, split: str, problems: Problems) -> Layout:
    """``data.json``, ``tables.json`` and ``databases/`` in ``root`` or ``root/SynSQL-2.5M``."""
    if split != "train":
        problems.add(
            f"SynSQL-2.5M has one split, train, not {split!r}: use it for training questions "
            "(supervised.data.split=train) and evaluate on another dataset"
        )
    folders = [root, root / FOLDER]
    folder = next((f for f in folders if first_file(f, [QUESTIONS])), None)
    if folder is None:
        problems.add(f"missing SynSQL-2.5M questions file{tried_paths(folders, [QUESTIONS])}")
        folder = next((f for f in folders if (f / "databases").is_dir()), root)
    databases = folder / "databases"
    if not databases.is_dir():
        problems.add(
            f"missing databases folder {databases} (SynSQL-2.5M keeps databases/<db_id>/<db_id>.sqlite; "
            "unzip the release's databases archive there)"
        )
    questions = first_file(folder, [QUESTIONS])
    return Layout(
        [questions] if questions else [],
        [databases] if databases.is_dir() else [],
        first_file(folder, ["tables.json"]),
    )
