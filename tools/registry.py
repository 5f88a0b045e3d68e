"""One registry idiom for every extension point (agents, rewards, tools, engines).

Modelled on veRL's ``core_algos.register_adv_est``: a module-level dict per kind, a
decorator that registers by name, and a lookup that fails with the registered names and a
"did you mean" hint.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from tools.errors import UnknownNameError

T = TypeVar("T")


class Registry(Generic[T]):
    """A named collection of plugins of one kind (``kind`` appears in error messages)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

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
        try:
            return self._items[name]
        except KeyError:
            raise UnknownNameError(self.kind, name, sorted(self._items)) from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())


def _qualname(obj: object) -> str:
    module = getattr(obj, "__module__", "?")
    return f"{module}.{getattr(obj, '__qualname__', repr(obj))}"
