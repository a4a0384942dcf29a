"""A pool or connection of the caller's may make rows of its own kind (``dict_row`` is common
in apps): drainpipe's statements still read tuples, and the caller's rows stay theirs.
Before this, every statement on such a pool failed with ``KeyError: 0``."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool

import drainpipe
from drainpipe import sync
from drainpipe.db import Database
from drainpipe.db.sync import SyncDatabase

QUEUES: dict[str, Any] = {"q": dict[str, Any]}


async def test_a_dict_row_pool_of_yours_runs_every_statement(jobs_db_url: str) -> None:
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        jobs_db_url,
        min_size=1,
        max_size=1,
        open=False,
        kwargs={"autocommit": True, "row_factory": dict_row},
    )
    async with pool:
        assert (await drainpipe.verify(pool)).ok  # the installer's reads too
        jobs = drainpipe.Jobs(pool, QUEUES)
        first = await jobs.enqueue("q", {"n": 1})
        second = await jobs.enqueue("q", {"n": 2})
        assert second > first
        assert (await jobs.stats(["q"]))["q"].ready == 2
        [claimed, _] = await jobs.claim("q", batch=2, lease=30)
        assert claimed.payload == {"n": 1}  # JSON read by our cursor, as a tuple's column
        async with pool.connection() as conn:  # the caller's rows are still dicts
            row = await (await conn.execute("SELECT 1 AS one")).fetchone()
        assert row == {"one": 1}


async def test_a_dict_row_connection_of_yours_runs_every_statement(jobs_db_url: str) -> None:
    async with await psycopg.AsyncConnection.connect(
        jobs_db_url, autocommit=True, row_factory=dict_row
    ) as conn:
        db = Database(conn)
        assert await db.fetchval("SELECT 41 + 1") == 42
        jobs = drainpipe.Jobs(conn, QUEUES)
        await jobs.enqueue("q", {"n": 1})
        assert (await jobs.stats(["q"]))["q"].ready == 1
        row = await (await conn.execute("SELECT 1 AS one")).fetchone()
    assert row == {"one": 1}


async def test_a_borrowed_connection_keeps_one_cursor_between_statements(db_url: str) -> None:
    """On a caller's pool, the connection lent again is read with the cursor made on it the
    first time (a new cursor per statement cost a single enqueue 18-38 us of client CPU)."""
    async with AsyncConnectionPool(
        db_url, min_size=1, max_size=1, open=False, kwargs={"autocommit": True}
    ) as pool:
        db = Database(pool)
        assert await db.fetchval("SELECT 1") == 1
        async with pool.connection() as conn:
            cursor = conn._drainpipe_cursor  # type: ignore[attr-defined]
        assert await db.fetchval("SELECT 2") == 2
        async with pool.connection() as conn:
            assert conn._drainpipe_cursor is cursor  # type: ignore[attr-defined]
        # two statements at once on a pool of one: each waits for the connection in turn,
        # and each reads its own rows from the shared cursor
        values = await asyncio.gather(*(db.fetchval("SELECT %s::int", (n,)) for n in range(5)))
        assert values == list(range(5))


def test_a_dict_row_pool_of_yours_runs_the_sync_twin(jobs_db_url: str) -> None:
    with ConnectionPool(
        jobs_db_url,
        min_size=1,
        max_size=1,
        open=False,
        kwargs={"autocommit": True, "row_factory": dict_row},
    ) as pool:
        jobs = sync.Jobs(pool, QUEUES)
        jobs.enqueue("q", {"n": 1})
        assert jobs.stats(["q"])["q"].ready == 1
        with pool.connection() as conn:
            assert conn.execute("SELECT 1 AS one").fetchone() == {"one": 1}


def test_a_borrowed_connection_keeps_one_cursor_in_the_sync_twin(db_url: str) -> None:
    with ConnectionPool(
        db_url, min_size=1, max_size=1, open=False, kwargs={"autocommit": True}
    ) as pool:
        db = SyncDatabase(pool)
        assert db.fetch("SELECT 1") == [(1,)]
        with pool.connection() as conn:
            cursor = conn._drainpipe_cursor  # type: ignore[attr-defined]
        # threads share the pool of one: each statement has the connection (and the
        # cursor) to itself while it runs
        with ThreadPoolExecutor(4) as threads:
            values = list(threads.map(lambda n: db.fetch("SELECT %s::int", (n,)), range(20)))
        assert values == [[(n,)] for n in range(20)]
        with pool.connection() as conn:
            assert conn._drainpipe_cursor is cursor  # type: ignore[attr-defined]
