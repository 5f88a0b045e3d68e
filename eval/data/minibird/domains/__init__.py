"""The minibird databases: six train domains and two dev domains, disjoint by db_id."""

from __future__ import annotations

import importlib

from eval.data.minibird.spec import Domain

_MODULES = ("schools", "retail", "football", "flights", "library", "banking", "clinic", "movies")


def all_domains() -> tuple[Domain, ...]:
    """Every domain in a fixed order (train first, then dev)."""
    return tuple(importlib.import_module(f"{__name__}.{m}").DOMAIN for m in _MODULES)
