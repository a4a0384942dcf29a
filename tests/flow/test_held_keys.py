"""A claim past held keys: the limited pick reads its candidates in passes that
probe each key as they go, so it finds the free keys behind a run of held jobs longer than
its first pass, counts two jobs of one key in one pass against that key's limit, and stops
at the documented bound (``batch x 50 + 500`` candidates), on both storages."""

from __future__ import annotations

from datetime import datetime, timedelta

import psycopg
import pytest

from tests.flow.test_limits import limited


async def test_a_claim_reads_past_held_jobs_to_the_free_keys(jobs_db_url: str) -> None:
    async with await limited(jobs_db_url, key_concurrency=2) as jobs:
        busy = await jobs.enqueue_many("llm", [{"n": n} for n in range(60)], key="busy")
        free = [await jobs.enqueue("llm", {"n": n}, key=f"free-{n}") for n in range(3)]
        # two jobs of one key in one pass: both fit key_concurrency=2, a third would not
        first = await jobs.claim("llm", batch=3)
        assert sorted(job.id for job in first) == sorted([*busy[:2], free[0]])
        # 58 held jobs ahead, more than a first pass reads: the free keys behind them
        second = await jobs.claim("llm", batch=5)
        assert sorted(job.id for job in second) == free[1:]
        assert await jobs.claim("llm", batch=5) == []
        assert await jobs.complete(next(job for job in first if job.id == busy[0]))
        assert [job.id for job in await jobs.claim("llm", batch=5)] == [busy[2]]


async def test_a_claim_stops_at_its_bound_behind_held_jobs(jobs_db_url: str) -> None:
    async with await limited(jobs_db_url, key_concurrency=1) as jobs:
        await jobs.enqueue("llm", {"n": -1}, key="busy")
        assert len(await jobs.claim("llm", batch=1)) == 1  # the key is held from now on
        await jobs.enqueue_many("llm", [{"n": n} for n in range(600)], key="busy")
        free = await jobs.enqueue("llm", {"n": 0}, key="free")
        # a claim of 1 looks at 550 candidates, of 2 at 600: all held
        assert await jobs.claim("llm", batch=1) == []
        assert await jobs.claim("llm", batch=2) == []
        # a claim of 3 looks at 650: the free job behind the 600 held ones
        assert [job.id for job in await jobs.claim("llm", batch=3)] == [free]


async def test_lapsed_and_spent_leases_pass_through_the_limited_claim(jobs_db_url: str) -> None:
    """A lease that ran out is taken again, its attempt recorded as expired; a job whose last
    attempt ran out is buried, not leased, and takes no place of its key's limit."""
    async with await limited(jobs_db_url, key_concurrency=1) as jobs:
        spent = await jobs.enqueue("llm", {"n": 0}, key="a", max_attempts=1)
        lapsed = await jobs.enqueue("llm", {"n": 1}, key="b", max_attempts=3)
        behind_spent = await jobs.enqueue("llm", {"n": 2}, key="a")
        claim = "SELECT id, attempts FROM drainpipe.claim_jobs_v1('llm', 10, 10, %s)"
        async with await psycopg.AsyncConnection.connect(jobs_db_url, autocommit=True) as conn:
            row = await (await conn.execute("SELECT clock_timestamp()")).fetchone()
            assert row is not None
            now: datetime = row[0]
            first = await (await conn.execute(claim, (now,))).fetchall()
            assert sorted(first) == sorted([(spent, 1), (lapsed, 1)])
            # both leases ran out: the spent job is buried, its key's next job is claimed
            second = await (await conn.execute(claim, (now + timedelta(seconds=11),))).fetchall()
            assert sorted(second) == sorted([(lapsed, 2), (behind_spent, 1)])
        buried = await jobs.get("llm", spent)
        assert buried is not None and buried.state == "dead"
        again = await jobs.get("llm", lapsed)
        assert again is not None and again.state == "leased"
        assert [(a.number, a.outcome) for a in again.history][:1] == [(1, "expired")]


async def test_a_key_limited_claim_refuses_a_lease_over_max_lease(jobs_db_url: str) -> None:
    """The key-limited claim's one-statement first pass leases nothing longer than the
    queue's max_lease: the claim is refused and the job stays queued for a claim within it."""
    async with await limited(jobs_db_url, key_concurrency=1) as jobs:
        queued = await jobs.enqueue("llm", {"n": 0}, key="a")
        async with await psycopg.AsyncConnection.connect(jobs_db_url, autocommit=True) as conn:
            with pytest.raises(psycopg.Error) as refused:
                await conn.execute("SELECT id FROM drainpipe.claim_jobs_v1('llm', 120, 5)")
            assert refused.value.sqlstate == "DPQ03"
            within = await conn.execute("SELECT id FROM drainpipe.claim_jobs_v1('llm', 50, 5)")
            assert await within.fetchall() == [(queued,)]
