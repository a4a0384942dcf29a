"""Pausing a queue (docs/policies.md#pause): no claimer takes a paused queue's jobs, on
both storages, over a direct connection, the fused turn, PostgREST (respx on real
Postgres), the sync twin and the in-memory backend; enqueues go on; stats, records and the
drain report show it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from drainpipe import DrainpipeError, Job, Jobs
from drainpipe.backends.postgrest import PostgrestBackend
from drainpipe.sync import Jobs as SyncJobs
from drainpipe.testing import MemoryBackend
from tests.jobs.postgrest_emulation import BASE, SERVICE_KEY, postgrest_emulation

QUEUES: dict[str, Any] = {"emails": dict[str, Any], "push": dict[str, Any]}


async def check_pause(jobs: Jobs) -> None:
    """The contract of pause/resume on one Jobs, whatever its backend."""
    first = await jobs.enqueue("emails", {"n": 1})
    await jobs.enqueue("push", {"n": 1})
    assert await jobs.pause("emails") is True
    assert await jobs.pause("emails") is False  # paused already
    assert await jobs.claim("emails", batch=10) == []
    second = await jobs.enqueue("emails", {"n": 2})  # enqueues go on
    assert second != first
    assert len(await jobs.claim("push", batch=10)) == 1  # other queues are not held
    stats = await jobs.stats()
    assert stats["emails"].paused is True and stats["emails"].ready == 2
    assert stats["push"].paused is False
    record = await jobs.get("emails", first)
    assert record is not None and record.state == "queued" and record.held_by == "paused"
    page = await jobs.list_jobs("emails")
    assert [item.held_by for item in page.items] == ["paused", "paused"]

    assert await jobs.resume("emails") is True
    assert await jobs.resume("emails") is False  # running already
    assert (await jobs.stats(["emails"]))["emails"].paused is False
    record = await jobs.get("emails", first)
    assert record is not None and record.held_by is None
    claimed = await jobs.claim("emails", batch=10)
    assert sorted(job.id for job in claimed) == sorted([first, second])
    # a leased job is not held: the pause stops claims, not the jobs running
    await jobs.pause("emails")
    record = await jobs.get("emails", first)
    assert record is not None and record.state == "leased" and record.held_by is None
    assert all([await jobs.complete(job) for job in claimed])

    with pytest.raises(DrainpipeError) as refused:
        await jobs.pause("nosuchqueue")
    assert refused.value.kind == "invalid_request"


async def test_pause_holds_every_claim_on_both_storages(jobs_db_url: str) -> None:
    async with Jobs(jobs_db_url, QUEUES) as jobs:
        await check_pause(jobs)


async def test_pause_on_the_memory_backend() -> None:
    await check_pause(Jobs(MemoryBackend(), QUEUES))


async def test_pause_over_postgrest(jobs_db_url: str) -> None:
    async with (
        postgrest_emulation(jobs_db_url) as (server, _),
        PostgrestBackend(BASE, SERVICE_KEY) as backend,
    ):
        await check_pause(Jobs(backend, QUEUES))
        called = {name for name, _ in server.calls()}
        assert {"pause_v1", "resume_v1", "paused_v1", "stats_v4", "claim_v1"} <= called


async def test_a_turn_completes_but_claims_nothing_while_paused(jobs_db_url: str) -> None:
    async with Jobs(jobs_db_url, QUEUES) as jobs:
        await jobs.enqueue_many("emails", [{"n": n} for n in range(3)])
        held = await jobs.claim("emails", batch=1)
        await jobs.pause("emails")
        backend: Any = jobs.backend
        refused, claimed = await backend.complete_and_claim("emails", held, lease=30, batch=5)
        assert refused == [] and claimed == []
        record = await jobs.get("emails", held[0].id)
        assert record is not None and record.state == "succeeded"
        # work/drain return at once on a paused queue and leave its jobs queued
        seen: list[int] = []

        async def handle(payload: Any, job: Job[Any]) -> None:
            seen.append(job.id)

        report = await jobs.drain("emails", handle, budget=5)
        assert (report.succeeded, report.failed, seen) == (0, 0, [])
        await jobs.resume("emails")
        report = await jobs.drain("emails", handle, budget=5)
        assert report.succeeded == 2


async def test_no_claim_that_starts_after_pause_returns_takes_a_job(jobs_db_url: str) -> None:
    """Claimers race on their own connections while the queue is paused: once pause() has
    returned, no claim that starts afterwards gets a job."""
    async with Jobs(jobs_db_url, QUEUES) as jobs:
        await jobs.enqueue_many("emails", [{"n": n} for n in range(400)])
        paused = asyncio.Event()
        late: list[int] = []
        claimers = [Jobs(jobs_db_url, QUEUES) for _ in range(4)]

        async def claim_until_paused(claimer: Jobs) -> None:
            for _ in range(200):
                started_after_pause = paused.is_set()
                got = await claimer.claim("emails", batch=1, lease=30)
                if started_after_pause:
                    late.extend(job.id for job in got)
                    return

        async def pause_midway() -> None:
            while (await jobs.stats(["emails"]))["emails"].ready > 380:
                await asyncio.sleep(0)
            await jobs.pause("emails")
            paused.set()

        try:
            await asyncio.gather(pause_midway(), *(claim_until_paused(c) for c in claimers))
        finally:
            for claimer in claimers:
                await claimer.close()
        assert late == []
        stats = (await jobs.stats(["emails"]))["emails"]
        assert stats.paused and 0 < stats.ready < 400


async def test_the_drain_report_names_paused_queues(db_url: str) -> None:
    async with Jobs(db_url, QUEUES) as jobs:
        await jobs.enqueue("emails", {"n": 1})
        await jobs.enqueue("push", {"n": 1})
        await jobs.pause("emails")

        async def handle(payload: Any, job: Job[Any]) -> None:
            return None

        route = jobs.drain_route(
            secret="s" * 32, handlers={"emails": handle, "push": handle}, budget=5
        )
        result = await route.run()
        assert result["paused"] == ["emails"]
        assert result["queues"]["push"] == {"succeeded": 1, "failed": 0}
        assert result["more"] is False  # a paused queue's jobs are not work left


@pytest.fixture
def sync_jobs(jobs_db_url: str) -> Iterator[SyncJobs]:
    with SyncJobs(jobs_db_url, QUEUES) as jobs:
        yield jobs


def test_the_sync_twin_pauses_alike(sync_jobs: SyncJobs) -> None:
    job_id = sync_jobs.enqueue("emails", {"n": 1})
    assert sync_jobs.pause("emails") is True
    assert sync_jobs.claim("emails", batch=5) == []
    assert sync_jobs.stats(["emails"])["emails"].paused is True
    record = sync_jobs.get("emails", job_id)
    assert record is not None and record.held_by == "paused"
    records, _ = sync_jobs.list_records("emails")
    assert [r.held_by for r in records] == ["paused"]
    assert sync_jobs.resume("emails") is True
    assert [job.id for job in sync_jobs.claim("emails", batch=5)] == [job_id]
