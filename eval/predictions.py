"""Reading a predictions file and pairing it with the benchmark's examples.

Two formats:
- JSONL, one object per line: ``{"question_id" (or "id"): ..., "db_id": ..., "sql": ...}``;
- BIRD's official ``predict_dev.json``: a JSON object
  ``{"0": "SELECT ...\\t----- bird -----\\tdb_id", ...}`` keyed by question id.

Pairing is by question id, never by position; each prediction's db_id must equal its
question's (a mismatch means the file belongs to another split or benchmark, and is an
error naming the id and both db_ids). Questions without a prediction are returned as
missing, to be counted, never skipped.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from agents.types import Example
from tools.errors import DataError

BIRD_SEPARATOR = "\t----- bird -----\t"


@dataclass(frozen=True)
class Prediction:
    """One predicted SQL for one question (``where`` says where it was read, for messages)."""

    question_id: str
    db_id: str
    sql: str
    where: str


@dataclass(frozen=True)
class Pairing:
    """Predictions matched to examples: ``sql`` by example id (None = missing), and the
    ids of predictions that match no example (e.g. outside ``eval.limit``)."""

    sql: Mapping[str, str | None]
    missing: tuple[str, ...]
    unmatched: tuple[str, ...]


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
    data = json.loads(text)
    out: list[Prediction] = []
    problems: list[str] = []
    for key, value in data.items():
        where = f"{file.name}[{key!r}]"
        if not isinstance(value, str) or BIRD_SEPARATOR not in value:
            problems.append(
                f"{where}: expected 'SQL{BIRD_SEPARATOR.strip()!s}db_id' "
                f"(SQL, a tab, '----- bird -----', a tab, the db_id)"
            )
            continue
        sql, db_id = value.rsplit(BIRD_SEPARATOR, 1)
        out.append(Prediction(str(key), db_id.strip(), sql, where))
    return out, problems


def pair_predictions(examples: Sequence[Example], predictions: Sequence[Prediction]) -> Pairing:
    """Match predictions to examples by id and check each db_id.

    Raises ``DataError`` listing every db_id mismatch, and when no prediction matches any
    example (the wrong split or benchmark).
    """
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
    if predictions and examples and not ids & set(by_id):
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
    )
