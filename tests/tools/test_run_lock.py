"""tools/run_lock.py on real files and real processes: a live holder refuses a second one
(naming it), a ``kill -9``-ed holder, a dead host and a rebooted host are taken over with a
message, the heartbeat advances, the flock outranks the pid, the lock is released on any
exit (but never by a forked child), and a lock taken over under a live holder is reported."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.tools.lock_holder import lock_owner, start_holder, stop_holder
from tools import run_lock
from tools.errors import ConfigError, RunDirInUseError
from tools.run_lock import HEARTBEAT_ENV, LOCK_NAME, STALE_ENV, RunLock, hold_run_dir


def write_lock(directory: Path, age_s: float = 0.0, **fields: object) -> Path:
    """A lock file as another process would have left it, last touched ``age_s`` ago."""
    directory.mkdir(parents=True, exist_ok=True)
    holder = {"host": "node-17", "pid": 4242, "started": time.time() - 3600, "command": "python -m training.run"}
    path = directory / LOCK_NAME
    path.write_text(json.dumps({**holder, **fields}))
    os.utime(path, (time.time() - age_s, time.time() - age_s))
    return path


def this_machine() -> dict:
    me = RunLock(".").me()
    return {"host": me.host, "boot_id": me.boot_id, "pid_space": me.pid_space}


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_live_holder_is_named_and_the_second_process_refused(tmp_path: Path) -> None:
    holder = start_holder(tmp_path / "run", "recipe=trustsql")
    try:
        with pytest.raises(RunDirInUseError) as refused:
            RunLock(tmp_path / "run").acquire()
        message = str(refused.value)
        assert f"process {holder.pid} on {socket.gethostname()}" in message
        assert f"`kill {holder.pid}` on {socket.gethostname()}" in message and "recipe=trustsql" in message
        assert f"delete {tmp_path / 'run' / LOCK_NAME}" in message and "pick another run_dir" in message
        assert holder.poll() is None and lock_owner(tmp_path / "run") == holder.pid  # the holder is untouched
    finally:
        assert stop_holder(holder) == 0
    assert not (tmp_path / "run" / LOCK_NAME).exists()  # released on exit
    with RunLock(tmp_path / "run"):
        assert lock_owner(tmp_path / "run") == os.getpid()


def test_a_killed_holder_is_taken_over_with_a_message(tmp_path: Path) -> None:
    holder = start_holder(tmp_path / "run")
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=30)
    assert lock_owner(tmp_path / "run") == holder.pid  # kill -9 leaves the file
    said: list[str] = []
    with hold_run_dir(tmp_path / "run", say=said.append):
        assert lock_owner(tmp_path / "run") == os.getpid()
    assert len(said) == 1 and f"from process {holder.pid} on {socket.gethostname()}" in said[0]
    assert f"process {holder.pid} is gone" in said[0]


def test_another_hosts_lock_is_taken_over_only_once_its_heartbeat_is_old(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_lock(run, age_s=5)
    with pytest.raises(RunDirInUseError, match=r"process 4242 on node-17 .*`kill 4242` on node-17"):
        RunLock(run).acquire()
    write_lock(run, age_s=1000, heartbeat_s=600)  # a holder beating every 10 min is alive for 30 min
    with pytest.raises(RunDirInUseError, match="last heartbeat was 1000 s ago"):
        RunLock(run).acquire()
    write_lock(run, age_s=1000)
    said: list[str] = []
    with RunLock(run, say=said.append):
        assert lock_owner(run) == os.getpid()
    assert "from process 4242 on node-17" in said[0] and "no heartbeat for 1000 s" in said[0]


def test_the_stale_age_is_configurable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_lock(tmp_path / "run", age_s=100, heartbeat_s=10)
    with pytest.raises(RunDirInUseError):
        RunLock(tmp_path / "run").acquire()
    monkeypatch.setenv(STALE_ENV, "90")
    with RunLock(tmp_path / "run", say=lambda _: None):
        assert lock_owner(tmp_path / "run") == os.getpid()


@pytest.mark.parametrize(
    ("env", "value", "named"),
    [(HEARTBEAT_ENV, "soon", "soon"), (STALE_ENV, "-5", "-5"), (STALE_ENV, "40", "twice")],
)
def test_bad_lock_settings_are_named(monkeypatch: pytest.MonkeyPatch, env: str, value: str, named: str) -> None:
    monkeypatch.setenv(env, value)
    with pytest.raises(ConfigError, match=f"{env}.*{named}"):
        RunLock(".")


def test_a_lock_from_before_a_reboot_is_taken_over(tmp_path: Path) -> None:
    machine = this_machine()
    if machine["boot_id"] is None:
        pytest.skip("no boot id on this system")
    write_lock(tmp_path / "run", **{**machine, "boot_id": "an-earlier-boot", "pid": 1})
    said: list[str] = []
    with RunLock(tmp_path / "run", say=said.append):
        pass
    assert "has restarted since" in said[0]


def test_on_this_machine_the_flock_outranks_the_pid(tmp_path: Path) -> None:
    run = tmp_path / "run"
    # a live pid that does not hold the lock it is recorded in: the pid was reused
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        write_lock(run, **this_machine(), pid=sleeper.pid, flock=True)
        said: list[str] = []
        with RunLock(run, say=said.append):
            pass
        assert "its pid now belongs to another process" in said[0]
    finally:
        sleeper.kill()
        sleeper.wait()
    # a dead pid, but a process holds the file's flock (a pid from another container): alive
    path = write_lock(run, **this_machine(), pid=dead_pid(), flock=True)
    grip = subprocess.Popen(
        [sys.executable, "-c", "import fcntl,sys; f=open(sys.argv[1]); fcntl.flock(f, fcntl.LOCK_EX); "
         "print('ok', flush=True); sys.stdin.read()", str(path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert grip.stdout is not None and grip.stdout.readline().strip() == "ok"
        with pytest.raises(RunDirInUseError):
            RunLock(run).acquire()
    finally:
        grip.communicate(timeout=30)


def test_an_unreadable_lock_is_refused_while_fresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_lock, "UNREADABLE_WAIT_S", 0.2)
    path = tmp_path / "run" / LOCK_NAME
    path.parent.mkdir()
    path.write_text("")
    with pytest.raises(RunDirInUseError, match="run.lock exists but cannot be read"):
        RunLock(tmp_path / "run").acquire()
    os.utime(path, (time.time() - 1000, time.time() - 1000))
    said: list[str] = []
    with RunLock(tmp_path / "run", say=said.append):
        pass
    assert "an unreadable lock" in said[0] and "untouched for 1000 s" in said[0]


def wait_for(condition: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def test_the_heartbeat_advances_while_held(tmp_path: Path) -> None:
    with RunLock(tmp_path / "run", heartbeat_s=0.1, stale_after_s=5) as lock:
        long_ago = time.time() - 1000
        os.utime(lock.path, (long_ago, long_ago))
        assert wait_for(lambda: lock.path.stat().st_mtime > time.time() - 60)
    assert not lock.path.exists()


def test_released_on_an_error_and_reentrant_within_a_process(tmp_path: Path) -> None:
    path = tmp_path / "run" / LOCK_NAME
    with pytest.raises(RuntimeError), hold_run_dir(tmp_path / "run"):
        raise RuntimeError("the run failed")
    assert not path.exists()
    with hold_run_dir(tmp_path / "run") as outer:
        with hold_run_dir(tmp_path / "run") as inner:
            assert inner is outer
        assert path.exists()  # only the outermost block releases
    assert not path.exists()


def test_a_forked_child_never_releases_the_parents_lock(tmp_path: Path) -> None:
    with hold_run_dir(tmp_path / "run") as lock:
        pid = os.fork()
        if pid == 0:  # the child leaves a with block the way a worker would
            try:
                lock.release()
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        assert lock.path.exists() and lock_owner(tmp_path / "run") == os.getpid()
    assert not lock.path.exists()


def test_a_lock_taken_over_under_a_live_holder_is_reported(tmp_path: Path, capfd: pytest.CaptureFixture) -> None:
    lock = RunLock(tmp_path / "run", heartbeat_s=0.1, stale_after_s=5).acquire()
    try:
        lock.path.unlink()
        other = write_lock(tmp_path / "run")  # another host judged this run dead
        assert wait_for(lambda: lock.lost)
    finally:
        lock.release()
    assert other.exists() and lock_owner(tmp_path / "run") == 4242  # never removes another's lock
    assert "was removed or taken over by another process" in capfd.readouterr().err


def test_a_takeover_removes_only_the_file_it_judged(tmp_path: Path) -> None:
    path = write_lock(tmp_path / "run", age_s=1000)
    judged = run_lock._identity(path)
    path.unlink()
    newer = write_lock(tmp_path / "run", pid=5151)  # another contender's lock (often on the freed inode)
    assert not run_lock._remove_if_same(newer, judged)
    assert lock_owner(tmp_path / "run") == 5151 and [p.name for p in (tmp_path / "run").iterdir()] == [LOCK_NAME]
    assert run_lock._remove_if_same(newer, run_lock._identity(newer)) and not newer.exists()
