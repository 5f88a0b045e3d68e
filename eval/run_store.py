"""The output directory of an evaluation: per-question records (JSONL, appended as they are
scored, so a killed run resumes), the settings they were made with, the summary and the
Markdown report.

Resuming: records already in ``records.jsonl`` are kept and their questions skipped. The
settings (mode, samples, temperature, model, recipe, data, predictions file) are stored
in ``run.json``; records made under other settings are never mixed in - that is an error
that names the differing settings and says how to start over. A line cut short by a kill
is dropped (and its question scored again).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tools.errors import ConfigError
from tools.files import atomic_write_text

RECORDS = "records.jsonl"
SETTINGS = "run.json"
SUMMARY = "summary.json"
REPORT = "report.md"


class RunStore:
    """Reads and appends the records of one evaluation output directory."""

    def __init__(self, out_dir: str | Path, settings: Mapping[str, Any], fresh: bool = False) -> None:
        self.dir = Path(out_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.records_path = self.dir / RECORDS
        settings_path = self.dir / SETTINGS
        if fresh:
            for name in (RECORDS, SETTINGS, SUMMARY, REPORT):
                (self.dir / name).unlink(missing_ok=True)
        if settings_path.is_file() and self.records_path.is_file():
            old = json.loads(settings_path.read_text(encoding="utf-8"))
            differ = sorted(k for k in set(old) | set(settings) if old.get(k) != settings.get(k))
            if differ:
                shown = "; ".join(f"{k}: {old.get(k)!r} -> {settings.get(k)!r}" for k in differ)
                raise ConfigError(
                    f"{self.dir} holds records made with other settings ({shown}); pass eval.fresh=true "
                    "to start over there, or eval.out_dir=<another directory>"
                )
        settings_path.write_text(json.dumps(dict(settings), indent=2, sort_keys=True), encoding="utf-8")
        self._records: dict[str, dict[str, Any]] = {}
        self.dropped_lines = 0
        self._load()

    def _load(self) -> None:
        """Read the records; a malformed line (a write cut by a kill) is dropped and the file
        rewritten without it, so appends never follow a broken line."""
        if not self.records_path.is_file():
            return
        good: list[str] = []
        for line in self.records_path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                self.dropped_lines += 1
                continue
            if not isinstance(record, dict) or "id" not in record:
                self.dropped_lines += 1
                continue
            self._records[str(record["id"])] = record
            good.append(line)
        if self.dropped_lines:
            atomic_write_text(self.records_path, "".join(g + "\n" for g in good))

    @property
    def done(self) -> set[str]:
        return set(self._records)

    def records(self, ids: Iterable[str]) -> list[dict[str, Any]]:
        """Records of ``ids`` that exist, in the order of ``ids``."""
        return [self._records[i] for i in ids if i in self._records]

    def append(self, records: Iterable[dict[str, Any]]) -> None:
        """Write records and flush them to disk before returning."""
        with open(self.records_path, "a", encoding="utf-8") as f:
            for record in records:
                f.write(json.dumps(record, sort_keys=True, default=str) + "\n")
                self._records[str(record["id"])] = record
            f.flush()
            os.fsync(f.fileno())

    def write(self, name: str, text: str) -> Path:
        return atomic_write_text(self.dir / name, text)
