"""Priorities in the claim (docs/flow-control.md#priorities): higher first, then earliest
eligible, then id, within a queue and within what its limits allow; on both storages, for
every claimer (claim, the fused turn, drain, PostgREST, the sync twin), and for claimers on
separate pools racing each other. A queue without prioritised jobs keeps its plain claim."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg

from drainpipe import Job, Jobs, QueuePolicy
from drainpipe.backends.postgrest import PostgrestBackend
from drainpipe.sync import Jobs as SyncJobs
from tests.jobs.postgrest_emulation import BASE, SERVICE_KEY, postgrest_emulation

QUEUES: dict[str, Any] = {"llm": dict[str, Any], "plain": dict[str, Any]}
BIG = 2**31 - 1


async def enqueue_mixed(jobs: Jobs) -> dict[str, int]:
    """Jobs enqueued lowest priority first, so a FIFO claim would get them backwards."""
    ids: dict[str, int] = {}
    ids["low"] = await jobs.enqueue("llm", {"n": "low"}, priority=-5)
    ids["zero_1"] = await jobs.enqueue("llm", {"n": "zero_1"})
    ids["mid_1"] = await jobs.enqueue("llm", {"n": "mid_1"}, priority=5)
    ids["zero_2"] = await jobs.enqueue("llm", {"n": "zero_2"})
    ids["mid_2"] = await jobs.enqueue("llm", {"n": "mid_2"}, priority=5)
    ids["top"] = await jobs.enqueue("llm", {"n": "top"}, priority=100)
    return ids


EXPECTED = ["top", "mid_1", "mid_2", "zero_1", "zero_2", "low"]


async def claim_one_by_one(jobs: Jobs, queue: str = "llm") -> list[int]:
    order: list[int] = []
    while claimed := await jobs.claim(queue, batch=1):
        order.extend(job.id for job in claimed)
    return order


async def test_claims_take_higher_priorities_first(jobs_db_url: str) -> None:
    async with Jobs(jobs_db_url, QUEUES) as jobs:
        ids = await enqueue_mixed(jobs)
        assert await claim_one_by_one(jobs) == [ids[name] for name in EXPECTED]


async def test_a_batch_takes_the_highest_and_a_retry_keeps_its_priority(jobs_db_url: str) -> None:
    async with Jobs(jobs_db_url, QUEUES) as jobs:
        ids = await enqueue_mixed(jobs)
        first = await jobs.claim("llm", batch=3)
        assert sorted(job.id for job in first) == sorted([ids["top"], ids["mid_1"], ids["mid_2"]])
        # the top job fails and is eligible again at once: it goes before the zeros
        top = next(job for job in first if job.id == ids["top"])
        assert await jobs.fail(top, "boom", retry_in=0) == "queued"
        again = await jobs.claim("llm", batch=2)
        assert sorted(job.id for job in again) == sorted([ids["top"], ids["zero_1"]])


async def test_a_queue_without_priorities_keeps_its_plain_claim(jobs_db_url: str) -> None:
    async with Jobs(jobs_db_url, QUEUES) as jobs:
        plain = await jobs.enqueue_many("plain", [{"n": n} for n in range(3)])
        await enqueue_mixed(jobs)
        assert await claim_one_by_one(jobs, "plain") == plain
    with psycopg.connect(jobs_db_url, autocommit=True) as conn:
        rows = conn.execute("SELECT queue, levels FROM drainpipe.queue_priorities").fetchall()
    # only the queue that got a non-zero priority is marked, with the levels it was given
    assert rows == [("llm", [100, 5, 0, -5])]


async def test_enqueue_many_marks_the_queue_and_its_levels(jobs_db_url: str) -> None:
    async with Jobs(jobs_db_url, QUEUES) as jobs:
        plain = await jobs.enqueue_many("llm", [{"n": n} for n in range(2)])
        urgent = await jobs.enqueue_many("llm", [{"n": n} for n in range(2)], priority=7)
        assert await claim_one_by_one(jobs) == urgent + plain


async def test_racing_claimers_see_high_priority_first(jobs_db_url: str) -> None:
    """8 claimers on pools of their own race over a backlog enqueued low priority first. A
    claimer that got a low job never gets a high one afterwards: once no high job was free
    to it, every high job was taken (and stays leased)."""
    async with Jobs(jobs_db_url, QUEUES) as jobs:
        low = set(await jobs.enqueue_many("llm", [{"n": n} for n in range(60)], priority=-1))
        mid = set(await jobs.enqueue_many("llm", [{"n": n} for n in range(60)]))
        high = set(await jobs.enqueue_many("llm", [{"n": n} for n in range(60)], priority=9))
    rank = {**dict.fromkeys(low, 0), **dict.fromkeys(mid, 1), **dict.fromkeys(high, 2)}
    claimers = [Jobs(jobs_db_url, QUEUES) for _ in range(8)]
    seen: list[list[int]] = [[] for _ in claimers]
    taken: list[int] = []

    async def claim_all(n: int) -> None:
        while claimed := await claimers[n].claim("llm", batch=3, lease=300):
            taken.extend(job.id for job in claimed)
            seen[n].extend(sorted((rank[job.id] for job in claimed), reverse=True))

    try:
        await asyncio.gather(*(claim_all(n) for n in range(len(claimers))))
    finally:
        for claimer in claimers:
            await claimer.close()
    assert sorted(taken) == sorted(rank)  # each job once
    assert sum(1 for ranks in seen if ranks) > 1  # they did race
    for ranks in seen:
        assert ranks == sorted(ranks, reverse=True)


async def test_priority_within_key_limits_and_ordered_groups(jobs_db_url: str) -> None:
    policy = QueuePolicy(max_pending=BIG, lease=30, max_lease=60, key_concurrency=1)
    async with Jobs(jobs_db_url, QUEUES, policies={"llm": policy}) as jobs:
        await jobs.ensure_policies()
        a = await jobs.enqueue_many("llm", [{"n": n} for n in range(2)], key="a")
        b = await jobs.enqueue("llm", {"n": 0}, key="b", priority=5)
        b2 = await jobs.enqueue("llm", {"n": 1}, key="b", priority=9)
        c = await jobs.enqueue("llm", {"n": 0}, key="c", priority=-3)
        # one per key, the highest of each key, the keys' picks by priority
        assert [job.id for job in await jobs.claim("llm", batch=1)] == [b2]
        assert [job.id for job in await jobs.claim("llm", batch=1)] == [a[0]]
        assert [job.id for job in await jobs.claim("llm", batch=1)] == [c]
        assert await jobs.claim("llm", batch=5) == []
        ordered = QueuePolicy(max_pending=BIG, lease=30, max_lease=60, ordered=True)
        assert b != b2
    async with Jobs(jobs_db_url, {"ledger": dict[str, Any]}, policies={"ledger": ordered}) as led:
        await led.ensure_policies()
        first = await led.enqueue("ledger", {"n": 0}, key="acct")
        second = await led.enqueue("ledger", {"n": 1}, key="acct", priority=50)
        other = await led.enqueue("ledger", {"n": 2}, key="other", priority=10)
        # ordered groups keep enqueue order whatever the priority; groups go by priority
        claimed = await led.claim("ledger", batch=1)
        assert [job.id for job in claimed] == [other]
        claimed += await led.claim("ledger", batch=5)
        assert [job.id for job in claimed] == [other, first]
        assert await led.complete(claimed[1])
        assert [job.id for job in await led.claim("ledger", batch=5)] == [second]


async def test_priority_within_a_queue_wide_concurrency(jobs_db_url: str) -> None:
    policy = QueuePolicy(max_pending=BIG, lease=30, max_lease=60, concurrency=2)
    async with Jobs(jobs_db_url, QUEUES, policies={"llm": policy}) as jobs:
        await jobs.ensure_policies()
        ids = await enqueue_mixed(jobs)
        first = await jobs.claim("llm", batch=10)
        assert sorted(job.id for job in first) == sorted([ids["top"], ids["mid_1"]])
        assert await jobs.claim("llm", batch=10) == []
        assert await jobs.complete(first[0])
        assert [job.id for job in await jobs.claim("llm", batch=10)] == [ids["mid_2"]]


async def test_the_turn_and_drain_take_priorities_first(jobs_db_url: str) -> None:
    async with Jobs(jobs_db_url, QUEUES) as jobs:
        ids = await enqueue_mixed(jobs)
        backend: Any = jobs.backend
        first = await jobs.claim("llm", batch=1)
        refused, again = await backend.complete_and_claim("llm", first, lease=30, batch=1)
        assert refused == [] and [job.id for job in [*first, *again]] == [ids["top"], ids["mid_1"]]
        assert await jobs.complete(again[0])
        seen: list[int] = []

        async def handle(payload: Any, job: Job[Any]) -> None:
            seen.append(job.id)

        report = await jobs.drain("llm", handle, budget=10, concurrency=1, batch=1)
        assert report.succeeded == 4
        assert seen == [ids[name] for name in EXPECTED[2:]]


async def test_postgrest_claims_take_priorities_first(jobs_db_url: str) -> None:
    async with (
        postgrest_emulation(jobs_db_url) as _,
        PostgrestBackend(BASE, SERVICE_KEY) as backend,
    ):
        jobs = Jobs(backend, QUEUES)
        ids = await enqueue_mixed(jobs)
        assert await claim_one_by_one(jobs) == [ids[name] for name in EXPECTED]


def test_the_sync_twin_claims_priorities_first(jobs_db_url: str) -> None:
    with SyncJobs(jobs_db_url, QUEUES) as jobs:
        low = jobs.enqueue("llm", {"n": 0}, priority=-1)
        plain = jobs.enqueue_many("llm", [{"n": 1}, {"n": 2}])
        high = jobs.enqueue("llm", {"n": 3}, priority=1)
        order = []
        while claimed := jobs.claim("llm", batch=1):
            order.extend(job.id for job in claimed)
        assert order == [high, *plain, low]


async def test_a_debounce_that_brings_a_new_priority_is_claimed_at_it(jobs_db_url: str) -> None:
    """A debounced job rewritten with a priority the queue never had: the claim reads that
    level too (a level the claim does not know would never be claimed)."""
    async with Jobs(jobs_db_url, QUEUES) as jobs:
        other = await jobs.enqueue("llm", {"n": 0}, priority=5)
        first = await jobs.enqueue("llm", {"v": 1}, key="user-7", debounce=0.05)
        again = await jobs.enqueue("llm", {"v": 2}, key="user-7", debounce=0.05, priority=7)
        assert again == first
        await asyncio.sleep(0.2)
        assert await claim_one_by_one(jobs) == [first, other]
