"""The design registry: one ``Design`` per published (or your own) text-to-SQL RL design.

A design is one plugin: a package (``designs/<name>/`` here, or any installed package) that
holds its agent, prompts, reward, executor preset and tools, demonstration script, Hydra
recipe files and its document, and announces itself through the entry-point group
``sqlagent_rl.designs`` (``tools.plugins.DESIGN_GROUP``)::

    [project.entry-points."sqlagent_rl.designs"]
    retoolsql = "designs.retoolsql:design"

Importing the entry point's module registers the design's agent, reward, tools and script
in their registries; the object it names is the ``Design`` record below, which says where
the recipes and the document are. Every registry the design fills loads the group before a
lookup, so ``recipe=<name>``, ``agent=<name>`` and veRL's Ray workers find it without any
import by hand (docs/writing_a_design.md shows a complete outside design).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from agents.types import EpisodeResult, SchemaSelection
from tools.errors import ConfigError
from tools.plugins import DESIGN_GROUP, Registry, load_plugins

CHAINS = ("mine", "annotate")
"""The supervised chains a design can follow (``training.supervised``)."""

LinkedSchemaReader = Callable[[Sequence[EpisodeResult]], SchemaSelection | None]
"""A design's hook that reads the schema its linking step selected from the episodes of one
request (their ``EpisodeResult``s, in order); None when that step selected nothing."""


@dataclass(frozen=True)
class EpisodeSchema:
    """The ``LinkedSchemaReader`` most designs need: the ``EpisodeResult.schema`` of the
    request's first episode of role ``role`` (a plain, picklable object, so the record
    travels to worker processes).

    >>> EpisodeSchema("linker")([EpisodeResult("linker", None, SchemaSelection(("t",)), [], "answer")]).tables
    ('t',)
    """

    role: str = "agent"

    def __call__(self, results: Sequence[EpisodeResult]) -> SchemaSelection | None:
        return next((r.schema for r in results if r.role == self.role), None)


@dataclass(frozen=True)
class Design:
    """What the toolkit needs to know about a design besides its registered pieces.

    ``name`` is the recipe name (``recipe=<name>``); ``agent`` and ``reward`` name the
    registered agent and reward its recipe selects; ``recipes`` is a directory of Hydra
    config groups (``recipe/<name>.yaml`` and the group files the recipe picks), put on the
    search path of every command; ``document`` is the design's page (paper, settings,
    choices, departures); ``supervised_chain`` is what ``supervised.chain=auto`` runs
    (``mine``: the policy's pass@k traces plus a privileged teacher; ``annotate``: teachers
    on the given questions). ``linked_schema`` is the design's schema-linking hook: how to
    read the schema its linking step selected from one request's episodes
    (``EpisodeSchema(role)`` reads an episode's ``EpisodeResult.schema``); evaluation scores
    it against the gold schema (docs/evaluation.md "Schema linking"). None: the design
    has no linking step, and evaluation reports no linking figures for it.
    """

    name: str
    title: str
    paper: str
    arxiv: str
    agent: str
    reward: str
    recipes: Path
    document: Path
    supervised_chain: str = "annotate"
    linked_schema: LinkedSchemaReader | None = None

    def __post_init__(self) -> None:
        if self.supervised_chain not in CHAINS:
            raise ConfigError(
                f"design {self.name!r}: supervised_chain={self.supervised_chain!r}; use one of {', '.join(CHAINS)}"
            )
        if self.linked_schema is not None and not callable(self.linked_schema):
            raise ConfigError(
                f"design {self.name!r}: linked_schema={self.linked_schema!r} is not callable; give a function of "
                "the request's EpisodeResults (e.g. agents.designs.EpisodeSchema('agent')) or None"
            )
        if not (Path(self.recipes) / "recipe" / f"{self.name}.yaml").is_file():
            raise ConfigError(
                f"design {self.name!r}: no recipe file {Path(self.recipes) / 'recipe' / (self.name + '.yaml')}; "
                "a design's recipes directory holds recipe/<name>.yaml"
            )


DESIGNS: Registry[Design] = Registry("design", plugins=DESIGN_GROUP)
"""Filled from the entry points by ``get_design`` / ``list_designs``."""


def register_design(design: Design) -> Design:
    """Register ``design`` under its name (an entry point's object is registered for you)."""
    return DESIGNS.register(design.name)(design)


def get_design(name: str) -> Design:
    """The design registered as ``name`` (``UnknownNameError`` lists the names)."""
    _register_entry_points()
    return DESIGNS.get(name)


def list_designs() -> list[str]:
    """The registered design names, sorted."""
    _register_entry_points()
    return DESIGNS.names()


def design_of_agent(agent_name: str) -> Design | None:
    """The design whose recipe uses agent ``agent_name`` (None for an agent no design names)."""
    found = [get_design(n) for n in list_designs() if get_design(n).agent == agent_name]
    return found[0] if found else None


def linked_schema_reader(agent_name: str) -> LinkedSchemaReader | None:
    """The schema-linking hook of the design whose recipe uses agent ``agent_name`` (None: no
    such design, or a design without a linking step)."""
    design = design_of_agent(agent_name)
    return design.linked_schema if design is not None else None


def _register_entry_points() -> None:
    """Register every entry point's ``Design`` (its module has registered the rest)."""
    for ep_name, design in load_plugins(DESIGN_GROUP).items():
        if not isinstance(design, Design):
            raise ConfigError(
                f"entry point {ep_name!r} of {DESIGN_GROUP!r} names a {type(design).__name__}, not an "
                "agents.designs.Design; point it at the module's Design object (package.module:design)"
            )
        if design.name != ep_name:
            raise ConfigError(
                f"entry point {ep_name!r} of {DESIGN_GROUP!r} names design {design.name!r}; "
                "give the entry point the design's name"
            )
        register_design(design)  # the same object registers again harmlessly
