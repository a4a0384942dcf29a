"""Claims and dedupe under pressure: a ready job behind many dead letters, a dedupe race
in REPEATABLE READ."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest

from drainpipe import DrainpipeError, Jobs

QUEUES: dict[str, Any] = {"raw": dict[str, Any]}


@pytest.fixture
async def jobs(jobs_db_url: str) -> AsyncIterator[Jobs]:
    instance = Jobs(jobs_db_url, QUEUES)
    yield instance
    await instance.backend.db.close()  # type: ignore[attr-defined]


async def test_claim_reaches_a_ready_job_behind_many_dead_letters(jobs: Jobs) -> None:
    for _ in range(30):
        await jobs.enqueue("raw", {"dead": True}, max_attempts=1)
    assert len(await jobs.claim("raw", batch=30, lease=0.01)) == 30
    ready = await jobs.enqueue("raw", {"dead": False})
    await asyncio.sleep(0.05)
    [job] = await jobs.claim("raw", batch=1)
    assert job.id == ready
    stats = (await jobs.stats(["raw"]))["raw"]
    assert (stats.ready, stats.dead) == (0, 30)


async def test_dedupe_race_in_repeatable_read_is_a_serialization_error_on_the_table(
    fresh_database: Any,
) -> None:
    url = fresh_database("table")
    first = await psycopg.AsyncConnection.connect(url)
    second = await psycopg.AsyncConnection.connect(url)
    try:
        for conn in (first, second):
            await conn.set_isolation_level(psycopg.IsolationLevel.REPEATABLE_READ)
        await second.execute("SELECT 1")  # its snapshot is taken now
        # (not always id 1: a stamp drawn across a preemption draws again, job_stamp)
        first_id = await Jobs(first, QUEUES).enqueue("raw", {}, dedupe_key="k")
        racing = asyncio.ensure_future(Jobs(second, QUEUES).enqueue("raw", {}, dedupe_key="k"))
        await asyncio.sleep(0.1)  # waiting on the first one's key lock
        await first.commit()
        with pytest.raises(DrainpipeError) as info:
            await racing
        # not "conflict": a retry of the whole transaction finds the first one's job
        assert info.value.kind == "serialization"
        await second.rollback()
        assert await Jobs(second, QUEUES).enqueue("raw", {}, dedupe_key="k") == first_id
        await second.commit()
    finally:
        await first.close()
        await second.close()
