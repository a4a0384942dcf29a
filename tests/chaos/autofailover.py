"""A pg_auto_failover 2.0 formation of the test's own: a monitor and two Postgres nodes on
this machine, on free ports, with their data, configuration and state under one temporary
directory (never the shared clusters on 5432/5433). Debian's
``postgresql-15-auto-failover``; ``.ci/run`` installs it.

The monitor's health checks are tightened (a check a second, a node unhealthy after 2 s, a
primary that does not answer given up on after 2 s) so a crashed primary is replaced in
about 5 s instead of about 30 s: the test is about what drainpipe does once the new primary
takes writes, not about how long the monitor waits. ``crash_primary`` kills the primary's
keeper and Postgres with SIGKILL, as a lost machine would; ``switchover`` is pg_autoctl's
planned one, bounded by :data:`SWITCHOVER_TIMEOUT`. Workers connect with the multi-host URI the monitor gives
(``target_session_attrs=read-write``).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

from tests.chaos.cluster import free_port, postgres_bin

#: The monitor's settings that decide how fast a crashed primary is replaced.
MONITOR_SETTINGS = {
    "pgautofailover.health_check_period": "1000",
    "pgautofailover.health_check_timeout": "1000",
    "pgautofailover.health_check_max_retries": "1",
    "pgautofailover.health_check_retry_delay": "500",
    "pgautofailover.node_considered_unhealthy_timeout": "2000",
    "pgautofailover.primary_demote_timeout": "2000",
}


#: A planned switchover takes 2-4 s here; pg_autoctl's own fast stop gives up after 60 s.
SWITCHOVER_TIMEOUT = 45.0

#: How ``wait_writable`` tells a primary takes writes: a transaction id, which only a
#: primary out of recovery hands out, committed as any write is (waiting for the synchronous
#: standby). Not a temp table: the session's exit drops it in a commit that waits for the
#: standby too, and an exiting backend ignores SIGTERM, so on the old primary that wait (for
#: a standby being promoted) held up the switchover's fast shutdown for good, about one run
#: in five (tests/chaos/test_failover.py::test_the_write_probe_leaves_nothing_for_the_exit).
WRITE_PROBE = "SELECT txid_current()"


def pg_autoctl_binary() -> str | None:
    return shutil.which("pg_autoctl")


def kill_inside(folder: Path) -> None:
    """SIGKILL every process working in ``folder``: Postgres and all it starts work in their
    data directory, and pg_autoctl in the formation's. Found by that, not by parentage: the
    monitor's health-check worker, unlike a backend, does not exit when its postmaster
    dies, and once orphaned (re-parented to init, outside any group we started) it stayed
    at work after the CI run that started it."""
    folder = folder.resolve()  # /proc gives the real path: a linked TMPDIR would miss
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):  # gone meanwhile, or not ours to read
                cwd = Path(os.readlink(entry / "cwd"))
                if cwd == folder or folder in cwd.parents:
                    os.kill(int(entry.name), signal.SIGKILL)


class Formation:
    """``start()``, ``uri()``, ``switchover()``, ``crash_primary()``, ``wait_writable()``,
    ``stop()``."""

    def __init__(self) -> None:
        binary = pg_autoctl_binary()
        if binary is None:
            raise FileNotFoundError("pg_autoctl is not installed (postgresql-15-auto-failover)")
        self.binary = binary
        self.root = Path(tempfile.mkdtemp(prefix="drainpipe-failover-"))
        self.monitor_port = free_port()
        self.node_ports = [free_port(), free_port()]
        while len({self.monitor_port, *self.node_ports}) < 3:
            self.node_ports = [free_port(), free_port()]
        self._user = "postgres" if os.geteuid() == 0 else None
        if self._user is not None:
            owner = pwd.getpwnam(self._user)
            os.chown(self.root, owner.pw_uid, owner.pw_gid)
        self._env = {
            **os.environ,
            "PATH": f"{postgres_bin()}:{os.environ.get('PATH', '')}",
            "XDG_CONFIG_HOME": str(self.root / "config"),
            "XDG_DATA_HOME": str(self.root / "share"),
            "XDG_RUNTIME_DIR": str(self.root / "run"),
        }
        self._keepers: dict[str, subprocess.Popen[bytes]] = {}
        self._uri: str | None = None
        self._logs: list[Any] = []

    # -- running pg_autoctl ----------------------------------------------------------------

    def _spawn(self, name: str, *args: str) -> None:
        log = (self.root / f"{name}.log").open("ab")
        self._logs.append(log)
        self._keepers[name] = subprocess.Popen(  # noqa: S603 - pg_autoctl, our arguments
            [self.binary, *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self._env,
            user=self._user,
            cwd=self.root,
            start_new_session=True,  # its own process group: a crash kills all of it
        )

    def _ctl(self, *args: str, timeout: float = 60) -> str:
        done = subprocess.run(  # noqa: S603 - pg_autoctl, our arguments
            [self.binary, *args],
            capture_output=True,
            text=True,
            env=self._env,
            user=self._user,
            cwd=self.root,
            timeout=timeout,
            check=True,
        )
        return done.stdout

    def _monitor_dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.monitor_port}/pg_auto_failover"

    def _states(self) -> list[tuple[int, str, str]]:
        """(port, reported state, assigned state) of each node, per the monitor."""
        with psycopg.connect(self._monitor_dsn(), connect_timeout=2, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT nodeport, reportedstate::text, goalstate::text FROM pgautofailover.node"
                " ORDER BY nodeid"
            ).fetchall()
        return [(int(port), str(reported), str(goal)) for port, reported, goal in rows]

    def _wait_for(self, wanted: set[tuple[str, str]], timeout: float = 90) -> None:
        until = time.monotonic() + timeout
        while True:
            with contextlib.suppress(psycopg.Error):
                if {(reported, goal) for _, reported, goal in self._states()} == wanted:
                    return
            if time.monotonic() > until:
                raise TimeoutError(f"formation not {wanted}: {self._log_tails()}")
            time.sleep(0.2)

    def _log_tails(self) -> str:
        return "\n".join(
            f"{log.name}: {log.read_text(errors='replace')[-800:]}"
            for log in sorted(self.root.glob("*.log"))
        )

    # -- the formation ---------------------------------------------------------------------

    def start(self) -> Formation:
        common = ("--hostname", "127.0.0.1", "--auth", "trust", "--no-ssl", "--run")
        self._spawn(
            "monitor",
            *("create", "monitor", "--pgdata", str(self.root / "monitor")),
            *("--pgport", str(self.monitor_port), *common),
        )
        until = time.monotonic() + 60
        while True:
            try:
                with psycopg.connect(self._monitor_dsn(), connect_timeout=2, autocommit=True) as c:
                    c.execute("SELECT 1 FROM pgautofailover.formation")
                    for name, value in MONITOR_SETTINGS.items():
                        c.execute(f"ALTER SYSTEM SET {name} = {value}")
                    c.execute("SELECT pg_reload_conf()")
                    break
            except psycopg.Error:
                if time.monotonic() > until:
                    raise TimeoutError(f"no monitor: {self._log_tails()}") from None
                time.sleep(0.2)
        monitor = f"postgres://autoctl_node@127.0.0.1:{self.monitor_port}/pg_auto_failover?sslmode=disable"
        for number, port in enumerate(self.node_ports, 1):
            self._spawn(
                f"node{number}",
                *("create", "postgres", "--pgdata", str(self.root / f"node{number}")),
                *("--pgport", str(port), "--monitor", monitor, *common),
            )
            if number == 1:
                self._wait_for({("single", "single")})
        self._wait_for({("primary", "primary"), ("secondary", "secondary")})
        return self

    def uri(self, dbname: str = "postgres") -> str:
        """The multi-host URI ``pg_autoctl show uri`` gives, as user postgres."""
        if self._uri is not None:
            return self._uri.replace("/postgres?", f"/{dbname}?", 1)
        shown = self._ctl(
            "show", "uri", "--formation", "default", "--pgdata", str(self.root / "monitor")
        )
        uri = shown.strip().splitlines()[-1].strip()
        assert uri.startswith("postgres://") and "target_session_attrs=read-write" in uri, uri
        self._uri = uri.replace("postgres://", "postgresql://postgres@", 1)
        return self._uri.replace("/postgres?", f"/{dbname}?", 1)

    def primary_port(self) -> int:
        return next(port for port, reported, _ in self._states() if reported == "primary")

    def switchover(self, timeout: float = SWITCHOVER_TIMEOUT) -> None:
        """pg_autoctl's planned switchover, over within ``timeout`` seconds (else
        ``TimeoutError`` naming any session stuck waiting for a synchronous standby)."""
        until = time.monotonic() + timeout
        try:
            self._ctl(
                "perform", "switchover", "--pgdata", str(self.root / "monitor"), timeout=timeout
            )
            self._wait_for(
                {("primary", "primary"), ("secondary", "secondary")},
                timeout=max(1.0, until - time.monotonic()),
            )
        except (subprocess.TimeoutExpired, TimeoutError):
            raise TimeoutError(
                f"switchover not over in {timeout:.0f} s; sessions waiting for a synchronous"
                f" standby: {self.waiting_for_standby()}; {self._log_tails()}"
            ) from None

    @staticmethod
    def waiting_for_standby() -> list[str]:
        """Server processes whose title says they wait for synchronous replication."""
        listing = subprocess.run(
            ["ps", "-eo", "args"],  # noqa: S607 - procps, to name what holds a shutdown up
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        return [line for line in listing.splitlines() if re.search(r"waiting for [0-9A-F]+/", line)]

    def crash_primary(self) -> int:
        """SIGKILL the primary's keeper, its services and its Postgres; the port it had."""
        port = self.primary_port()
        number = self.node_ports.index(port) + 1
        keeper = self._keepers[f"node{number}"]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(keeper.pid, signal.SIGKILL)
        keeper.wait(10)
        kill_inside(self.root / f"node{number}")
        return port

    def wait_writable(self, dbname: str, not_port: int, timeout: float = 90) -> float:
        """Wait until the formation's URI takes a write on a node other than the one on
        ``not_port`` (the old primary); when it did (monotonic), polled every 50 ms."""
        until = time.monotonic() + timeout
        uri = self.uri(dbname)
        while True:
            with (
                contextlib.suppress(psycopg.Error),
                psycopg.connect(uri, connect_timeout=2, autocommit=True) as conn,
            ):
                conn.execute(WRITE_PROBE)
                row = conn.execute("SELECT current_setting('port')::int").fetchone()
                if row is not None and row[0] != not_port:
                    return time.monotonic()
            if time.monotonic() > until:
                raise TimeoutError(f"no new primary took a write: {self._log_tails()}")
            time.sleep(0.05)

    def stop(self) -> None:
        # each keeper leads its own process group (its services and its Postgres): the
        # groups, then every process working in the formation's directory, are killed
        # outright (the formation is thrown away), so nothing outlives the test even when a
        # keeper died first
        for keeper in self._keepers.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(keeper.pid, signal.SIGKILL)
        kill_inside(self.root)
        for keeper in self._keepers.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                keeper.wait(10)
        for log in self._logs:
            log.close()
        shutil.rmtree(self.root, ignore_errors=True)
