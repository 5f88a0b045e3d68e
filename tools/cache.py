"""Where every package keeps its on-disk caches (indexes, profiles, minibird, models)."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "SQLAGENT_RL_CACHE"


def cache_root() -> Path:
    """``$SQLAGENT_RL_CACHE`` or ``~/.cache/sqlagent-rl``; created on first use."""
    root = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "sqlagent-rl")
    root.mkdir(parents=True, exist_ok=True)
    return root
