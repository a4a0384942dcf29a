"""Flow limits hold for every claimer (docs/flow-control.md): a second Jobs that declared
no policy, the fused turn, drain, PostgREST (respx routed to real Postgres) and the sync
twin, on both storages; key and priority go through every enqueue path."""

from __future__ import annotations

from typing import Any

from drainpipe import Job, Jobs, QueuePolicy
from drainpipe.backends.postgrest import PostgrestBackend
from drainpipe.sync import Jobs as SyncJobs
from tests.jobs.postgrest_emulation import BASE, SERVICE_KEY, postgrest_emulation

QUEUES: dict[str, Any] = {"llm": dict[str, Any]}
LIMITED = {"llm": QueuePolicy(key_concurrency=1, concurrency=3, lease=30, max_lease=600)}


async def store_limits(url: str) -> None:
    async with Jobs(url, QUEUES, policies=LIMITED) as declared:
        assert await declared.ensure_policies() == 1


async def check_limited(jobs: Jobs) -> None:
    """What any claimer of the limited queue sees, whatever its backend."""
    a = await jobs.enqueue_many("llm", [{"n": n} for n in range(3)], key="a")
    b = await jobs.enqueue("llm", {"n": 0}, key="b", priority=5)
    c = await jobs.enqueue("llm", {"n": 0}, context={"tenant": "c"})
    d = await jobs.enqueue("llm", {"n": 0})
    claimed = await jobs.claim("llm", batch=10)
    # one per key, three in all (concurrency=3): the oldest of each allowed group (a batch's
    # order is the claim's rows' order, which Postgres 18 may return otherwise than 15)
    assert sorted(job.id for job in claimed) == sorted([a[0], b, c])
    assert await jobs.claim("llm", batch=10) == []
    backend: Any = jobs.backend
    # the fused turn: the completion frees a place, the claim in the same call takes it
    refused, again = await backend.complete_and_claim("llm", claimed[:1], lease=30, batch=5)
    assert refused == [] and [job.id for job in again] == [a[1]]
    assert all([await jobs.complete(job) for job in [*claimed[1:], *again]])
    seen: list[int] = []

    async def handle(payload: Any, job: Job[Any]) -> None:
        seen.append(job.id)

    report = await jobs.drain("llm", handle, budget=5, concurrency=2, batch=5)
    assert report.succeeded == 2 and sorted(seen) == sorted([a[2], d])


async def test_a_writer_that_declared_nothing_obeys_the_stored_limits(jobs_db_url: str) -> None:
    await store_limits(jobs_db_url)
    async with Jobs(jobs_db_url, QUEUES) as undeclared:
        await check_limited(undeclared)


async def test_postgrest_claims_obey_the_limits(jobs_db_url: str) -> None:
    async with (
        postgrest_emulation(jobs_db_url) as (server, _),
        PostgrestBackend(BASE, SERVICE_KEY) as backend,
    ):
        declared = Jobs(backend, QUEUES, policies=LIMITED)
        assert await declared.ensure_policies() == 1
        assert server.calls()[-1][0] == "ensure_policy_v3"
        await check_limited(Jobs(backend, QUEUES))


def test_the_sync_twin_takes_keys_and_obeys_the_limits(jobs_db_url: str) -> None:
    import asyncio

    asyncio.run(store_limits(jobs_db_url))
    with SyncJobs(jobs_db_url, QUEUES) as jobs:
        first, second = jobs.enqueue_many("llm", [{"n": 1}, {"n": 2}], key="a", priority=3)
        other = jobs.enqueue("llm", {"n": 3}, key="b")
        claimed = jobs.claim("llm", batch=10)
        assert sorted(job.id for job in claimed) == sorted([first, other])
        assert jobs.claim("llm", batch=10) == []
        assert jobs.complete(claimed[0])
        assert [job.id for job in jobs.claim("llm", batch=10)] == [second]


async def test_postgrest_records_say_what_holds_them(jobs_db_url: str) -> None:
    async with (
        postgrest_emulation(jobs_db_url) as (server, _),
        PostgrestBackend(BASE, SERVICE_KEY) as backend,
    ):
        jobs = Jobs(backend, QUEUES, policies=LIMITED)
        await jobs.ensure_policies()
        first, second = await jobs.enqueue_many("llm", [{"n": 1}, {"n": 2}], key="a")
        assert len(await jobs.claim("llm", batch=5)) == 1
        record = await jobs.get("llm", second)
        assert record is not None and record.held_by == "concurrency"
        assert server.calls()[-1][0] == "flow_holds_v1"
        page = await jobs.list_jobs("llm")
        assert [item.held_by for item in page.items] == ["concurrency", None]
        assert first != second
