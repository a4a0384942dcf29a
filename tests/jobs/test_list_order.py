"""``list_jobs`` is newest first by ``enqueued_at``, then id, then queue, across queues, on
every backend (docs/reference.md, job records), and its cursors walk that order exactly.

pgmq numbers each queue on its own: sorted by (id, queue), a fresh job of a quiet queue
came after every older job of a busy one, so the Job Inbox's all-queues view hid it. The
table's ids come from one sequence, but transactions commit in another order than they draw
ids. (How ids and stamps agree, so that the list needs no index on ``enqueued_at``:
test_list_stamps.py.)"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from drainpipe import Jobs
from drainpipe.backends.memory import MemoryBackend
from drainpipe.backends.postgrest import PostgrestBackend
from drainpipe.models import Position
from tests.jobs.postgrest_emulation import postgrest_emulation
from tests.jobs.test_pgmq_public import BASE, SERVICE_KEY

QUEUES: dict[str, Any] = {"busy": dict[str, Any], "quiet": dict[str, Any]}


def newest_first(records: list[Any]) -> bool:
    keys = [(r.enqueued_at, r.id, r.queue) for r in records]
    return keys == sorted(keys, reverse=True) and len(set(keys)) == len(keys)


async def walk(jobs: Jobs, limit: int, **filters: Any) -> list[Any]:
    seen: list[Any] = []
    cursor = None
    for _ in range(100):
        page = await jobs.list_jobs(limit=limit, cursor=cursor, **filters)
        seen += page.items
        cursor = page.next_cursor
        if cursor is None:
            return seen
    raise AssertionError("the listing never ended")


async def check_quiet_queue_first(jobs: Jobs) -> None:
    await jobs.enqueue_many("busy", [{"n": n} for n in range(6)])
    quiet = await jobs.enqueue("quiet", {"n": 0})
    page = await jobs.list_jobs(limit=3)
    assert (page.items[0].queue, page.items[0].id) == ("quiet", quiet), page.items
    everything = await walk(jobs, limit=2)
    assert len(everything) == 7 and newest_first(everything), everything
    assert [r.queue for r in await walk(jobs, limit=4, queue="busy")] == ["busy"] * 6


async def test_a_quiet_queues_fresh_job_comes_first(jobs_db_url: str) -> None:
    async with Jobs(jobs_db_url, QUEUES) as jobs:
        await check_quiet_queue_first(jobs)


async def test_memory_backend_lists_in_the_same_order() -> None:
    await check_quiet_queue_first(Jobs(MemoryBackend(), QUEUES))


async def test_postgrest_lists_in_the_same_order(jobs_db_url: str) -> None:
    async with (
        postgrest_emulation(jobs_db_url) as (server, _),
        PostgrestBackend(BASE, SERVICE_KEY) as backend,
    ):
        await check_quiet_queue_first(Jobs(backend, QUEUES))
        assert {fn for fn, _ in server.calls()} >= {"list_jobs_v2"}


async def test_ties_and_overlapping_transactions_follow_enqueued_at(jobs_db_url: str) -> None:
    async with (
        await psycopg.AsyncConnection.connect(jobs_db_url) as early,
        await psycopg.AsyncConnection.connect(jobs_db_url) as late,
    ):
        # `early` begins first and commits last: its jobs are stamped when their ids are
        # drawn (not at the transaction's start, now())
        await early.execute("SELECT now()")
        await Jobs(late, QUEUES).enqueue("busy", {"n": "late"})
        await late.commit()
        # one transaction, two queues (on pgmq two id sequences, so ids may be equal)
        in_early = Jobs(early, QUEUES)
        await in_early.enqueue("busy", {"n": "early"})
        await in_early.enqueue("quiet", {"n": "early"})
        await early.commit()
    async with Jobs(jobs_db_url, QUEUES) as jobs:
        listed = await walk(jobs, limit=1)
        assert newest_first(listed), listed
        assert len(listed) == 3


def test_positions_carry_the_time_to_the_microsecond() -> None:
    from datetime import UTC, datetime

    at = datetime(2026, 12, 3, 8, 37, 34, 123456, tzinfo=UTC)
    position = Position(42, "emails", at)
    assert Position.parse(str(position)) == position
    assert Position.parse("42.emails") == Position(42, "emails")  # the previous release's
    for bad in ("42.emails.", "42.emails.1.2", "42.emails.x", "42.emails.999999999999999999"):
        with pytest.raises(ValueError, match="position"):
            Position.parse(bad)
