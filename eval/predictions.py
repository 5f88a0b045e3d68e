"""Reading a predictions file and pairing it with the benchmark's examples.

Two formats:
- JSONL, one object per line: ``{"question_id" (or "id"): ..., "db_id": ..., "sql": ...}``,
  paired by question id, never by position;
- BIRD's ``predict_dev.json`` / ``predict_mini_dev_*.json``: a JSON object
  ``{"0": "SELECT ...\\t----- bird -----\\tdb_id", ...}``, paired by position as BIRD's
  ``evaluation_ex.py`` pairs it: the i-th value answers the i-th question of the question
  file (its keys are not ids: MINIDEV's files are keyed 0..499, its question ids are not).
  A key must still be its position or the id of the question there, so a file written in
  another order (keys sorted as text, a subset) is an error instead of a silent
  misalignment; a repeated key is read as written (``json`` would keep only the last).

Each prediction's db_id must equal its question's (a mismatch means the file belongs to
another split or benchmark, and is an error naming the id, or the position, and both
db_ids). A BIRD file with more values than the question file has questions is an error;
with fewer, the questions past its end have no prediction. Questions without a prediction
are returned as missing, to be counted, never skipped.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from agents.types import Example
from eval.data.question_order import QuestionSlot, slots_in_order
from tools.errors import DataError

BIRD_SEPARATOR = "\t----- bird -----\t"


@dataclass(frozen=True)
class Prediction:
    """One predicted SQL for one question (``where`` says where it was read, for messages).

    ``position`` is set for BIRD's predict files (the value's index, what it pairs by;
    ``question_id`` is then the file's key until paired), None for JSONL (paired by id)."""

    question_id: str
    db_id: str
    sql: str
    where: str
    position: int | None = None


@dataclass(frozen=True)
class Pairing:
    """Predictions matched to examples: ``sql`` by example id (None = missing), and the
    ids of predictions that match no example (e.g. outside ``eval.limit``); ``notes`` say
    what else a user should know (a BIRD file shorter than the question file)."""

    sql: Mapping[str, str | None]
    missing: tuple[str, ...]
    unmatched: tuple[str, ...]
    notes: tuple[str, ...] = ()


