"""One writer per run directory: ``with hold_run_dir(run_dir):`` around everything a run
writes there (``training.run``'s run_dir, ``eval.run``'s ``eval.out_dir``).

The lock is the file ``<dir>/run.lock``, created with ``O_CREAT | O_EXCL`` (atomic on local
disks and on NFSv3+ and Lustre), holding JSON: host, pid, start time, the command line,
the heartbeat interval, and the host's boot id and pid namespace (Linux) so that "the same
machine" is known exactly. Its modification time is the heartbeat: a daemon thread touches
it every ``SQLAGENT_RUN_LOCK_HEARTBEAT_S`` seconds (default 30). A touch never leaves a
half-written or temporary file beside the run's outputs, and on NFS the time is the
server's, so hosts compare it against one clock. Where the file system supports it the
holder also keeps an ``fcntl.flock`` on the file; that is extra evidence, never the only one
(NFS may keep flock local to a host, Lustre may not offer it).

A second process that finds the file decides:

- someone holds its flock: the holder is alive, refuse;
- the holder ran on this machine (same host, boot and pid namespace): its pid gone means
  dead; a live pid whose recorded flock is free means the pid was reused; else refuse;
- the holder ran on this host before a reboot (another boot id): dead;
- otherwise (another host or container): dead once the heartbeat is older than
  ``SQLAGENT_RUN_LOCK_STALE_S`` seconds (default 180: NFS may show a file's time up to a
  minute late; never less than 3 heartbeats of the holder), else refuse.

A refusal raises ``RunDirInUseError`` at once, naming the holder and how to proceed (the
commands print it and exit 2). A dead holder's lock is taken over with a printed message:
it is renamed aside (only one contender's rename succeeds), checked to be the file that
was judged (device, inode and contents: a freed inode is soon reused), and removed.
Released on any exit from the ``with`` block (the file removed, unless another process has
taken it over); a ``kill -9`` leaves it for the next run to judge as above. A process that
finds its lock removed or replaced says so on stderr.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shlex
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tools.errors import ConfigError, RunDirInUseError

try:
    import fcntl as _fcntl
except ImportError:  # no flock: the lock file and its heartbeat alone
    _fcntl = None  # type: ignore[assignment]

Say = Callable[[str], None]

LOCK_NAME = "run.lock"
HEARTBEAT_ENV, STALE_ENV = "SQLAGENT_RUN_LOCK_HEARTBEAT_S", "SQLAGENT_RUN_LOCK_STALE_S"
DEFAULT_HEARTBEAT_S, DEFAULT_STALE_S = 30.0, 180.0
UNREADABLE_WAIT_S = 2.0  # a holder writes its JSON right after creating the file
_BUSY = (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)

_HELD: dict[str, RunLock] = {}  # lock file (real path) -> this process's lock on it
_HELD_GUARD = threading.Lock()


@dataclass(frozen=True)
class Holder:
    """What a lock file says about the process that holds it."""

    host: str
    pid: int
    started: float
    command: str = ""
    heartbeat_s: float = DEFAULT_HEARTBEAT_S
    boot_id: str | None = None
    pid_space: str | None = None
    flock: bool = False

    @classmethod
    def parse(cls, text: str) -> Holder | None:
        try:
            data = json.loads(text)
            holder = cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})
        except (ValueError, TypeError):
            return None
        numbers = (holder.started, holder.heartbeat_s)
        valid = isinstance(holder.pid, int) and holder.pid > 0 and isinstance(holder.host, str)
        return holder if valid and all(isinstance(n, (int, float)) for n in numbers) else None

    def same_machine(self, other: Holder) -> bool:
        """Whether ``other``'s pid can be looked up here: same host, boot and pid namespace."""
        return (self.host, self.boot_id, self.pid_space) == (other.host, other.boot_id, other.pid_space)

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started))
        return f"process {self.pid} on {self.host} (started {when}: {self.command or 'command unknown'})"


@dataclass(frozen=True)
class _Seen:
    holder: Holder | None
    age_s: float  # seconds since the last heartbeat
    ident: tuple[int, int, str]  # which file was judged: device, inode (reused once freed) and text
    flock: str  # held | free | unknown


