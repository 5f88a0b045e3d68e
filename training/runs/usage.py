"""What a command cost: wall time since it started and peak resident memory (RSS).

``training.run`` imports this module first, so ``STARTED`` is the command's start, before
torch and the model load. Peak memory is the kernel's high-water mark of this process or of
its largest finished child (a job's own subprocesses), whichever is larger.
"""

from __future__ import annotations

import sys
import time

STARTED = time.time()


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
