"""Human-facing numbers: fractions shown as percent with a % sign, everywhere."""

from __future__ import annotations


def pct(fraction: float | None, digits: int = 1) -> str:
    """A fraction as a percentage with its sign; ``n/a`` for None.

    >>> pct(0.375), pct(None), pct(1 / 3, 2)
    ('37.5%', 'n/a', '33.33%')
    """
    if fraction is None:
        return "n/a"
    return f"{100 * fraction:.{digits}f}%"
