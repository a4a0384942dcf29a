"""Safe behind a transaction pooler by default: drainpipe prepares only on a connection
it knows reaches the server directly, accepts ``pgbouncer=true`` in a DSN, keeps the CLI's
timeouts inside each transaction and says when ``listen=True`` cannot work.

A TCP relay on another port stands in for "something in front of the server" here (real
PgBouncer runs in tests/chaos/test_pgbouncer.py): the server then listens on a port the
client did not connect to, which is what a pooler or a proxy looks like."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from drainpipe import DrainpipeError, Jobs
from drainpipe.agents import AgentInboxes
from drainpipe.cli import connect as cli_connect
from drainpipe.db import Database
from drainpipe.db.poolers import dsn_ports, names_pooler, prepare_mode, split_dsn
from drainpipe.db.sync import SyncDatabase

QUEUES: dict[str, Any] = {"q": dict[str, Any]}
SECRET = "s" * 32


def as_url(conninfo: str, query: str = "") -> str:
    """The test server's conninfo as a URL (the form users paste), with ``query``. A Unix
    socket (the embedded server's) goes in ``host=``: a URL's authority cannot hold a path."""
    params = conninfo_to_dict(conninfo)
    host, port = params.get("host") or "127.0.0.1", params.get("port") or "5432"
    user, dbname = params.get("user") or "postgres", params["dbname"]
    if str(host).startswith("/"):
        url, joiner = f"postgresql://{user}@:{port}/{dbname}?host={host}", "&"
    else:
        url, joiner = f"postgresql://{user}@{host}:{port}/{dbname}", "?"
    return url + (f"{joiner}{query}" if query else "")


def test_pgbouncer_flag_is_taken_out_of_the_dsn() -> None:
    assert split_dsn("postgresql://u@h:5432/db?pgbouncer=true&sslmode=require") == (
        "postgresql://u@h:5432/db?sslmode=require",
        True,
    )
    # other parameters keep their spelling (no re-encoding of %20)
    assert split_dsn("postgresql://h/db?options=-c%20a%3Db&pgbouncer=false") == (
        "postgresql://h/db?options=-c%20a%3Db",
        False,
    )
    assert split_dsn("host=h pgbouncer=true dbname=d") == ("host=h dbname=d", True)
    assert split_dsn("postgresql://h/db") == ("postgresql://h/db", False)
    with pytest.raises(DrainpipeError) as caught:
        split_dsn("postgresql://h/db?pgbouncer=maybe")
    assert (caught.value.kind, caught.value.code) == ("network", "INVALID_DSN")


def test_a_pooler_is_known_by_its_port_or_the_flag() -> None:
    assert dsn_ports("postgresql://u@a:5432,b:6432/db?port=7") == ["5432", "6432", "7"]
    assert dsn_ports("host=a port=6432") == ["6432"]
    assert names_pooler("postgresql://u@pooler.example.com:6543/postgres")
    assert names_pooler("host=pooler port=6432")
    assert names_pooler("postgresql://u@db.example.com/postgres?pgbouncer=true")
    assert not names_pooler("postgresql://u@db.example.com:5432/postgres")
    assert not names_pooler("postgresql://u@a:5432,b:6432/postgres")  # one direct host
    assert prepare_mode("postgresql://u@h:6432/db", None) == "never"
    assert prepare_mode("postgresql://u@h:6432/db", True) == "always"
    assert prepare_mode("postgresql://u@h:5432/db", None) == "detect"
    assert prepare_mode("postgresql://u@h:5432/db", False) == "never"


@contextlib.asynccontextmanager
async def relay(url: str) -> AsyncIterator[str]:
    """``url`` through a TCP relay on a free port: the server is not where the client
    connected."""
    params = conninfo_to_dict(url)
    host, port = str(params.get("host") or "127.0.0.1"), int(params.get("port") or 5432)
    pipes: set[asyncio.Task[None]] = set()

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if host.startswith("/"):  # a socket directory (the embedded server): its socket
            up_reader, up_writer = await asyncio.open_unix_connection(f"{host}/.s.PGSQL.{port}")
        else:
            up_reader, up_writer = await asyncio.open_connection(host, port)
        for task in (pipe(reader, up_writer), pipe(up_reader, writer)):
            pipes.add(asyncio.create_task(task))

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    relay_port = server.sockets[0].getsockname()[1]
    params.update(host="127.0.0.1", port=str(relay_port))
    try:
        yield make_conninfo(**params)
    finally:
        server.close()
        for task in pipes:
            task.cancel()
        await asyncio.gather(*pipes, return_exceptions=True)


async def prepared_statements(db: Database) -> int:
    jobs = Jobs(db, QUEUES)
    for i in range(8):  # psycopg prepares a statement from its 6th use
        await jobs.enqueue("q", {"i": i})
    count = await db.fetchval(
        "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s",
        ("%enqueue_job_v1%",),
    )
    return int(count)


async def test_nothing_is_prepared_on_a_connection_not_known_to_be_direct(
    db_url: str,
) -> None:
    # before: every port but 6543 prepared, so PgBouncer 1.18 on any other port broke
    async with relay(db_url) as relayed:
        db = Database(relayed, max_size=1)
        try:
            assert await prepared_statements(db) == 0
        finally:
            await db.close()
    db = Database(db_url, max_size=1)  # direct: still prepared
    try:
        assert await prepared_statements(db) == 1
    finally:
        await db.close()


def test_the_sync_twin_prepares_only_when_direct(db_url: str) -> None:
    def prepared(db: SyncDatabase) -> int:
        for _ in range(8):
            db.fetch("SELECT 41 + 1")
        return int(
            db.fetch(
                "SELECT count(*) FROM pg_prepared_statements WHERE statement = 'SELECT 41 + 1'"
            )[0][0]
        )

    direct = SyncDatabase(db_url, max_size=1)
    flagged = SyncDatabase(as_url(db_url, "pgbouncer=true"), max_size=1)
    try:
        assert prepared(direct) == 1
        assert prepared(flagged) == 0
        assert flagged.names_pooler and not direct.names_pooler
    finally:
        direct.close()
        flagged.close()


async def test_pgbouncer_true_in_the_dsn_is_accepted_and_turns_prepares_off(
    db_url: str,
) -> None:
    # before: libpq refused it, INVALID_DSN 'invalid URI query parameter: "pgbouncer"'
    db = Database(as_url(db_url, "pgbouncer=true"), max_size=1)
    try:
        assert db.dsn == as_url(db_url)
        assert db.names_pooler
        assert await prepared_statements(db) == 0
    finally:
        await db.close()
    async with Jobs(as_url(db_url, "pgbouncer=true"), QUEUES) as jobs:
        assert await jobs.enqueue("q", {"i": 1}) > 0


async def test_cli_timeouts_stay_inside_each_transaction(db_url: str) -> None:
    # a session SET would stay on the server session, which a transaction pooler lends to
    # the next client: the CLI's timeouts must end with each statement's transaction
    conn = await cli_connect(as_url(db_url, "pgbouncer=true"), timeout_seconds=0.3)
    try:
        cur = await conn.execute("SELECT current_setting('statement_timeout')")
        assert await cur.fetchone() == ("300ms",)
        with pytest.raises(psycopg.errors.QueryCanceled):
            await conn.execute("SELECT pg_sleep(1)")
        async with conn.transaction():
            cur = await conn.execute("SELECT current_setting('lock_timeout')")
            assert await cur.fetchone() == ("300ms",)
        # the session itself: a bare statement outside drainpipe's transactions
        plain = psycopg.AsyncCursor(conn)
        await plain.execute(
            "SELECT current_setting('statement_timeout'), current_setting('lock_timeout')"
        )
        assert await plain.fetchone() == ("0", "0")
    finally:
        await conn.close()


async def test_listen_behind_a_pooler_is_refused_or_reported(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(ValueError, match="transaction pooler"):
        AgentInboxes(as_url(db_url, "pgbouncer=true"), lease_secret=SECRET, listen=True)
    with pytest.raises(ValueError, match="transaction pooler"):
        AgentInboxes("postgresql://u@pooler.example.com:6543/db", lease_secret=SECRET, listen=True)
    async with relay(db_url) as relayed:
        inboxes = AgentInboxes(relayed, lease_secret=SECRET, listen=True)
        wakeups = inboxes.wakeups
        assert wakeups is not None
        try:
            with caplog.at_level(logging.WARNING, logger="drainpipe.agents"):
                await wakeups.start()
            assert wakeups.direct is False
            assert "does not reach the Postgres server directly" in caplog.text
        finally:
            await inboxes.close()
    inboxes = AgentInboxes(db_url, lease_secret=SECRET, listen=True)
    wakeups = inboxes.wakeups
    assert wakeups is not None
    try:
        await wakeups.start()
        assert wakeups.direct is True
    finally:
        await inboxes.close()
