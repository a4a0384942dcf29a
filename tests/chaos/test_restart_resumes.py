"""Work resumes within seconds of the database coming back, on drainpipe's own pool.

The cluster of the test's own crashes (``pg_ctl stop -m immediate``) and starts again
4 s later while ``work`` runs. Before, the claim backoff doubled towards 30 s and the pool's
reconnection doubled too (1, 2, 4 s ...), so the first job after the restart ran seconds
later (after a failover's promotion: 9-33 s). Now a call on an outage probes on a short
interval and a probe that connects gets a fresh pool: an app's next call is answered at
once, and the job enqueued the moment the server answers runs within 5 s, the goal (2-4 s
measured: a lane can be in a capped 2 s claim wait twice). Takes ~8 s (the
outage is the point)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg
import pytest

from drainpipe import DrainpipeError, Job, Jobs
from drainpipe.db import Database
from drainpipe.db.sync import SyncDatabase
from drainpipe.sqlmodules import install
from drainpipe.sync import Jobs as SyncJobs
from tests.chaos.cluster import ThrowawayCluster

QUEUES: dict[str, Any] = {"work": dict[str, Any]}
OUTAGE = 4.0
RESUMED_WITHIN = 5.0


@pytest.mark.slow
@pytest.mark.timeout(60)
async def test_work_resumes_within_five_seconds_of_a_restart(cluster: ThrowawayCluster) -> None:
    with psycopg.connect(cluster.dsn(), autocommit=True) as admin:
        admin.execute("DROP DATABASE IF EXISTS resume WITH (FORCE)")
        admin.execute("CREATE DATABASE resume")
    dsn = cluster.dsn("resume")
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await install(conn, ["jobs"], backend="table")

    ran: dict[int, float] = {}
    stop = asyncio.Event()
    errors: list[BaseException] = []

    async def handle(payload: dict[str, Any], job: Job[Any]) -> None:
        ran[payload["n"]] = time.monotonic()
        if payload["n"] == 2:
            stop.set()

    async with Jobs(dsn, QUEUES) as jobs:
        worker = asyncio.create_task(
            jobs.work(
                "work",
                handle,
                stop=stop,
                max_outage=60,
                on_error=lambda error, job: errors.append(error),
            )
        )
        await jobs.enqueue("work", {"n": 1})
        for _ in range(100):
            if 1 in ran:
                break
            await asyncio.sleep(0.05)
        assert 1 in ran
        await asyncio.sleep(1.2)  # the worker idles between polls, its pool is warm
        app = Database(dsn, timeout=1.0)  # an app's requests during the outage
        sync_app = SyncDatabase(dsn, timeout=1.0)  # and the sync twin's
        assert await app.fetchval("SELECT 1") == 1
        assert await asyncio.to_thread(sync_app.fetch, "SELECT 1") == [(1,)]
        await asyncio.to_thread(cluster.crash)
        outage_ends = time.monotonic() + OUTAGE
        while time.monotonic() < outage_ends:
            with pytest.raises(DrainpipeError) as caught:
                await app.fetchval("SELECT 1")
            assert caught.value.kind == "network"
            with pytest.raises(DrainpipeError) as caught:
                await asyncio.to_thread(sync_app.fetch, "SELECT 1")
            assert caught.value.kind == "network"
            await asyncio.sleep(0.3)
        await asyncio.to_thread(cluster.start)  # returns once a session connects
        back = time.monotonic()
        # the app's next request gets an answer within a probe interval: before, it waited
        # for a pool whose reconnection slept in its backoff (and failed after its 1 s wait)
        assert await app.fetchval("SELECT 1") == 1
        answered = time.monotonic() - back
        assert await asyncio.to_thread(sync_app.fetch, "SELECT 1") == [(1,)]
        sync_answered = time.monotonic() - back
        await app.close()
        await asyncio.to_thread(sync_app.close)
        # enqueued by another client the moment the server answers: the worker must find
        # it without waiting for a pool that sleeps in its reconnect backoff
        with SyncJobs(dsn, QUEUES) as other:
            other.enqueue("work", {"n": 2})
        await asyncio.wait_for(worker, 30)
    # at most one probe interval (0.5 s) and a connection
    assert answered < 1.0 and sync_answered < 1.5, (answered, sync_answered)
    assert ran[2] - back < RESUMED_WITHIN, (ran[2] - back, errors[-3:])
    assert errors  # the outage was seen and ridden out, not missed
