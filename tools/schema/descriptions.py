"""BIRD's column descriptions: the per-table CSV files beside a database
(``database_description/<table>.csv``), read whatever their encoding, and their content hash
(part of a profile's cache key)."""

from __future__ import annotations

import csv
import hashlib
import io
import re
from pathlib import Path

DESCRIPTION_ENCODINGS = ("utf-8-sig", "cp1252", "latin-1")
DESCRIPTION_FIELDS = ("original_column_name", "column_name", "column_description", "data_format", "value_description")


def read_descriptions(folder: Path) -> dict[str, dict[str, dict[str, str]]]:
    """``{table_lower: {original_column_lower: {field: text}}}`` from BIRD's
    ``database_description/*.csv`` (missing folder -> empty). Encodings vary across BIRD
    files, so each file is decoded with the first of utf-8(-sig), cp1252, latin-1 that
    works; unknown or missing columns in a file are tolerated."""
    if not folder.is_dir():
        return {}
    out: dict[str, dict[str, dict[str, str]]] = {}
    for path in sorted(folder.glob("*.csv")):
        rows = _read_description_csv(path)
        if rows:
            out[path.stem.strip().lower()] = rows
    return out


def decode_tolerant(data: bytes) -> str:
    """Decode bytes whose encoding is unknown: utf-8 (with or without BOM), then cp1252,
    then latin-1 (which never fails)."""
    for encoding in DESCRIPTION_ENCODINGS:
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            continue
    return data.decode("latin-1")


def _read_description_csv(path: Path) -> dict[str, dict[str, str]]:
    text = decode_tolerant(path.read_bytes())
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if not header:
        return {}
    keys = [_norm_header(h) for h in header]
    rows: dict[str, dict[str, str]] = {}
    for raw in reader:
        # zip(strict=False): description CSV rows may be ragged
        record = {k: _clean(v) for k, v in zip(keys, raw, strict=False) if k in DESCRIPTION_FIELDS}
        original = record.get("original_column_name", "")
        if original:
            rows[original.lower()] = record
    return rows


def _norm_header(name: str) -> str:
    return re.sub(r"\s+", "_", name.strip().lstrip("\ufeff").lower())


def _clean(value: str) -> str:
    return re.sub(r"\s+", " ", value).strip()


def descriptions_hash(db_path: Path) -> str:
    folder = db_path.parent / "database_description"
    if not folder.is_dir():
        return "none"
    digest = hashlib.sha256()
    for path in sorted(folder.glob("*.csv")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()
