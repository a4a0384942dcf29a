"""Debounce and throttle on enqueue (docs/flow-control.md#debounce-and-throttle), on both
storages and the sync twin: what each returns and stores, and the ValueErrors."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from drainpipe import Jobs
from drainpipe.sync import Jobs as SyncJobs

QUEUES: dict[str, Any] = {"digests": dict[str, Any]}


async def test_debounce_moves_the_queued_job_and_takes_the_new_payload(jobs_db_url: str) -> None:
    async with Jobs(jobs_db_url, QUEUES) as jobs:
        first = await jobs.enqueue("digests", {"v": 1}, key="user-7", debounce=0.3)
        record = await jobs.get("digests", first)
        assert record is not None and record.eligible_at is not None
        before = record.eligible_at
        again = await jobs.enqueue("digests", {"v": 2}, key="user-7", debounce=0.3)
        assert again == first  # the queued job was moved, nothing new stored
        moved = await jobs.get("digests", first)
        assert moved is not None and moved.eligible_at is not None and moved.eligible_at > before
        other = await jobs.enqueue("digests", {"v": 1}, key="user-8", debounce=0.3)
        assert other != first
        assert await jobs.claim("digests", batch=10, lease=30) == []  # not eligible yet
        await asyncio.sleep(0.4)
        claimed = await jobs.claim("digests", batch=10, lease=30)
        assert {job.id: job.payload for job in claimed} == {first: {"v": 2}, other: {"v": 1}}
        # claimed: the next debounce starts a new job
        third = await jobs.enqueue("digests", {"v": 3}, key="user-7", debounce=0.3)
        assert third not in (first, other)


async def test_throttle_accepts_one_job_per_key_per_window(jobs_db_url: str) -> None:
    async with Jobs(jobs_db_url, QUEUES) as jobs:
        first = await jobs.enqueue("digests", {"v": 1}, key="k", throttle=0.3)
        (claimed,) = await jobs.claim("digests", batch=10, lease=30)
        assert await jobs.complete(claimed)
        # the window runs from the accepted enqueue, whatever that job's state since
        assert await jobs.enqueue("digests", {"v": 2}, key="k", throttle=0.3) == first
        assert (await jobs.stats(["digests"]))["digests"].ready == 0  # nothing stored
        # the tenant is the default key
        tenant = await jobs.enqueue(
            "digests", {"v": 1}, context={"tenant": "t"}, throttle=timedelta(seconds=0.3)
        )
        assert await jobs.enqueue("digests", {"v": 2}, key="t", throttle=0.3) == tenant
        await asyncio.sleep(0.35)
        assert await jobs.enqueue("digests", {"v": 3}, key="k", throttle=0.3) not in (first,)


async def test_bad_debounce_and_throttle_values_are_value_errors(jobs_db_url: str) -> None:
    async with Jobs(jobs_db_url, QUEUES) as jobs:
        for options in (
            {"debounce": 5},  # no key, no tenant
            {"throttle": 5},
            {"key": "k", "debounce": 0},
            {"key": "k", "throttle": -1},
            {"key": "k", "debounce": True},
            {"key": "k", "debounce": 5, "throttle": 5},
            {"key": "k", "debounce": 5, "delay": 3},
        ):
            with pytest.raises(ValueError, match=r"debounce|throttle"):
                await jobs.enqueue("digests", {}, **options)
        assert (await jobs.stats(["digests"]))["digests"].ready == 0


def test_the_sync_twin_debounces_and_throttles(jobs_db_url: str) -> None:
    with SyncJobs(jobs_db_url, QUEUES) as jobs:
        first = jobs.enqueue("digests", {"v": 1}, key="a", debounce=30)
        assert jobs.enqueue("digests", {"v": 2}, key="a", debounce=30) == first
        accepted = jobs.enqueue("digests", {"v": 1}, key="b", throttle=30)
        assert jobs.enqueue("digests", {"v": 2}, key="b", throttle=30) == accepted
        with pytest.raises(ValueError, match="key"):
            jobs.enqueue("digests", {}, debounce=5)


async def test_postgrest_debounces_and_throttles(jobs_db_url: str) -> None:
    from drainpipe.backends.postgrest import PostgrestBackend
    from tests.jobs.postgrest_emulation import BASE, SERVICE_KEY, postgrest_emulation

    async with (
        postgrest_emulation(jobs_db_url) as (server, _),
        PostgrestBackend(BASE, SERVICE_KEY) as backend,
    ):
        jobs = Jobs(backend, QUEUES)
        first = await jobs.enqueue("digests", {"v": 1}, key="a", debounce=30)
        assert await jobs.enqueue("digests", {"v": 2}, key="a", debounce=30) == first
        assert server.calls()[-1][0] == "enqueue_flow_v1"
        accepted = await jobs.enqueue("digests", {"v": 1}, key="b", throttle=30)
        assert await jobs.enqueue("digests", {"v": 2}, key="b", throttle=30) == accepted
        assert (await jobs.stats(["digests"]))["digests"].delayed == 1
