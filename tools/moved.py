"""Old import paths of public modules that moved, kept working: ``import training.advantages``
gives the module now at ``training.algorithm.advantages`` (the same module object, so
registries and ``isinstance`` checks are shared), with a ``DeprecationWarning`` naming the
new path. Each package lists its moved public modules (the README's changelog lists them too)
and installs them from its ``__init__``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from collections.abc import Mapping
from types import ModuleType


class _MovedModuleLoader(importlib.abc.Loader):
    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warnings.warn(f"{self.old} moved to {self.new}; import it from there", DeprecationWarning, stacklevel=2)
        return importlib.import_module(self.new)

    def exec_module(self, module: ModuleType) -> None:
        """The module already ran under its new name."""


class _MovedModuleFinder(importlib.abc.MetaPathFinder):
    def __init__(self) -> None:
        self.moved: dict[str, str] = {}

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        new = self.moved.get(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _MovedModuleLoader(fullname, new))


_FINDER = _MovedModuleFinder()


def install_moved_modules(moved: Mapping[str, str]) -> None:
    """Resolve each old module path in ``moved`` to its new one from now on."""
    _FINDER.moved.update(moved)
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
