"""The designs tests iterate over, taken from the design registry (never a hand-written list)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def registered_designs() -> list[str]:
    """Every registered design, an installed outside one included."""
    from agents.designs import list_designs

    return list_designs()


def project_designs() -> list[str]:
    """The registered designs that live in this repository (``designs/<name>/``): the ones
    with project test data (golden prompts, scripted turns, doctests)."""
    from agents.designs import get_design

    root = REPO / "designs"
    return [n for n in registered_designs() if Path(get_design(n).recipes).resolve().is_relative_to(root)]