def read_predictions(path: str | Path) -> list[Prediction]:
    """Read a JSONL or BIRD ``predict_*.json`` file; every problem is reported together."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise DataError(f"predictions={path}: no such file; pass the JSONL (or BIRD predict_dev.json) to evaluate")
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise DataError(f"predictions={path}: cannot read it ({err})") from err
    if _is_bird_dict(text):
        predictions, problems = _read_bird_dict(file, text)
    else:
        predictions, problems = _read_jsonl(file, text)
    seen: dict[str, str] = {}
    for p in predictions:
        if p.position is not None:
            continue  # paired by position: a repeated key is no conflict
        if p.question_id in seen:
            problems.append(
                f"{p.where}: question id {p.question_id!r} predicted twice (first at {seen[p.question_id]})"
            )
        seen.setdefault(p.question_id, p.where)
    if problems:
        head = "\n  ".join(problems[:20]) + (f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else "")
        raise DataError(f"predictions file {file} has {len(problems)} problem(s):\n  {head}")
    return predictions


def _is_bird_dict(text: str) -> bool:
    """BIRD's format is one JSON object whose values are all strings; JSONL is anything
    else (a one-line JSONL file is an object too, but its values are not all strings)."""
    if not text.lstrip().startswith("{"):
        return False
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return False  # several lines of objects: JSONL
    return isinstance(data, dict) and all(isinstance(v, str) for v in data.values())


def _read_jsonl(file: Path, text: str) -> tuple[list[Prediction], list[str]]:
    out: list[Prediction] = []
    problems: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{file.name}:{number}"
        try:
            item = json.loads(line)
        except json.JSONDecodeError as err:
            problems.append(f"{where}: not valid JSON ({err.msg})")
            continue
        if not isinstance(item, dict):
            problems.append(f"{where}: expected an object with question_id, db_id, sql")
            continue
        qid = item.get("question_id", item.get("id"))
        missing = [
            k
            for k, v in (("question_id (or id)", qid), ("db_id", item.get("db_id")), ("sql", item.get("sql")))
            if v is None
        ]
        if missing:
            problems.append(f"{where}: missing {', '.join(missing)} (each line needs question_id, db_id, sql)")
            continue
        if not isinstance(item["sql"], str):
            problems.append(f"{where}: sql must be a string, got {type(item['sql']).__name__}")
            continue
        out.append(Prediction(str(qid), str(item["db_id"]), item["sql"], where))
    return out, problems


def _read_bird_dict(file: Path, text: str) -> tuple[list[Prediction], list[str]]:
    pairs = json.loads(text, object_pairs_hook=list)  # every value in file order, repeated keys too
    out: list[Prediction] = []
    problems: list[str] = []
    for position, (key, value) in enumerate(pairs):
        where = f"{file.name}[{key!r}]"
        if not isinstance(value, str) or BIRD_SEPARATOR not in value:
            problems.append(
                f"{where}: expected 'SQL{BIRD_SEPARATOR.strip()!s}db_id' "
                f"(SQL, a tab, '----- bird -----', a tab, the db_id)"
            )
            continue
        sql, db_id = value.rsplit(BIRD_SEPARATOR, 1)
        out.append(Prediction(str(key), db_id.strip(), sql, where, position))
    return out, problems


def pair_predictions(
    examples: Sequence[Example], predictions: Sequence[Prediction], order: Sequence[QuestionSlot] | None = None
) -> Pairing:
    """Match predictions to examples and check each db_id: JSONL by id, BIRD's predict
    files by position in ``order`` (every question of the question file in file order,
    ``eval.data.loaders.load_split``; None: ``examples`` are the whole file in order).

    Raises ``DataError`` listing every db_id mismatch, when no prediction matches any
    example (the wrong split or benchmark), and for a BIRD file longer than the question
    file or not in its order.
    """
    notes: tuple[str, ...] = ()
    if predictions and predictions[0].position is not None:
        slots = list(order) if order is not None else slots_in_order([(e.id, e.db_id) for e in examples])
        predictions, notes = _by_position(predictions, slots)
    by_id = {p.question_id: p for p in predictions}
    mismatches = [
        f"question {ex.id}: the prediction ({by_id[ex.id].where}) is for db_id {by_id[ex.id].db_id!r} "
        f"but the question's db_id is {ex.db_id!r}"
        for ex in examples
        if ex.id in by_id and by_id[ex.id].db_id != ex.db_id
    ]
    if mismatches:
        head = "\n  ".join(mismatches[:20]) + (
            f"\n  ... and {len(mismatches) - 20} more" if len(mismatches) > 20 else ""
        )
        raise DataError(
            f"{len(mismatches)} prediction(s) name another database than their question "
            f"(is the file for another split or benchmark?):\n  {head}"
        )
    ids = {ex.id for ex in examples}
    if predictions and examples and not ids & set(by_id) and predictions[0].position is None:
        raise DataError(
            f"none of the {len(predictions)} predictions has the id of a question in the data "
            f"(prediction ids start {sorted(by_id)[:3]}, question ids {sorted(ids)[:3]}); "
            "check data=/data.eval_split and the file's question_id field"
        )
    sql = {ex.id: (by_id[ex.id].sql if ex.id in by_id else None) for ex in examples}
    return Pairing(
        sql=sql,
        missing=tuple(ex.id for ex in examples if ex.id not in by_id),
        unmatched=tuple(p.question_id for p in predictions if p.question_id not in ids),
        notes=notes,
    )


def _by_position(
    predictions: Sequence[Prediction], slots: Sequence[QuestionSlot]
) -> tuple[list[Prediction], tuple[str, ...]]:
    """The i-th prediction given the id of the i-th question, after checking the file fits
    the question file: not longer, keys in its order, the same db_id at every position."""
    if len(predictions) > len(slots):
        raise DataError(
            f"the predictions file has {len(predictions)} predictions but the question file has "
            f"{len(slots)} questions; BIRD's format pairs the i-th prediction with the i-th question, so the "
            "file is for another split or benchmark (check data.root and the split: data.split or data.eval_split)"
        )
    out_of_order, mismatches = [], []
    for p, slot in zip(predictions, slots, strict=False):
        if p.question_id not in (str(slot.position), slot.id, slot.original_id):
            out_of_order.append(
                f"position {slot.position}: key {p.question_id!r}, but the question there has id {slot.original_id}"
            )
        elif p.db_id != slot.db_id:
            mismatches.append(
                f"position {slot.position} (key {p.question_id!r}): the prediction is for db_id {p.db_id!r} but "
                f"question {slot.id} at that position of the question file is on db_id {slot.db_id!r}"
            )
    if out_of_order:
        raise DataError(
            "the predictions file is not in the question file's order: BIRD's evaluation pairs the i-th "
            f"value with the i-th question and ignores the keys, so {len(out_of_order)} value(s) would be scored "
            "against another question than their key names (keys sorted as text? a predict.json of an "
            "eval.limit run?); write the values in question-file order keyed 0..n-1, or pass JSONL "
            f"(question_id, db_id, sql; paired by id):\n  {_head(out_of_order)}"
        )
    if mismatches:
        raise DataError(
            f"{len(mismatches)} prediction(s) name another database than the question at their "
            f"position (is the file for another split or benchmark?):\n  {_head(mismatches)}"
        )
    paired = [replace(p, question_id=slot.id) for p, slot in zip(predictions, slots, strict=False)]
    notes: tuple[str, ...] = ()
    if len(predictions) < len(slots):
        notes = (
            f"the predictions file has {len(predictions)} predictions for the {len(slots)} questions of the "
            f"question file: positions {len(predictions)}..{len(slots) - 1} have none (missing where evaluated)",
        )
    return paired, notes


def _head(problems: Sequence[str]) -> str:
    more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
    return "\n  ".join(problems[:20]) + more
