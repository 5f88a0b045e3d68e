"""The thread count torch's own pool takes from an ``OMP_NUM_THREADS`` value."""

from __future__ import annotations


def outer_threads(value: str) -> int:
    """OpenMP's variable is a count or a nested list ("4,2": 4 threads, then 2 in each nested
    region); torch's pool takes the first level."""
    first = value.split(",", 1)[0].strip()
    if not first.isdigit() or int(first) < 1:
        raise ValueError(
            f"OMP_NUM_THREADS={value!r}: expected a thread count such as '2', or OpenMP's nested list such as '4,2'"
        )
    return int(first)
