"""What a command cost: wall time since it started and peak resident memory (RSS).

``training.run`` imports this module first, so ``STARTED`` is the command's start, before
torch and the model load. Peak memory is the kernel's high-water mark of this process or of
its largest finished child (a job's own subprocesses), whichever is larger.

``training.run`` also calls :func:`bound_heap_growth` first thing, before torch allocates
anything.
"""

from __future__ import annotations

import functools
import sys
import time
from typing import Any

STARTED = time.time()

MMAP_THRESHOLD_BYTES = 4 * 1024 * 1024
"""Allocations from this size up get their own mapping, returned to the system when freed.

glibc raises its threshold after each large free (up to 32 MiB), so a CPU training step's
activations and gradients (tensors of 4-30 MiB) end up in the heap, which fragments and
is never given back: two fwd+bwd+AdamW steps of SmolLM2-135M (with a bf16 generation copy
beside it) on one micro-batch of two 4,000-token rows with gradient checkpointing peaked at
5,449 MB with glibc's default and 3,691 MB with this fixed threshold (one core);
``benchmarks/bench_update_memory.py`` runs the same comparison with the laptop's one row per
micro-batch."""


def bound_heap_growth(threshold: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Fix glibc's mmap threshold (``mallopt(M_MMAP_THRESHOLD)``, which also stops its
    dynamic growth); False where the C library is not glibc (macOS, musl, Windows)."""
    mallopt = _glibc("mallopt")
    m_mmap_threshold = -3  # <malloc.h>
    return mallopt is not None and bool(mallopt(m_mmap_threshold, threshold))


def release_free_memory() -> None:
    """Give the heap's free pages back to the system (glibc's ``malloc_trim(0)``; nothing
    elsewhere). Called after each generate call and each micro-batch's backward on the local
    engine: a CPU step's small tensors (under the mmap threshold) leave free chunks spread
    through the heap that RSS keeps counting; on a TRUST-SQL warm start, 0.9 of 4.7 GB."""
    trim = _glibc("malloc_trim")
    if trim is not None:
        trim(0)


@functools.cache
def _glibc(name: str) -> Any:
    """The C library's function ``name`` on Linux (looked up once), None where it has none."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes
    import ctypes.util

    try:
        return getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), name)
    except (OSError, AttributeError):  # no such library or function (musl has no malloc_trim)
        return None


def peak_rss_bytes() -> int | None:
    """The peak resident set size so far; None where the platform reports none."""
    own = _own_peak_linux()
    try:
        import resource
    except ImportError:  # Windows
        return own
    scale = 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB on Linux
    if own is None:
        own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale
    return max(own, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * scale)


def _own_peak_linux() -> int | None:
    """``VmHWM`` of /proc/self/status: this program's own high-water mark (``getrusage``'s
    is carried over from the parent through fork and exec, so a job started by a large
    process would report that process's peak)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def process_usage() -> dict[str, float | int | None]:
    """``{"wall_seconds": ..., "peak_rss_bytes": ...}`` of this command so far."""
    return {"wall_seconds": round(time.time() - STARTED, 1), "peak_rss_bytes": peak_rss_bytes()}
