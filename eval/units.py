"""One unit convention for every number a person reads.

Accuracies (EX, REX, QATCH, pass@k, shares of executable answers) are stored as
fractions in [0, 1] in every machine-readable record (``summary.json``,
``metrics.jsonl``, ``records.jsonl``) and shown as percent with a ``%`` sign wherever a
person reads them (console lines, ``report.md``, the training summary line, README
tables, ``eval.compare``'s tables and plot axes). Format them with :func:`pct` only, so
the two never mix.
"""

from __future__ import annotations

import math

PERCENT_LABEL = "%"


def pct(fraction: float | None, digits: int = 1) -> str:
    """A fraction in [0, 1] as a labelled percentage; ``None`` / NaN as ``n/a``.

    >>> pct(0.375)
    '37.5%'
    >>> pct(1.0, digits=0)
    '100%'
    >>> pct(None)
    'n/a'
    """
    if fraction is None or (isinstance(fraction, float) and math.isnan(fraction)):
        return "n/a"
    return f"{100.0 * float(fraction):.{digits}f}%"
