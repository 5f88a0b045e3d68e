"""A list of question ids that narrows a split (``data.train_ids``): the RL filter of the
supervised stages writes one, and users can write their own.

The file is JSON: a list of ids, or ``{"ids": [...]}`` (the form the RL filter writes, with
its counts beside them). Examples keep the split's order; every id must be in the split.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from agents.types import Example
from tools.errors import ConfigError


def read_ids(path: str | Path, key: str = "data.train_ids") -> list[str]:
    """The ids in ``path``, refusing an unreadable, malformed or empty file by name."""
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise ConfigError(f"{key}={path}: cannot read a JSON list of question ids ({err})") from err
    ids = raw.get("ids") if isinstance(raw, dict) else raw
    if not isinstance(ids, list) or not all(isinstance(i, (str, int)) for i in ids):
        raise ConfigError(f'{key}={path}: expected a JSON list of question ids or {{"ids": [...]}}')
    if not ids:
        raise ConfigError(f"{key}={path} lists no question: nothing to train on (remove {key} to use the split)")
    return [str(i) for i in ids]


def keep_ids(examples: Sequence[Example], path: str | Path, key: str = "data.train_ids") -> list[Example]:
    """The examples whose id ``path`` lists, in the split's order; an id not in the split is
    an error (a file from another dataset or split), naming a few of them."""
    wanted = read_ids(path, key)
    known = {ex.id for ex in examples}
    missing = [i for i in wanted if i not in known]
    if missing:
        raise ConfigError(
            f"{key}={path}: {len(missing)} of its {len(wanted)} ids are not in this split (e.g. "
            f"{', '.join(missing[:3])}): it was written for another dataset or split; check data.kind/split/root"
        )
    chosen = set(wanted)
    return [ex for ex in examples if ex.id in chosen]
