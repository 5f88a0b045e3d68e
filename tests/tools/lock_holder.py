"""A real process holding a run directory's lock, for the lock tests of every package.

``python -m tests.tools.lock_holder <dir>`` takes the lock through ``hold_run_dir`` (the
function the commands use), prints ``held``, and keeps it until its stdin closes.
``start_holder`` starts one and returns once it holds the lock.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def start_holder(directory: Path, *args: str) -> subprocess.Popen:
    """A child holding ``directory``'s lock (``args`` go to its command line, shown in refusals)."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.tools.lock_holder", str(directory), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line.strip() != "held":
        proc.kill()
        raise AssertionError(f"the holder did not take the lock: {line!r} {proc.stderr.read() if proc.stderr else ''}")
    return proc


def stop_holder(proc: subprocess.Popen) -> int:
    """Let the holder release its lock and exit; its exit status."""
    if proc.poll() is None:
        proc.communicate(timeout=30)
    return proc.wait(timeout=30)


def lock_owner(directory: Path) -> int:
    """The pid recorded in ``directory``'s lock file."""
    return int(json.loads((directory / "run.lock").read_text())["pid"])


def main() -> None:
    from tools.run_lock import hold_run_dir

    with hold_run_dir(sys.argv[1]):
        print("held", flush=True)
        sys.stdin.read()  # until the test closes stdin (or kills this process)


if __name__ == "__main__":
    main()
