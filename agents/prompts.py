"""Prompt templates kept as text files beside the code that renders them (package data).

Each design keeps its templates in its own folder (``designs/<name>/prompts/<template>.txt``)
and renders them through ``Prompts(__package__)``. Templates use ``string.Template``
placeholders (``$question``, ``${schema}``) so literal braces in JSON examples need no
escaping. ``render`` fails loudly on a missing value: a prompt with a hole in it is a
programming error, not model text.
"""

from __future__ import annotations

import functools
from importlib import resources
from string import Template

from tools.errors import ConfigError


class Prompts:
    """The templates in ``<package>/<folder>/*.txt``."""

    def __init__(self, package: str, folder: str = "prompts") -> None:
        self.package, self.folder = package, folder

    @functools.cache  # noqa: B019  (one Prompts per design module, alive for the whole process)
    def template(self, name: str) -> Template:
        root = resources.files(self.package).joinpath(self.folder)
        path = root.joinpath(f"{name}.txt")
        if not path.is_file():
            available = sorted(p.name[:-4] for p in root.iterdir() if p.name.endswith(".txt"))
            raise ConfigError(
                f"no prompt template {name!r} in {self.package}/{self.folder}; available: {', '.join(available)}"
            )
        return Template(path.read_text(encoding="utf-8"))

    def render(self, name: str, **values: object) -> str:
        """Fill template ``name`` with ``values``; trailing whitespace is trimmed."""
        try:
            return self.template(name).substitute({k: str(v) for k, v in values.items()}).strip()
        except KeyError as exc:
            raise ConfigError(f"prompt template {name!r} needs a value for {exc.args[0]!r}") from None
