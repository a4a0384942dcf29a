"""How one statement runs: prepared where the connection allows it, never behind a
transaction pooler, and a caller's pool of transactional connections still committed."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from drainpipe import DrainpipeError, Jobs
from drainpipe.db import Database, prepare_options
from drainpipe.db.sync import SyncDatabase
from tests.conftest import connect

QUEUES: dict[str, Any] = {"q": dict[str, Any]}


def test_prepare_follows_the_dsn_unless_told() -> None:
    direct = "postgresql://app@db.example.com:5432/postgres"
    pooler = "postgresql://app@pooler.example.com:6543/postgres"
    # None: every connection opens with prepares off; a direct one turns them on (poolers.py)
    assert prepare_options(direct, None) == {"prepare_threshold": None}
    assert prepare_options(pooler, None) == {"prepare_threshold": None}
    assert prepare_options("host=pooler port=6432", False) == {"prepare_threshold": None}
    assert prepare_options(pooler, True) == {}
    with pytest.raises(ValueError, match="prepare must be"):
        prepare_options(direct, "no")  # type: ignore[arg-type]


async def test_a_pool_of_yours_keeps_its_own_prepare_threshold(db_url: str) -> None:
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(db_url, open=False)
    with pytest.raises(ValueError, match="prepare applies to a DSN"):
        Database(pool, prepare=False)
    with (
        psycopg.connect(db_url, autocommit=True) as sync_conn,
        pytest.raises(ValueError, match="prepare applies to a DSN"),
    ):
        SyncDatabase(sync_conn, prepare=True)


async def prepared_after_enqueues(jobs_db_url: str, prepare: bool | None) -> int:
    db = Database(jobs_db_url, max_size=1, prepare=prepare)  # one connection: its statements
    try:
        jobs = Jobs(db, QUEUES)
        for i in range(8):  # psycopg prepares a statement from its 6th use
            await jobs.enqueue("q", {"i": i})
        count = await db.fetchval(
            "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s",
            ("%enqueue_job_v1%",),
        )
        return int(count)
    finally:
        await db.close()


async def test_enqueue_is_prepared_on_a_direct_connection(jobs_db_url: str) -> None:
    assert await prepared_after_enqueues(jobs_db_url, None) == 1


async def test_prepare_false_never_prepares(jobs_db_url: str) -> None:
    # what a transaction pooler needs: a prepared statement would live on one server session
    assert await prepared_after_enqueues(jobs_db_url, False) == 0


async def test_a_pool_of_transactional_connections_is_committed(jobs_db_url: str) -> None:
    # the caller's pool without autocommit: each statement commits as pool.connection() did
    async with AsyncConnectionPool(jobs_db_url, min_size=1, max_size=1, open=False) as pool:
        jobs = Jobs(pool, QUEUES)
        job_id = await jobs.enqueue("q", {"i": 1})
        async with await connect(jobs_db_url) as other:  # committed: another session claims it
            cur = await other.execute("SELECT id FROM drainpipe.claim_jobs_v1('q', 30, 10)")
            assert [row[0] for row in await cur.fetchall()] == [job_id]
        # a failed statement is rolled back: the connection goes back idle and works on
        with pytest.raises(DrainpipeError):
            await jobs.backend.db.fetch("SELECT 1/0")  # type: ignore[attr-defined]
        assert await jobs.enqueue("q", {"i": 2}) > job_id
        async with pool.connection() as conn:
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


# -- the parked connection of drainpipe's own pool ---------------------------------------

PID = "SELECT pg_backend_pid()"


async def test_one_caller_keeps_one_connection_between_statements(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import drainpipe.db.database

    # a loaded machine can stall the loop past the 1 s idle time between two statements;
    # what is tested here is the parking, not that time (the next test covers it)
    monkeypatch.setattr(drainpipe.db.database, "PARK_IDLE", 60.0)
    db = Database(db_url, max_size=3)
    try:
        # the first statement may meet the pool still opening its first connection and
        # make it open a second: from the second statement on, one connection stays
        await db.fetchval(PID)
        pids = {await db.fetchval(PID) for _ in range(5)}
        assert len(pids) == 1
        pool = db._pool
        assert pool is not None
        asked = pool.get_stats().get("requests_num", 0)
        for _ in range(5):
            await db.fetchval(PID)
        # parked between statements: the pool was not asked again
        assert pool.get_stats().get("requests_num", 0) == asked
    finally:
        await db.close()


async def test_parked_connection_goes_back_after_its_idle_time(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import drainpipe.db.database

    monkeypatch.setattr(drainpipe.db.database, "PARK_IDLE", 0.0)
    db = Database(db_url, max_size=3)
    try:
        await db.fetchval(PID)
        await db.fetchval(PID)
        pool = db._pool
        assert pool is not None
        asked = pool.get_stats().get("requests_num", 0)
        await db.fetchval(PID)
        assert pool.get_stats().get("requests_num", 0) == asked + 1
    finally:
        await db.close()


async def test_a_pool_of_one_never_starves_behind_the_parked_connection(db_url: str) -> None:
    # concurrent statements and a borrowed connection share the pool's only connection:
    # none may wait for the one parked (the pool timeout would end such a wait)
    db = Database(db_url, max_size=1, timeout=2.0)
    try:
        pid = await db.fetchval(PID)
        rows = await asyncio.wait_for(
            asyncio.gather(
                *(
                    db.fetchval("SELECT pg_sleep(0.01)::text || '-' || pg_backend_pid()")
                    for _ in range(6)
                )
            ),
            10,
        )
        assert {row.split("-")[1] for row in rows} == {str(pid)}
        await db.fetchval(PID)  # parked again
        async with db.connection() as conn:
            cur = await conn.execute(PID)
            assert (await cur.fetchone()) == (pid,)
        await asyncio.wait_for(
            asyncio.gather(db.fetchval(PID), _borrow(db), db.fetchval(PID), _borrow(db)), 10
        )
    finally:
        await db.close()


async def _borrow(db: Database) -> None:
    async with db.connection() as conn:
        await conn.execute("SELECT pg_sleep(0.01)")


def test_sync_one_caller_keeps_one_connection_and_threads_never_starve(db_url: str) -> None:
    db = SyncDatabase(db_url, max_size=1, timeout=2.0)
    try:
        pids = {db.fetch(PID)[0][0] for _ in range(5)}
        assert len(pids) == 1
        pool = db._pool
        assert pool is not None
        asked = pool.get_stats().get("requests_num", 0)
        for _ in range(5):
            db.fetch(PID)
        assert pool.get_stats().get("requests_num", 0) == asked

        def work(i: int) -> None:
            if i % 3 == 0:
                with db.connection() as conn:
                    conn.execute("SELECT pg_sleep(0.01)")
            else:
                db.fetch("SELECT pg_sleep(0.01)")

        with ThreadPoolExecutor(4) as executor:
            list(executor.map(work, range(12)))
        assert {db.fetch(PID)[0][0]} == pids
    finally:
        db.close()
