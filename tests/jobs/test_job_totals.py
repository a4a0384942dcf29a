"""The finished-job totals (``drainpipe.job_totals``, kept by the storages' triggers through
``add_job_totals``) under concurrent settlers: a settler never waits on another one's shard
row, a settler past the last free shard waits for its own, and lanes racing through a drain
with cancels beside it leave totals equal to a count of the records, on both storages."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import psycopg
import pytest

from drainpipe import Jobs
from drainpipe.backends import sql_leases as claim_ops

QUEUE = "totals"
SHARDS = 16  # add_job_totals' shard count (add_job_totals in the jobs baseline, 10_common.sql)


@pytest.fixture
async def jobs(jobs_db_url: str) -> AsyncIterator[Jobs]:
    async with Jobs(jobs_db_url, {QUEUE: dict[str, Any]}) as instance:
        yield instance


async def enqueue(jobs: Jobs, url: str, count: int, **options: Any) -> list[int]:
    """``count`` jobs, the queue's totals kept from here on (pgmq: its archive's triggers)."""
    ids = await jobs.enqueue_many(QUEUE, [{"n": n} for n in range(count)], **options)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT drainpipe.ensure_queue_overview_v1(ARRAY[%s])", (QUEUE,))
    return ids


def kept(url: str) -> dict[str, int]:
    """The totals as their readers see them: every shard of a state summed."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT state, sum(n)::bigint FROM drainpipe.job_totals WHERE queue = %s"
            " GROUP BY state HAVING sum(n) <> 0",
            (QUEUE,),
        ).fetchall()
    return {state: int(n) for state, n in rows}


def recounted(url: str) -> dict[str, int]:
    """The totals counted again from the records (and kept as that count from here on)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT drainpipe.recount_job_totals_v1(ARRAY[%s])", (QUEUE,))
    return kept(url)


@contextmanager
def settling(url: str, lock_timeout: str = "3s") -> Iterator[psycopg.Connection[Any]]:
    """A connection that claims one job and completes it in a transaction it leaves open
    (its shard stays taken); ``lock_timeout`` turns a wait on another settler into an error."""
    with psycopg.connect(url) as conn:
        conn.execute("SELECT set_config('lock_timeout', %s, false)", (lock_timeout,))
        [(job_id, attempts, *_rest)] = conn.execute(
            claim_ops.CLAIM, claim_ops.claim_params(QUEUE, 60, 1)
        ).fetchall()
        conn.execute(
            "SELECT drainpipe.complete_jobs_v1(%s, %s::bigint[], %s::integer[])",
            (QUEUE, [job_id], [attempts]),
        )
        yield conn


async def test_open_settlers_do_not_wait_on_each_other(jobs: Jobs, jobs_db_url: str) -> None:
    """Nine open transactions that each completed a job: one shard of 8 by backend pid put
    two of them on one row, and the second waited for the first to commit."""
    url = jobs_db_url
    await enqueue(jobs, url, 9)
    with ExitStack() as stack:
        open_ones = [stack.enter_context(settling(url)) for _ in range(9)]
        shards = {
            int(shard)
            for (shard,) in open_ones[0]
            .execute(
                "SELECT objid FROM pg_locks WHERE locktype = 'advisory'"
                " AND classid = hashtext('drainpipe.job_totals')::oid AND granted"
                # this test's database only: another test's settlers may hold shards too
                " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            )
            .fetchall()
        }
        assert len(shards) == 9 and shards <= set(range(SHARDS))
        for conn in open_ones:
            conn.commit()
    assert kept(url) == {"succeeded": 9} == recounted(url)


async def test_a_settler_past_the_last_free_shard_waits_for_its_own(
    jobs: Jobs, jobs_db_url: str
) -> None:
    url = jobs_db_url
    await enqueue(jobs, url, SHARDS + 1)
    waited: list[BaseException | None] = []

    def last_one() -> None:
        try:
            with settling(url, lock_timeout="0") as conn:
                conn.commit()
            waited.append(None)
        except BaseException as error:  # the test reports it
            waited.append(error)

    with ExitStack() as stack:
        open_ones = [stack.enter_context(settling(url)) for _ in range(SHARDS)]
        thread = threading.Thread(target=last_one)
        with psycopg.connect(url, autocommit=True) as watcher:
            thread.start()
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                row = watcher.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND wait_event_type = 'Lock' AND wait_event = 'advisory'"
                ).fetchone()
                if row is not None and row[0] == 1:
                    break
                await asyncio.sleep(0.05)
            else:
                pytest.fail("the 17th settler did not wait for a shard")
        assert waited == []
        for conn in open_ones:
            conn.commit()
    thread.join(30)
    assert waited == [None]
    assert kept(url) == {"succeeded": SHARDS + 1} == recounted(url)


async def test_racing_lanes_and_cancels_keep_the_totals_exact(jobs: Jobs, jobs_db_url: str) -> None:
    """Six lanes settling batches (successes, and failures that end dead) while another
    connection cancels jobs: the totals equal a count of the records, and stats() reads them."""
    url = jobs_db_url
    count = 600
    ids = await enqueue(jobs, url, count, max_attempts=1)

    async def handler(payload: dict[str, int], job: Any) -> None:
        await asyncio.sleep(0)
        if payload["n"] % 7 == 0:
            raise RuntimeError("fails once, so dead")

    async def canceller() -> int:
        cancelled = 0
        for job_id in ids[::-11]:  # from the end of the queue, ahead of the lanes
            cancelled += await jobs.cancel(QUEUE, job_id)
            await asyncio.sleep(0)
        return cancelled

    report, cancelled = await asyncio.gather(
        jobs.drain(QUEUE, handler, concurrency=6, batch=5, lease=60), canceller()
    )
    totals = kept(url)
    assert sum(totals.values()) == count
    assert totals.get("cancelled", 0) >= cancelled > 0
    assert totals.get("dead", 0) > 0 and report.succeeded > 0
    stats = (await jobs.stats([QUEUE]))[QUEUE]
    assert (stats.succeeded, stats.dead, stats.cancelled) == (
        totals.get("succeeded", 0),
        totals.get("dead", 0),
        totals.get("cancelled", 0),
    )
    assert totals == recounted(url)
