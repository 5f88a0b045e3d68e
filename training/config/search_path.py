"""The designs' recipe files on Hydra's config search path, and the recipes that gives.

``recipes/`` (the package) holds the shared config: ``config.yaml`` and the groups every
design uses. Each registered design (``agents.designs``) brings a ``recipes`` directory of
its own: ``recipe/<name>.yaml`` and the group files that recipe selects (its agent, reward,
advantage). ``use_design_recipes()`` registers a Hydra ``SearchPathPlugin`` that appends
every design's directory after ``pkg://recipes``, so ``recipe=<name>`` finds an outside
design's recipe exactly as the project's own, and a design cannot shadow a shared file.
Every command calls it before Hydra composes (``training.config.command.hydra_entry``);
so do tests and tools that compose with Hydra's ``compose`` API.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from hydra.core.config_search_path import ConfigSearchPath
from hydra.core.plugins import Plugins
from hydra.plugins.search_path_plugin import SearchPathPlugin

RECIPE_GROUP = "recipe"
PROJECT_CONFIG = "pkg://recipes"


def design_recipe_dirs() -> list[tuple[str, Path]]:
    """``(design name, recipes directory)`` of every registered design, by name."""
    from agents.designs import get_design, list_designs

    return [(name, Path(get_design(name).recipes)) for name in list_designs()]


class DesignRecipes(SearchPathPlugin):
    """Appends each registered design's recipes directory to Hydra's search path (only when
    the project's own config is being composed: veRL's configs compose untouched)."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        if not any(element.path == PROJECT_CONFIG for element in search_path.get_path()):
            return
        for name, folder in design_recipe_dirs():
            search_path.append(provider=f"sqlagent-design-{name}", path=f"file://{folder}")


def use_design_recipes() -> None:
    """Register ``DesignRecipes`` with Hydra (once per process)."""
    plugins = Plugins.instance()
    if DesignRecipes not in plugins.discover(SearchPathPlugin):
        plugins.register(DesignRecipes)


def group_options(group: str) -> list[str]:
    """The options of config group ``group`` (``<group>/*.yaml``) in the shared config and in
    every design's recipes directory, sorted."""
    shared = resources.files("recipes") / group
    folders = [Path(str(shared))] + [folder / group for _, folder in design_recipe_dirs()]
    return sorted({p.stem for folder in folders if folder.is_dir() for p in folder.glob("*.yaml")})


def list_recipes() -> list[str]:
    """Every recipe ``recipe=<name>`` can pick, sorted."""
    return group_options(RECIPE_GROUP)


def compose_tree(config_name: str = "config", overrides: Sequence[str] = ()) -> dict[str, Any]:
    """The composed, resolved config tree of ``recipes/<config_name>.yaml`` with ``overrides``,
    the designs' recipes on the search path: what a command sees, without running it (tests,
    benchmarks, ``python -m eval.data stats``). Hydra's global state is restored afterwards."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    use_design_recipes()
    was_initialized = GlobalHydra.instance().is_initialized()
    if was_initialized:
        from hydra.initialize import get_gh_backup, restore_gh_from_backup

        backup = get_gh_backup()
        GlobalHydra.instance().clear()
    try:
        with initialize_config_module(PROJECT_CONFIG.removeprefix("pkg://"), version_base=None):
            tree = OmegaConf.to_container(compose(config_name, overrides=list(overrides)), resolve=True)
    finally:
        if was_initialized:
            restore_gh_from_backup(backup)
    return tree  # type: ignore[return-value]
