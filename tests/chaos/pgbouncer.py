"""A PgBouncer of the test's own in transaction mode (``default_pool_size=5``) in front of
the test server, the way Supavisor serves Supabase's port 6543: each transaction of a
client runs on whichever of five server sessions is free.

Two of them (:data:`KINDS`):

* ``no-prepares``: Debian's ``pgbouncer`` package (bookworm: 1.18, no prepared-statement
  support at all; a newer one gets ``max_prepared_statements=0``, which behaves the same).
  ``.ci/run`` installs it.
* ``prepares``: PgBouncer 1.21 or newer with ``max_prepared_statements=100``, so prepared
  statements work through it. Debian bookworm has no such package: ``scripts/pgbouncer_build.sh``
  builds one into ``.cache/`` (``$DRAINPIPE_PGBOUNCER`` names another binary).

Without a binary the tests skip and say so, unless ``DRAINPIPE_REQUIRE_CHAOS=1`` (CI). It
listens on a free port on 127.0.0.1 and follows the test server wherever it is (host and
port, or the embedded server's Unix socket), runs as ``postgres`` when started by root
(PgBouncer refuses root; as the socket directory's owner for a Unix socket), and is
stopped when the tests end.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict

from tests.chaos.cluster import free_port

POOL_SIZE = 5
#: the statements a PgBouncer that supports them keeps per server session
MAX_PREPARED_STATEMENTS = 100
#: the first release that passes prepared statements through in transaction mode
PREPARES_SINCE = (1, 21)
KINDS = ("no-prepares", "prepares")
ROOT = Path(__file__).resolve().parents[2]


def pgbouncer_binary() -> str | None:
    """The packaged PgBouncer (Debian's ``pgbouncer``)."""
    return shutil.which("pgbouncer") or (
        "/usr/sbin/pgbouncer" if Path("/usr/sbin/pgbouncer").exists() else None
    )


def version(binary: str) -> str:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False)  # noqa: S603
    return out.stdout.splitlines()[0] if out.stdout else "unknown"


def version_tuple(binary: str) -> tuple[int, ...]:
    """``(1, 24, 1)`` from ``PgBouncer 1.24.1``; ``()`` when it does not say."""
    found = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", version(binary))
    return tuple(int(part) for part in found.groups() if part is not None) if found else ()


def prepares_binary() -> str | None:
    """A PgBouncer that supports prepared statements: ``$DRAINPIPE_PGBOUNCER``, else the
    newest one ``scripts/pgbouncer_build.sh`` left in ``.cache/``, else the packaged one
    when it is new enough."""
    named = os.environ.get("DRAINPIPE_PGBOUNCER")
    if named:
        return named
    built = sorted(ROOT.glob(".cache/pgbouncer-*/bin/pgbouncer"), key=lambda p: p.stat().st_mtime)
    for candidate in [*reversed([str(p) for p in built]), pgbouncer_binary()]:
        if candidate is not None and version_tuple(candidate) >= PREPARES_SINCE:
            return candidate
    return None


def binary_for(kind: str) -> str | None:
    return pgbouncer_binary() if kind == "no-prepares" else prepares_binary()


class PgBouncer:
    """``start()``, ``dsn(dbname)`` (a URL through the pooler), ``stop()``."""

    def __init__(self, server_dsn: str, kind: str = "no-prepares") -> None:
        binary = binary_for(kind)
        if binary is None:
            raise FileNotFoundError(f"no pgbouncer for {kind!r} (see tests/chaos/pgbouncer.py)")
        self.binary = binary
        self.kind = kind
        #: True: prepared statements pass through (max_prepared_statements > 0)
        self.prepares = kind == "prepares"
        if self.prepares and version_tuple(binary) < PREPARES_SINCE:
            raise ValueError(f"{version(binary)} cannot pass prepared statements through")
        # what a release since 1.21 is told: off for "no-prepares", on for "prepares"
        self.max_prepared_statements: int | None = (
            (MAX_PREPARED_STATEMENTS if self.prepares else 0)
            if version_tuple(binary) >= PREPARES_SINCE
            else None
        )
        server = conninfo_to_dict(server_dsn)
        self.server_host = str(server.get("host") or "127.0.0.1")
        self.server_port = int(server.get("port") or 5432)
        self.user = str(server.get("user") or "postgres")
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="drainpipe-pgbouncer-"))
        self._run_as: str | None = self._user_to_run_as()
        self._process: subprocess.Popen[bytes] | None = None

    def _user_to_run_as(self) -> str | None:
        """PgBouncer refuses root: it runs as ``postgres``, or, when the server is reached
        through a Unix socket (the embedded server's private directory), as the owner of
        that directory, the one user besides root who may open the socket."""
        if os.geteuid() != 0:
            return None
        if self.server_host.startswith("/"):
            return pwd.getpwuid(Path(self.server_host).stat().st_uid).pw_name
        return "postgres"

    def dsn(self, dbname: str) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{dbname}"

    def _write_config(self) -> Path:
        (self.root / "users.txt").write_text(f'"{self.user}" ""\n')
        config = self.root / "pgbouncer.ini"
        config.write_text(
            "[databases]\n"
            f"* = host={self.server_host} port={self.server_port}\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            "unix_socket_dir =\n"
            "auth_type = trust\n"
            f"auth_file = {self.root / 'users.txt'}\n"
            "pool_mode = transaction\n"
            f"default_pool_size = {POOL_SIZE}\n"
            "max_client_conn = 500\n"
            "ignore_startup_parameters = extra_float_digits\n"
            f"logfile = {self.root / 'pgbouncer.log'}\n"
            f"admin_users = {self.user}\n"
            + (
                f"max_prepared_statements = {self.max_prepared_statements}\n"
                if self.max_prepared_statements is not None
                else ""
            )
        )
        if self._run_as is not None:
            owner = pwd.getpwnam(self._run_as)
            for path in (self.root, *self.root.iterdir()):
                os.chown(path, owner.pw_uid, owner.pw_gid)
        return config

    def start(self) -> PgBouncer:
        config = self._write_config()
        self._process = subprocess.Popen(  # noqa: S603 - the packaged binary, our config
            [self.binary, str(config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            user=self._run_as,
        )
        until = time.monotonic() + 15
        while True:
            try:
                with psycopg.connect(self.dsn("postgres"), connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
                    return self
            except psycopg.OperationalError:
                if self._process.poll() is not None or time.monotonic() > until:
                    log = (self.root / "pgbouncer.log").read_text(errors="replace")[-2000:]
                    self.stop()
                    raise RuntimeError(f"pgbouncer did not start: {log}") from None
                time.sleep(0.1)

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(10)
        self._process = None
        shutil.rmtree(self.root, ignore_errors=True)
