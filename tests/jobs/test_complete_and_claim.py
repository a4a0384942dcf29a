"""A lane's turn in one call (issue 21): the completions of the batch it ran and the claim of
its next batch, fenced exactly as on their own, atomic, on every backend that has it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from drainpipe import DrainpipeError, Job, Jobs, QueuePolicy
from drainpipe.backends.capabilities import SupportsCompleteAndClaim
from drainpipe.backends.memory import Clock, MemoryBackend
from drainpipe.backends.postgrest import PostgrestBackend
from drainpipe.sync import Jobs as SyncJobs
from tests.conftest import connect
from tests.jobs.postgrest_emulation import BASE, SERVICE_KEY, postgrest_emulation

QUEUES: dict[str, Any] = {"emails": dict[str, Any]}


@dataclass
class Env:
    jobs: Jobs
    other: Jobs  # a second worker (its own connections on the SQL backends)
    url: str | None
    clock: Clock | None

    async def pass_time(self, seconds: float) -> None:
        if self.clock is not None:
            self.clock.advance(seconds)
        else:
            await asyncio.sleep(seconds)

    def fused(self) -> SupportsCompleteAndClaim:
        backend = self.jobs.backend
        assert isinstance(backend, SupportsCompleteAndClaim)
        return backend


@pytest.fixture(params=["table", "pgmq", "memory", "table-postgrest", "pgmq-postgrest"])
async def env(request: pytest.FixtureRequest, fresh_database: Any) -> AsyncIterator[Env]:
    if request.param == "memory":
        clock = Clock()
        backend = MemoryBackend(now=clock)
        yield Env(Jobs(backend, QUEUES), Jobs(backend, QUEUES), None, clock)
        return
    if request.param.endswith("-postgrest"):  # drainpipe_api.complete_and_claim_v1 over HTTP
        url = str(fresh_database(request.param.removesuffix("-postgrest")))
        async with postgrest_emulation(url), PostgrestBackend(BASE, SERVICE_KEY) as http:
            other = Jobs(url, QUEUES)
            yield Env(Jobs(http, QUEUES), other, url, None)
            await other.close()
        return
    url = str(fresh_database(request.param))
    jobs, other = Jobs(url, QUEUES), Jobs(url, QUEUES)
    yield Env(jobs, other, url, None)
    await jobs.close()
    await other.close()


async def _state(env: Env, job_id: int) -> tuple[str, int]:
    record = await env.jobs.get("emails", job_id)
    assert record is not None
    return record.state, record.attempts


async def test_one_call_settles_exactly_the_current_completions_and_claims(env: Env) -> None:
    jobs = env.jobs
    stale_id = await jobs.enqueue("emails", {"n": "stale"})
    [stale] = await jobs.claim("emails", lease=0.2)
    ids = [await jobs.enqueue("emails", {"n": n}) for n in ("a", "cancelled", "d")]
    current_a, cancelled, current_d = await jobs.claim("emails", batch=3, lease=60)
    await env.pass_time(0.3)
    [taken_over] = await env.other.claim("emails", lease=60)  # the stale holder lost it
    assert (taken_over.id, taken_over.attempts) == (stale_id, 2)
    assert await env.other.cancel("emails", cancelled.id) is True
    waiting = [await jobs.enqueue("emails", {"n": n}) for n in ("e", "f", "g")]

    refused, claimed = await env.fused().complete_and_claim(
        "emails", [current_a, stale, cancelled, current_d], lease=60, batch=2
    )

    assert sorted(job.id for job in refused) == sorted([stale.id, cancelled.id])
    assert [job.id for job in claimed] == waiting[:2]
    assert all(job.attempts == 1 and job.queue == "emails" for job in claimed)
    assert [job.payload for job in claimed] == [{"n": "e"}, {"n": "f"}]
    assert await _state(env, ids[0]) == ("succeeded", 1)
    assert await _state(env, ids[2]) == ("succeeded", 1)
    # the stale completion changed nothing: the job is the new holder's, who completes it
    assert await _state(env, stale_id) == ("leased", 2)
    assert await env.other.complete(taken_over) is True
    # the cancelled attempt keeps what its holder reported, and stays cancelled
    record = await jobs.get("emails", cancelled.id)
    assert record is not None and record.state == "cancelled"
    assert record.history[-1].late_outcome == "succeeded"
    # the claimed jobs are leased to this caller: a plain completion fenced by their attempt
    assert await jobs.complete(claimed[0]) is True
    assert await _state(env, waiting[2]) == ("queued", 0)


async def test_nothing_to_complete_is_a_plain_claim_and_nothing_due_a_plain_completion(
    env: Env,
) -> None:
    first = await env.jobs.enqueue("emails", {"n": 1})
    refused, claimed = await env.fused().complete_and_claim("emails", [], lease=60, batch=5)
    assert (refused, [job.id for job in claimed]) == ([], [first])
    refused, claimed = await env.fused().complete_and_claim("emails", claimed, lease=60, batch=5)
    assert (refused, claimed) == ([], [])
    assert await _state(env, first) == ("succeeded", 1)


async def test_a_crash_between_fused_calls_loses_nothing(env: Env) -> None:
    """A worker killed right after a fused call: the batch it settled stays settled, the
    batch it had just claimed comes back when the lease runs out and another worker runs
    it. Each job ends succeeded; none ran more than twice (at least once, never lost)."""
    ids = [await env.jobs.enqueue("emails", {"n": n}) for n in range(10)]
    ran: list[int] = []
    second_batch = asyncio.Event()

    async def handler(payload: Any, job: Job[Any]) -> None:
        ran.append(job.id)
        if job.id in ids[5:]:
            second_batch.set()
            await asyncio.sleep(30)  # the worker dies in here

    crashed = asyncio.create_task(env.jobs.drain("emails", handler, batch=5, lease=1))
    await asyncio.wait_for(second_batch.wait(), 5)
    crashed.cancel()  # killed: no settlement, no release
    with pytest.raises(asyncio.CancelledError):
        await crashed
    assert [await _state(env, job_id) for job_id in ids[:5]] == [("succeeded", 1)] * 5
    assert [await _state(env, job_id) for job_id in ids[5:]] == [("leased", 1)] * 5

    await env.pass_time(1.2)
    reran: list[int] = []

    async def survivor(payload: Any, job: Job[Any]) -> None:
        reran.append(job.id)

    report = await env.other.drain("emails", survivor, batch=5, lease=60)
    assert (report.succeeded, report.failed) == (5, 0)
    assert sorted(reran) == ids[5:]
    assert [await _state(env, job_id) for job_id in ids[5:]] == [("succeeded", 2)] * 5
    stats = (await env.jobs.stats(["emails"]))["emails"]
    assert (stats.succeeded, stats.ready, stats.in_flight, stats.dead) == (10, 0, 0, 0)
    assert ran[:5] == ids[:5] and ran[5] == ids[5]


async def test_a_lane_sends_one_call_per_batch() -> None:
    """The runner's side, counted on the memory backend: the first claim alone, then one
    fused call per batch (the last one finds nothing), no completion on its own."""
    calls: list[str] = []

    class Counting(MemoryBackend):
        async def read(self, queue: str, *, lease: float, batch: int) -> list[Job[Any]]:
            calls.append("claim")
            return await super().read(queue, lease=lease, batch=batch)

        async def complete_many(self, jobs: Any) -> list[bool]:
            calls.append("complete")
            return await super().complete_many(jobs)

        async def complete(self, job: Job[Any]) -> bool:
            calls.append("complete")
            return await super().complete(job)

        async def complete_and_claim(
            self, queue: str, jobs: Any, *, lease: float, batch: int
        ) -> tuple[list[Job[Any]], list[Job[Any]]]:
            calls.append(f"complete {len(jobs)} and claim")
            return await super().complete_and_claim(queue, jobs, lease=lease, batch=batch)

    jobs = Jobs(Counting(), QUEUES)
    await jobs.enqueue_many("emails", [{"n": n} for n in range(30)])
    report = await jobs.drain("emails", lambda payload, job: None, batch=10)
    assert report.succeeded == 30
    assert calls == ["claim"] + ["complete 10 and claim"] * 3
    assert (await jobs.stats(["emails"]))["emails"].succeeded == 30


async def test_a_stale_completion_inside_the_fused_call_is_reported_for_that_job(
    env: Env,
) -> None:
    """Through the runner: a job taken over while its handler ran is reported lost by the
    fused call that carries its completion; the rest of that call stands."""
    first = [await env.jobs.enqueue("emails", {"n": n}) for n in range(3)]
    errors: list[tuple[str | None, int]] = []
    later: list[int] = []
    taken: list[int] = []

    async def handler(payload: Any, job: Job[Any]) -> None:
        if job.id == first[2] and not later:
            # the lease of this batch runs out while the handler runs; another worker takes
            # one of its jobs over, then more work arrives for the lane's next claim
            await env.pass_time(0.5)
            taken.extend(job.id for job in await env.other.claim("emails", lease=60))
            later.extend([await env.jobs.enqueue("emails", {"n": n}) for n in range(2)])

    report = await env.jobs.drain(
        "emails",
        handler,
        batch=3,
        lease=0.4,
        heartbeat_every=30,  # no beat finds the loss first: the settlement must
        on_error=lambda error, job: errors.append((getattr(error, "code", None), job.id)),
    )
    [lost] = taken
    assert errors == [("LEASE_LOST", lost)]
    assert report.succeeded == 5  # the handler did run; its completion was refused
    assert await _state(env, lost) == ("leased", 2)
    # the other two of the batch went in the same call as the claim of the next two
    kept = [job_id for job_id in first if job_id != lost]
    assert [await _state(env, job_id) for job_id in kept] == [("succeeded", 1)] * 2
    assert [await _state(env, job_id) for job_id in later] == [("succeeded", 1)] * 2


async def test_a_fused_call_that_fails_settles_the_finished_batch_alone(
    fresh_database: Any, backend_name: str
) -> None:
    """The claim half refused (a lease longer than the queue's max_lease, by a writer that
    does not know the policy): the batch's successes are completed on their own before the
    drain raises, so no handler runs again."""
    url = str(fresh_database(backend_name))
    declared = Jobs(
        url, {"inbox": dict[str, Any]}, policies={"inbox": QueuePolicy(lease=5, max_lease=10)}
    )
    assert await declared.ensure_policies() == 1
    undeclared = Jobs(url, {"inbox": dict[str, Any]})
    ids = [await undeclared.enqueue("inbox", {"n": n}) for n in range(4)]
    leases = iter([5.0, 600.0])
    lease: Callable[[], float] = lambda: next(leases, 600.0)  # noqa: E731
    ran: list[int] = []

    async def handler(payload: Any, job: Job[Any]) -> None:
        ran.append(job.id)

    with pytest.raises(DrainpipeError) as refused:
        await undeclared.drain("inbox", handler, batch=2, lease=lease)
    assert refused.value.code == "LEASE_TOO_LONG"
    assert ran == ids[:2]
    states = [await declared.get("inbox", job_id) for job_id in ids]
    assert [(r.state, r.attempts) for r in states if r] == [("succeeded", 1)] * 2 + [
        ("queued", 0)
    ] * 2
    await declared.close()
    await undeclared.close()


@pytest.mark.parametrize("backend", ["table", "pgmq"])
def test_the_sync_twin_fuses_the_same_way(fresh_database: Any, backend: str) -> None:
    url = str(fresh_database(backend))
    with SyncJobs(url, QUEUES) as jobs, SyncJobs(url, QUEUES) as other:
        stale_id = jobs.enqueue("emails", {"n": "stale"})
        [stale] = jobs.claim("emails", lease=0.2)
        current = jobs.enqueue("emails", {"n": "current"})
        [held] = jobs.claim("emails", lease=60)
        time.sleep(0.3)
        [taken] = other.claim("emails", lease=60)
        assert taken.id == stale_id
        waiting = jobs.enqueue("emails", {"n": "next"})
        refused, claimed = jobs.backend.complete_and_claim(
            "emails", [stale, held], lease=60, batch=5
        )
        assert [job.id for job in refused] == [stale_id]
        assert [job.id for job in claimed] == [waiting]
        record = jobs.get("emails", current)
        assert record is not None and record.state == "succeeded"

        ran: list[int] = []
        for n in range(7):
            jobs.enqueue("emails", {"n": n})
        report = jobs.drain("emails", lambda payload, job: ran.append(job.id), batch=3)
        assert report.succeeded == 7 and len(set(ran)) == 7


async def test_first_turns_on_a_new_pgmq_queue_race_safely(fresh_database: Any) -> None:
    """The first turn on a pgmq queue generates that queue's turn function: six sessions
    taking their first turn at once all get an answer, and no job goes to two of them."""
    url = str(fresh_database("pgmq"))
    jobs = Jobs(url, {"fresh": dict[str, Any]})
    await jobs.enqueue_many("fresh", [{"n": n} for n in range(40)])
    sessions = [await connect(url) for _ in range(6)]
    try:
        answers = await asyncio.gather(
            *(
                session.execute(
                    "SELECT id FROM drainpipe.complete_and_claim_jobs_v1(%s, '{}', '{}', 30, 5)",
                    ("fresh",),
                )
                for session in sessions
            )
        )
        claimed = [row[0] for answer in answers for row in await answer.fetchall()]
    finally:
        for session in sessions:
            await session.close()
    assert len(claimed) == 30 and len(set(claimed)) == 30
    stats = (await jobs.stats(["fresh"]))["fresh"]
    assert (stats.in_flight, stats.ready) == (30, 10)
    await jobs.close()
