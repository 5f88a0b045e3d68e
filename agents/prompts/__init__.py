"""Prompt templates of the four designs, kept as text files (package data).

Templates use ``string.Template`` placeholders (``$question``, ``${schema}``) so literal
braces in JSON examples need no escaping. ``render`` fails loudly on a missing value:
a prompt with a hole in it is a programming error, not model text.
"""

from __future__ import annotations

import functools
from importlib import resources
from string import Template

from tools.errors import ConfigError


@functools.cache
def load_template(name: str) -> Template:
    """The template ``agents/prompts/<name>.txt``."""
    path = resources.files(__name__).joinpath(f"{name}.txt")
    if not path.is_file():
        available = sorted(p.name[:-4] for p in resources.files(__name__).iterdir() if p.name.endswith(".txt"))
        raise ConfigError(f"no prompt template {name!r}; available: {', '.join(available)}")
    return Template(path.read_text(encoding="utf-8"))


def render(name: str, **values: object) -> str:
    """Fill template ``name`` with ``values``; trailing whitespace is trimmed."""
    try:
        return load_template(name).substitute({k: str(v) for k, v in values.items()}).strip()
    except KeyError as exc:
        raise ConfigError(f"prompt template {name!r} needs a value for {exc.args[0]!r}") from None
