"""The per-queue SQL functions: their first use from many connections, and reinstalls
that keep them (and their oids)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest

from drainpipe import Jobs, install
from tests.conftest import connect

QUEUES: dict[str, Any] = {"raw": dict[str, Any]}


@pytest.fixture
async def jobs(jobs_db_url: str) -> AsyncIterator[Jobs]:
    instance = Jobs(jobs_db_url, QUEUES)
    yield instance
    await instance.backend.db.close()  # type: ignore[attr-defined]


async def test_first_use_of_new_queues_from_many_connections(db_url: str) -> None:
    names = [f"fresh_{i}" for i in range(4)]
    queues = {name: dict[str, Any] for name in names}
    conns = [await connect(db_url) for _ in range(9)]
    try:
        for name in names:

            async def use(index: int, conn: psycopg.AsyncConnection[Any], name: str = name) -> Any:
                jobs = Jobs(conn, queues)
                if index % 3 == 0:
                    return await jobs.enqueue(name, {}, dedupe_key="k")
                if index % 3 == 1:
                    return await jobs.claim(name)
                return await jobs.stats([name])

            await asyncio.gather(*(use(i, c) for i, c in enumerate(conns)))
    finally:
        for conn in conns:
            await conn.close()
    async with await connect(db_url) as c:
        row = await (
            await c.execute(
                "SELECT count(*) FROM pg_proc WHERE pronamespace = 'drainpipe'::regnamespace"
                " AND proname LIKE 'c%%_jobs__fresh_%%'"
            )
        ).fetchone()
    assert row == (2 * len(names),)


async def test_reinstall_keeps_per_queue_functions_and_their_oids(db_url: str) -> None:
    sql = (
        "SELECT oid FROM pg_proc WHERE proname = 'claim_jobs__raw'"
        " AND pronamespace = 'drainpipe'::regnamespace"
    )
    async with await connect(db_url) as c:
        jobs = Jobs(c, QUEUES)
        await jobs.enqueue("raw", {})
        before = await (await c.execute(sql)).fetchone()
        await install(c, ["jobs"], backend="pgmq", force=True)
        after = await (await c.execute(sql)).fetchone()
        # a dropped and recreated function would change its oid under running workers
        assert before is not None and before == after
        [job] = await jobs.claim("raw")
        assert await jobs.complete(job)


# -- workers ---------------------------------------------------------------------------
