"""Stage directories: append-only JSONL keyed records, an input fingerprint, a done marker.

Why this shape: a stage can be killed at any moment. Records are appended one line per
finished unit (a question's k samples, one trace) and flushed; a half-written last line
is ignored when read back. Keys make appends idempotent — a unit redone after a kill
cannot duplicate a record. ``fingerprint.json`` (written when the stage starts) says what
inputs the partial work belongs to: different inputs wipe the directory and start over.
``done.json`` (written last, atomically) marks a finished stage that is reused as long as
its fingerprint matches.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from tools.files import atomic_write_text

FINGERPRINT, DONE = "fingerprint.json", "done.json"
Say = Callable[[str], None]


def _canonical(value: Any) -> Any:
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def digest(value: Any) -> str:
    """A short stable hash of a JSON-able value (a fingerprint embedded in another)."""
    return hashlib.sha256(json.dumps(_canonical(value), sort_keys=True).encode()).hexdigest()[:16]


def write_json_atomic(path: Path, value: Any) -> None:
    atomic_write_text(path, json.dumps(value, indent=2, default=str))


class StageDir:
    """One stage's directory under the run directory."""

    def __init__(self, path: str | Path, fingerprint: Mapping[str, Any], say: Say = print) -> None:
        self.path = Path(path)
        self.fingerprint = _canonical(dict(fingerprint))
        self.say = say

    @property
    def name(self) -> str:
        return self.path.name

    def finished(self) -> dict[str, Any] | None:
        """The saved result when this stage finished with the same inputs."""
        done = self.path / DONE
        if not done.exists():
            return None
        record = json.loads(done.read_text())
        return record["result"] if record.get("fingerprint") == self.fingerprint else None

    def open(self) -> None:
        """Start or continue: keep partial work only when it was made from the same inputs."""
        mark = self.path / FINGERPRINT
        if self.path.exists():
            same = mark.exists() and json.loads(mark.read_text()) == self.fingerprint
            if not same:
                self.say(f"[{self.name}] inputs changed since the work in {self.path}: starting this stage over")
                shutil.rmtree(self.path)
        self.path.mkdir(parents=True, exist_ok=True)
        if not mark.exists():
            write_json_atomic(mark, self.fingerprint)
        (self.path / DONE).unlink(missing_ok=True)

    def finish(self, result: Mapping[str, Any]) -> dict[str, Any]:
        write_json_atomic(self.path / DONE, {"fingerprint": self.fingerprint, "result": dict(result)})
        return dict(result)

    def records(self, name: str, key: Callable[[dict[str, Any]], Any]) -> KeyedJsonl:
        return KeyedJsonl(self.path / name, key)


class KeyedJsonl:
    """An append-only JSONL file where each record's ``key`` appears at most once."""

    def __init__(self, path: Path, key: Callable[[dict[str, Any]], Any]) -> None:
        self.path, self.key = path, key
        self._rows: dict[Any, dict[str, Any]] = {}
        if path.exists():
            with open(path, encoding="utf-8") as f:
                for line in f:
                    try:
                        row = json.loads(line)
                    except json.JSONDecodeError:  # a line cut by a kill: that unit is redone
                        continue
                    self._rows.setdefault(self.key(row), row)

    def __contains__(self, key: Any) -> bool:
        return key in self._rows

    def __len__(self) -> int:
        return len(self._rows)

    def rows(self) -> list[dict[str, Any]]:
        return list(self._rows.values())

    def append(self, rows: Iterable[dict[str, Any]]) -> int:
        """Append the rows whose key is new; returns how many were written."""
        new = []
        for row in rows:
            k = self.key(row)
            if k not in self._rows:
                self._rows[k] = row
                new.append(row)
        if new:
            self._rewrite_if_torn()
            with open(self.path, "a", encoding="utf-8") as f:
                f.write("".join(json.dumps(r, default=str) + "\n" for r in new))
                f.flush()
                os.fsync(f.fileno())
        return len(new)

    def _rewrite_if_torn(self) -> None:
        """A kill can leave a last line without its newline: end it before appending."""
        if self.path.exists() and self.path.stat().st_size:
            with open(self.path, "rb+") as f:
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    f.write(b"\n")
