"""Plugins: the one registry idiom every extension point uses, and the plugins that installed
packages announce through an entry-point group.

``Registry(kind)`` is modelled on veRL's ``core_algos.register_adv_est``: a module-level
registry per kind, a decorator that registers by name, and a lookup that fails with the
registered names and a "did you mean" hint.

A design (``sqlagent_rl.designs``) is found the way veRL finds its plugins: the package that
holds it declares an entry point in its ``pyproject.toml``, and importing the entry point's
object registers everything the design brings (agent, reward, tools, presets, script). The
project's own designs are registered exactly so. Registries that plugins fill
(``tools.plugins.Registry(kind, plugins=GROUP)``) load the group before each lookup, so a
design is usable wherever its names are asked for - in this process, in a Ray worker, in a
subprocess - without anyone importing it by hand.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from importlib import metadata
from typing import Any, Generic, TypeVar

from tools.errors import ConfigError, UnknownNameError

DESIGN_GROUP = "sqlagent_rl.designs"
"""The entry-point group of designs: ``name = "package.module:design"`` (an ``agents.designs.Design``)."""

_loaded: dict[str, dict[str, Any]] = {}
_loading: set[str] = set()
_lock = threading.RLock()


def entry_points(group: str) -> list[metadata.EntryPoint]:
    """The installed entry points of ``group``, sorted by name (a stable load order)."""
    return sorted(metadata.entry_points(group=group), key=lambda ep: ep.name)


def load_plugins(group: str) -> dict[str, Any]:
    """Import every entry point of ``group`` once; entry-point name -> the loaded object.

    A lookup made while the group is still loading (a plugin module asking a registry for a
    name at import time) sees what is registered so far instead of loading again.
    """
    with _lock:
        if group in _loaded:
            return _loaded[group]
        if group in _loading:
            return {}
        _loading.add(group)
        try:
            loaded = {ep.name: _load(ep, group) for ep in entry_points(group)}
        finally:
            _loading.discard(group)
        _loaded[group] = loaded
        return loaded


def forget_plugins(group: str) -> None:
    """Load ``group`` afresh at the next lookup (after a package was installed or removed)."""
    with _lock:
        _loaded.pop(group, None)


def _load(ep: metadata.EntryPoint, group: str) -> Any:
    try:
        return ep.load()
    except Exception as err:
        dist = getattr(ep, "dist", None)
        where = f" (distribution {dist.name})" if dist is not None else ""
        raise ConfigError(
            f"plugin {ep.name!r} = {ep.value!r} of entry-point group {group!r}{where} failed to load: "
            f"{type(err).__name__}: {err}. Fix that package, or uninstall it"
        ) from err


# ----------------------------------------------------------------------------- the registry idiom

T = TypeVar("T")


class Registry(Generic[T]):
    """A named collection of plugins of one kind (``kind`` appears in error messages)."""

    def __init__(self, kind: str, plugins: str | None = None) -> None:
        self.kind = kind
        self.plugins = plugins
        self._items: dict[str, T] = {}

    def _load_plugins(self) -> None:
        if self.plugins is not None:
            load_plugins(self.plugins)

    def register(self, name: str, replace: bool = False) -> Callable[[T], T]:
        """Decorator: ``@registry.register("name")``. Re-registering a name with a
        different object is an error (two plugins fighting over one name) unless
        ``replace=True`` says the new one is meant to take the name over. The same
        object (or one with the same qualified name: a reloaded module) may register again."""

        def decorator(obj: T) -> T:
            existing = self._items.get(name)
            if not replace and existing is not None and existing is not obj and _qualname(existing) != _qualname(obj):
                raise ValueError(
                    f"{self.kind} {name!r} is already registered to {_qualname(existing)}; "
                    f"pick another name for {_qualname(obj)}, or pass replace=True to take it over"
                )
            self._items[name] = obj
            return obj

        return decorator

    def get(self, name: str) -> T:
        self._load_plugins()
        try:
            return self._items[name]
        except KeyError:
            raise UnknownNameError(self.kind, name, sorted(self._items), self._missing_plugins_note()) from None

    __getitem__ = get

    def _missing_plugins_note(self) -> str:
        if self.plugins is None or entry_points(self.plugins):
            return ""
        return (
            f" (no package announces entry-point group {self.plugins!r}: install the project, "
            "`pip install -e .`, so that its designs are registered)"
        )

    def names(self) -> list[str]:
        self._load_plugins()
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        self._load_plugins()
        return name in self._items

    def items(self) -> list[tuple[str, T]]:
        """``(name, object)`` pairs, sorted by name."""
        return [(name, self._items[name]) for name in self.names()]

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())


def _qualname(obj: object) -> str:
    module = getattr(obj, "__module__", "?")
    return f"{module}.{getattr(obj, '__qualname__', repr(obj))}"
