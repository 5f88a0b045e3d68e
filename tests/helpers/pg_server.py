"""A private PostgreSQL server for the tests: ``initdb`` in a temporary folder, ``pg_ctl
start`` listening on a Unix socket in that folder only (no TCP), stopped at the end.

``initdb`` refuses to run as root, and the tests run as root here and in CI: the server then
runs as the ``postgres`` system user (Debian's package creates it; ``nobody`` otherwise),
with the folder handed to it. Authentication is ``trust`` on that socket only: the folder is
private, and what a role may do is what the tests check, not who may log in.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

ADMIN = "tester"
"""The superuser ``initdb`` creates (it loads data; the backend under test never uses it)."""
PORT = 5432
"""Only names the socket file (``.s.PGSQL.5432``): the server listens on no TCP port."""
SERVER_SETTINGS = {
    "listen_addresses": "''",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "shared_buffers": "32MB",
    "max_connections": "60",
}
"""A throwaway server: no TCP, no durability (project choice: the tests' data is rebuilt every run)."""


def postgres_bindir() -> Path | None:
    """The folder holding ``initdb`` and ``pg_ctl``: on PATH, ``pg_config --bindir``, or
    Debian's ``/usr/lib/postgresql/<version>/bin`` (newest first); None when there is none."""
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    if shutil.which("pg_config"):
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=False)
        candidate = Path(out.stdout.strip())
        if out.returncode == 0 and (candidate / "initdb").is_file():
            return candidate
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    return Path(versions[-1]).parent if versions else None


@dataclass
class PgServer:
    """A running server: its folder (socket and data) and how to reach it."""

    folder: Path
    bindir: Path
    run_as: list[str]

    @property
    def data(self) -> Path:
        return self.folder / "data"

    def dsn(self, user: str = ADMIN, dbname: str = "postgres") -> str:
        """A libpq URI reaching the server through its socket."""
        return f"postgresql://{user}@/{dbname}?host={self.folder}&port={PORT}"

    def new_database(self, name: str) -> str:
        """Create the database ``name``; returns the superuser's DSN for it."""
        import psycopg

        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.dsn(dbname=name)

    def _ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.run_as, str(self.bindir / "pg_ctl"), "-D", str(self.data), *args],
            capture_output=True,
            text=True,
            check=False,
        )

    def stop(self) -> None:
        self._ctl("stop", "-m", "immediate", "-w")
        shutil.rmtree(self.folder, ignore_errors=True)


def _server_user() -> list[str]:
    """The command prefix that runs a program as an unprivileged user (empty when not root)."""
    if os.geteuid() != 0:
        return []
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        return ["runuser", "-u", name, "--"]
    raise RuntimeError("running as root with neither a 'postgres' nor a 'nobody' user to run the server as")


def start_server(bindir: Path) -> PgServer:
    """initdb + pg_ctl start in a new temporary folder; raises with the server's log on failure."""
    folder = Path(tempfile.mkdtemp(prefix="pgtest-"))  # short: a socket path holds at most 107 bytes
    run_as = _server_user()
    if run_as:
        user = pwd.getpwnam(run_as[2])
        os.chown(folder, user.pw_uid, user.pw_gid)
    server = PgServer(folder, bindir, run_as)
    init = subprocess.run(
        [*run_as, str(bindir / "initdb"), "-D", str(server.data), "-U", ADMIN]
        + ["--auth=trust", "--encoding=UTF8", "--no-locale", "--no-sync", "--no-instructions"],
        capture_output=True,
        text=True,
        check=False,
    )
    if init.returncode != 0:
        shutil.rmtree(folder, ignore_errors=True)
        raise RuntimeError(f"initdb failed (exit {init.returncode}):\n{init.stdout}\n{init.stderr}")
    options = " ".join(f"-c {k}={v}" for k, v in SERVER_SETTINGS.items())
    options += f" -k {folder} -p {PORT}"
    log = folder / "server.log"
    started = server._ctl("start", "-w", "-t", "60", "-l", str(log), "-o", options)
    if started.returncode != 0:
        text = log.read_text(errors="replace") if log.exists() else ""
        server.stop()
        raise RuntimeError(f"pg_ctl start failed (exit {started.returncode}):\n{started.stderr}\n{text[-3000:]}")
    return server
