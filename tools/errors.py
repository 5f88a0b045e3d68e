"""The package's one exception hierarchy. Messages say what was wrong and how to fix it.

Model text never raises: tools return structured ``ToolError`` values and agents return
format failures. These exceptions are for programmer and user input (config, data layout,
paths), where failing loudly is right.
"""

from __future__ import annotations

from tools.spelling import did_you_mean


class ToolkitError(Exception):
    """Base class of every error this project raises on purpose."""


class ConfigError(ToolkitError, ValueError):
    """A configuration value is invalid; the message names the key and a valid value."""


class DataError(ToolkitError, ValueError):
    """A dataset or database layout problem; the message names the path and example id."""


class UnknownNameError(ToolkitError, ValueError):
    """A registry lookup missed: lists the registered names and the closest one."""

    def __init__(self, kind: str, name: str, registered: list[str], note: str = "") -> None:
        self.kind, self.name, self.registered = kind, name, registered
        hint = did_you_mean(name, registered)  # "; did you mean 'x'?" or ""
        super().__init__(
            f"unknown {kind} {name!r}{hint or ';'} registered {kind}s: {', '.join(registered) or '(none)'}{note}"
        )


class RunDirInUseError(ToolkitError):
    """Another live process writes the run (or evaluation output) directory: the message names
    it (host, pid, command, start) and how to proceed (tools/run_lock.py)."""


class DiskFullError(ToolkitError, OSError):
    """A write found its disk full (or the user's quota spent): the message names the
    directory, the bytes free there and the bytes the write needed, and says where to make
    room. An ``OSError`` too, so code that already tolerated a failed write still does."""

    def __init__(self, message: str, directory: str = "", free: int | None = None, needed: int | None = None) -> None:
        super().__init__(message)
        self.directory, self.free, self.needed = directory, free, needed
