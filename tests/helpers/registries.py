"""Registering plugins in a test without leaking them into the rest of the session.

A plugin module registers at import (``@register_metric(...)`` and friends). A test that
imports one would leave its names in the process-wide registries, and every later test
that lists registered names would see them. :func:`import_plugins` swaps each registry
for a copy holding the built-in entries, imports the plugin module afresh into those
copies, and ``monkeypatch`` puts the originals back when the test ends.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType
from typing import Any

import pytest

from tools.plugins import Registry

REGISTRIES = (
    "rex.scorer.METRICS",
    "training.algorithm.advantages.ESTIMATORS",
    "agents.registry.AGENTS",
    "agents.parsing.PARSERS",
    "training.supervised.demonstrations.SCRIPTS",
    "tools.explore.bm25.ENGINES",
)


def isolate_registry(monkeypatch: pytest.MonkeyPatch, target: str) -> Registry[Any]:
    """Replace the registry at ``module.NAME`` by a copy for the rest of the test."""
    module_name, attr = target.rsplit(".", 1)
    original: Registry[Any] = getattr(importlib.import_module(module_name), attr)
    copy: Registry[Any] = Registry(original.kind)
    for name in original.names():
        copy.register(name)(original.get(name))
    monkeypatch.setattr(f"{module_name}.{attr}", copy)
    return copy


def import_plugins(monkeypatch: pytest.MonkeyPatch, module: str) -> ModuleType:
    """Import ``module`` (whose decorators register plugins) into copies of every registry."""
    for target in REGISTRIES:
        isolate_registry(monkeypatch, target)
    monkeypatch.delitem(sys.modules, module, raising=False)  # import afresh: its decorators run again
    return importlib.import_module(module)