def _read_text(path: str) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def _pid_space() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def _seconds(env: str, default: float) -> float:
    text = os.environ.get(env, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ConfigError(f"{env}={text!r}: a positive number of seconds (default {default:g})")
    return value


def _probe_flock(fd: int) -> str:
    """Whether a process holds a flock on the open file (``held``), nobody does (``free``),
    or the file system cannot say (``unknown``)."""
    if _fcntl is None:
        return "unknown"
    try:
        _fcntl.flock(fd, _fcntl.LOCK_SH | _fcntl.LOCK_NB)  # shared: works on a read-only descriptor on NFS too
    except OSError as err:
        return "held" if err.errno in _BUSY else "unknown"
    _fcntl.flock(fd, _fcntl.LOCK_UN)
    return "free"


def _look(path: Path) -> _Seen | None:
    """Read the lock file as it is now; None when it vanished meanwhile."""
    deadline = time.monotonic() + UNREADABLE_WAIT_S
    while True:
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            return None
        try:
            st = os.fstat(fd)  # after open: NFS revalidates the attributes (close-to-open)
            text = os.read(fd, 1 << 16).decode("utf-8", "replace")
            holder = Holder.parse(text)
            if holder is not None or time.monotonic() > deadline:
                age = max(0.0, time.time() - st.st_mtime)
                return _Seen(holder, age, (st.st_dev, st.st_ino, text), _probe_flock(fd))
        finally:
            os.close(fd)
        time.sleep(0.1)


def _identity(path: Path) -> tuple[int, int, str]:
    st = os.stat(path)
    return st.st_dev, st.st_ino, path.read_text(encoding="utf-8", errors="replace")


def _remove_if_same(path: Path, ident: tuple[int, int, str]) -> bool:
    """Remove the lock file if it is still the one judged stale; False when another process
    got there first (it is then put back untouched)."""
    aside = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.stale")
    try:
        os.rename(path, aside)  # atomic: of two contenders only one moves the file
    except FileNotFoundError:
        return False
    if _identity(aside) != ident:  # a newer holder's file: put it back, never over another
        try:
            os.link(aside, path)
        except FileExistsError:
            pass  # a third process created one meanwhile; the moved holder hears of it at its next beat
        except OSError:  # no hard links on this file system
            if not path.exists():
                os.rename(aside, path)
        aside.unlink(missing_ok=True)
        return False
    os.unlink(aside)
    return True


class RunLock:
    """The lock on one directory; ``hold_run_dir`` is the usual way in. ``setting`` names the
    option that chose the directory (``run_dir``, ``eval.out_dir``) in messages."""

    def __init__(
        self,
        directory: str | Path,
        setting: str = "run_dir",
        say: Say = print,
        heartbeat_s: float | None = None,
        stale_after_s: float | None = None,
    ) -> None:
        self.dir, self.setting, self.say = Path(directory), setting, say
        self.path = self.dir / LOCK_NAME
        self.heartbeat_s = heartbeat_s or _seconds(HEARTBEAT_ENV, DEFAULT_HEARTBEAT_S)
        self.stale_after_s = stale_after_s or _seconds(STALE_ENV, DEFAULT_STALE_S)
        if self.stale_after_s <= 2 * self.heartbeat_s:
            raise ConfigError(
                f"{STALE_ENV}={self.stale_after_s:g} must exceed twice {HEARTBEAT_ENV}={self.heartbeat_s:g}, "
                "or a live run could be judged dead between two heartbeats"
            )
        self.lost = False  # set when another process removed or replaced the file
        self._fd: int | None = None
        self._ident = (0, 0)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def me(self, flock: bool = False) -> Holder:
        return Holder(
            host=socket.gethostname(),
            pid=os.getpid(),
            started=time.time(),
            command=shlex.join(getattr(sys, "orig_argv", sys.argv)),
            heartbeat_s=self.heartbeat_s,
            boot_id=_read_text("/proc/sys/kernel/random/boot_id"),
            pid_space=_pid_space(),
            flock=flock,
        )

    def acquire(self) -> RunLock:
        self.dir.mkdir(parents=True, exist_ok=True)
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
        for _ in range(5):
            try:
                fd = os.open(self.path, flags, 0o644)
            except FileExistsError:
                self._clear_if_stale()
                continue
            self._own(fd)
            return self
        raise RunDirInUseError(
            f"{self.path} was created again each time a stale one was removed: other processes are "
            f"starting in this {self.setting}; stop them, or pick another {self.setting}"
        )

    def _clear_if_stale(self) -> None:
        seen = _look(self.path)
        if seen is None:
            return
        why = self._why_stale(seen)
        if why is None:
            raise RunDirInUseError(self._refusal(seen))
        if _remove_if_same(self.path, seen.ident):
            holder = seen.holder.describe() if seen.holder else "an unreadable lock"
            self.say(f"[run lock] taking over {self.path} from {holder}: {why}")

    def _why_stale(self, seen: _Seen) -> str | None:
        """Why the holder is dead, or None while it may be alive."""
        if seen.flock == "held":
            return None
        stale_after = self.stale_after_s
        h, me = seen.holder, self.me()
        if h is None:
            return f"unreadable and untouched for {seen.age_s:.0f} s" if seen.age_s > stale_after else None
        if h.host == me.host and h.boot_id and me.boot_id and h.boot_id != me.boot_id:
            return f"{h.host} has restarted since"
        if h.same_machine(me):
            if h.pid == me.pid:
                return None if str(self.path.resolve()) in _HELD else "left by an earlier process with this pid"
            if not _pid_alive(h.pid):
                return f"process {h.pid} is gone"
            return "its pid now belongs to another process" if h.flock and seen.flock == "free" else None
        stale_after = max(stale_after, 3 * h.heartbeat_s)
        if seen.age_s > stale_after:
            return f"no heartbeat for {seen.age_s:.0f} s (dead after {stale_after:.0f} s, {STALE_ENV})"
        return None

    def _refusal(self, seen: _Seen) -> str:
        h = seen.holder
        if h is None:
            who, stop = f"{self.path} exists but cannot be read", ""
        else:
            who = f"{self.dir} is being written by {h.describe()}"
            stop = f"stop it (`kill {h.pid}` on {h.host}), "
        return (
            f"{who}; its last heartbeat was {seen.age_s:.0f} s ago. One process writes a {self.setting} at a time: "
            f"wait for that run to end, {stop}or pick another {self.setting}; if you are sure it is no longer "
            f"running, delete {self.path}"
        )

    def _own(self, fd: int) -> None:
        try:
            flocked = self._take_flock(fd)
            os.write(fd, (json.dumps(asdict(self.me(flocked))) + "\n").encode("utf-8"))
            os.fsync(fd)  # other NFS clients see the contents while the file stays open
            st = os.fstat(fd)
        except BaseException:
            os.close(fd)
            self.path.unlink(missing_ok=True)
            raise
        self._fd, self._ident = fd, (st.st_dev, st.st_ino)
        with _HELD_GUARD:
            _HELD[str(self.path.resolve())] = self
        self._stop.clear()
        self._thread = threading.Thread(target=self._beat, name=f"run-lock {self.dir}", daemon=True)
        self._thread.start()

    @staticmethod
    def _take_flock(fd: int) -> bool:
        if _fcntl is None:
            return False
        for _ in range(3):  # a contender may be probing this very file for a moment
            try:
                _fcntl.flock(fd, _fcntl.LOCK_EX | _fcntl.LOCK_NB)
                return True
            except OSError as err:
                if err.errno not in _BUSY:
                    return False  # not offered here (ENOLCK, EOPNOTSUPP): the file alone
            time.sleep(0.01)
        return False

    def _beat(self) -> None:
        fd = self._fd
        while not self._stop.wait(self.heartbeat_s):
            try:
                st = os.stat(self.path)
                if (st.st_dev, st.st_ino) != self._ident:
                    raise FileNotFoundError(self.path)
                os.utime(fd if os.utime in os.supports_fd and fd is not None else self.path)
            except FileNotFoundError:
                self.lost = True
                print(
                    f"[run lock] warning: {self.path} was removed or taken over by another process; this run "
                    f"is no longer the only writer of {self.dir}",
                    file=sys.stderr,
                )
                return
            except OSError:
                continue  # a passing file-system error: the next beat tries again

    def release(self) -> None:
        if self._fd is None:
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with contextlib.suppress(FileNotFoundError):
            st = os.stat(self.path)
            if (st.st_dev, st.st_ino) == self._ident:  # never another process's lock
                os.unlink(self.path)
        os.close(self._fd)
        self._fd = None
        with _HELD_GUARD:
            _HELD.pop(str(self.path.resolve()), None)

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()


@contextlib.contextmanager
def hold_run_dir(directory: str | Path, setting: str = "run_dir", say: Say = print) -> Iterator[RunLock]:
    """Hold ``directory``'s lock for the block. Re-entrant within a process: ``eval.run``
    takes its output directory's lock at the front door and the evaluation loop takes it
    again; only the outermost block releases it."""
    held = _HELD.get(str((Path(directory) / LOCK_NAME).resolve()))
    if held is not None:
        yield held
        return
    with RunLock(directory, setting, say) as lock:
        yield lock


def _forget_in_child() -> None:
    """A forked child holds no lock: its copy of the descriptor is closed (the parent's flock
    stays) and leaving a ``with`` block there never removes the parent's file."""
    for lock in list(_HELD.values()):
        if lock._fd is not None:
            with contextlib.suppress(OSError):
                os.close(lock._fd)
            lock._fd = None
    _HELD.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)
