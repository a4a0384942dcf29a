"""Sessions the server ends, and connections drainpipe refuses: network errors that
workers ride through."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest

import drainpipe
from drainpipe import DrainpipeError, Jobs
from drainpipe.db import Database, translate_error
from tests.conftest import connect

QUEUES: dict[str, Any] = {"raw": dict[str, Any]}


@pytest.fixture
async def jobs(jobs_db_url: str) -> AsyncIterator[Jobs]:
    instance = Jobs(jobs_db_url, QUEUES)
    yield instance
    await instance.backend.db.close()  # type: ignore[attr-defined]


async def test_a_terminated_session_is_a_network_error(db_url: str) -> None:
    async with await connect(db_url) as conn:
        jobs = Jobs(conn, QUEUES)
        await jobs.enqueue("raw", {})
        async with await connect(db_url) as admin:
            await admin.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
        with pytest.raises(DrainpipeError) as info:
            await jobs.claim("raw")
    assert info.value.kind == "network" and info.value.status == 503
    assert info.value.__cause__ is not None
    for sqlstate in ("57P01", "57P02", "57P03", "53300"):
        error = psycopg.errors.lookup(sqlstate)("gone")
        assert translate_error(error).kind == "network", sqlstate
    # refused by psycopg before it reaches the server: a bad value
    assert translate_error(psycopg.DataError("NUL")).kind == "invalid_input"


async def test_workers_retry_through_a_server_side_disconnect(db_url: str) -> None:
    pool_db = Database(db_url, max_size=2)
    try:
        jobs = Jobs(pool_db, QUEUES)
        await jobs.enqueue_many("raw", [{"i": i} for i in range(3)])
        async with await connect(db_url) as admin:
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        stop = asyncio.Event()
        ran: list[int] = []

        async def handle(payload: dict[str, Any], job: drainpipe.Job[Any]) -> None:
            ran.append(payload["i"])
            if len(ran) == 3:
                stop.set()

        # claims on the killed connections fail, are retried, and the worker goes on
        report = await asyncio.wait_for(
            jobs.work("raw", handle, poll_interval=0.05, stop=stop), timeout=10
        )
        assert report.succeeded == 3 and sorted(ran) == [0, 1, 2]
    finally:
        await pool_db.close()


def test_sync_connections_are_refused_at_construction(db_url: str) -> None:
    with psycopg.connect(db_url) as sync_conn, pytest.raises(TypeError, match="AsyncConnection"):
        Jobs(sync_conn, QUEUES)


# -- pgmq: claims and the per-queue functions ------------------------------------------
