"""A split's questions in file order, and how repeated question ids are made unique.

BIRD's official evaluation (``evaluation_ex.py``) pairs the i-th prediction of a
``predict_*.json`` file with the i-th question of the question file and never reads the
ids. MINIDEV's ``mini_dev_sqlite.json`` repeats question ids 137 and 138 (positions
484/487 and 485/488), so for BIRD-layout data a repeated id is not an error: the first
question with an id keeps it, and each later one becomes ``<id>@<position>`` (its 0-based
index in the question file; ``137@487``, ``138@488``). The new id depends only on the
file, so it is the same in every run; the loader's warning and ``python -m eval.data
stats`` list every rename. Other kinds (JSONL: predictions pair by id) still refuse
repeated ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class QuestionSlot:
    """One question of a split, in question-file order: what the value at ``position`` of
    a BIRD predict file answers."""

    position: int
    id: str  # the example id (renamed when the file repeats it)
    original_id: str  # the id as the file writes it
    db_id: str


@dataclass(frozen=True)
class RenamedId:
    """A question whose id repeats an earlier question's, and the id it was given."""

    original: str
    new: str
    where: str  # "file[index]" of the renamed question
    first: str  # "file[index]" of the question that kept the id


def renamed_id(original: str, position: int) -> str:
    """The id a repeated question gets: ``renamed_id("137", 487) == "137@487"``."""
    return f"{original}@{position}"


def describe_renames(renamed: Sequence[RenamedId], sep: str = "; ") -> str:
    """Each rename and where both questions are, for the loader's warning and the data card."""
    return sep.join(f"{r.original} -> {r.new} ({r.where}; {r.original} stays {r.first})" for r in renamed)


def slots_in_order(ids_and_dbs: Sequence[tuple[str, str]]) -> list[QuestionSlot]:
    """Slots for a whole split given in file order as (example id, db_id) - what
    ``load_examples`` returns without a limit or dropped gold; a renamed id gives back
    the id the file writes."""
    slots = []
    for position, (qid, db_id) in enumerate(ids_and_dbs):
        suffix = renamed_id("", position)
        original = qid[: -len(suffix)] if qid.endswith(suffix) and len(qid) > len(suffix) else qid
        slots.append(QuestionSlot(position, qid, original, db_id))
    return slots
