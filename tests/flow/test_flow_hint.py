"""A concurrency far from binding skips its first count on the session's hint (jobs 0017,
flow_leased_hint): whatever the hint says, a claim never takes the queue over its limit. A
stale hint (far below what is leased now) makes one claim take less than it might; the next
one counts, and fills the queue exactly to its limit."""

from __future__ import annotations

from typing import Any

import psycopg

from drainpipe import Jobs, QueuePolicy

QUEUES: dict[str, Any] = {"llm": dict[str, Any]}
LIMIT = 3_300


def leased(url: str, backend: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        sql = (
            "SELECT count(*) FROM drainpipe.job_messages WHERE queue = 'llm' AND state = 'leased'"
            if backend == "table"
            else "SELECT count(*) FROM pgmq.q_llm WHERE read_ct > 0"
        )
        row = conn.execute(sql).fetchone()
    assert row is not None
    return int(row[0])


async def test_a_stale_hint_never_takes_the_queue_over_its_limit(
    jobs_db_url: str, backend_name: str
) -> None:
    policy = QueuePolicy(max_pending=2**31 - 1, lease=300, max_lease=600, concurrency=LIMIT)
    async with Jobs(jobs_db_url, QUEUES, policies={"llm": policy}) as jobs:
        await jobs.ensure_policies()
        for start in range(0, LIMIT + 200, 500):
            await jobs.enqueue_many("llm", [{"n": n} for n in range(start, start + 500)])
        # another session leases all but 50 places (its own claims count exactly)
        taken = 0
        while taken < LIMIT - 50:
            taken += len(await jobs.claim("llm", batch=min(100, LIMIT - 50 - taken)))
        assert leased(jobs_db_url, backend_name) == LIMIT - 50
    with psycopg.connect(jobs_db_url, autocommit=True) as conn:
        # this session's hint says nothing is leased: far from binding, so the first count
        # is skipped and the shared gate asked for; the count under it sees 3,250 leased
        conn.execute("SELECT set_config('drainpipe.flow_leased.llm', '0', false)")
        claim = "SELECT count(*) FROM drainpipe.claim_jobs_v1('llm', 300, 100)"
        assert conn.execute(claim).fetchone() == (0,)  # less than it might: never more
        row = conn.execute("SELECT current_setting('drainpipe.flow_leased.llm')").fetchone()
        assert row == (str(LIMIT - 50),)  # the hint now says what the gate counted
        assert conn.execute(claim).fetchone() == (50,)  # counted first: exactly to the limit
        assert conn.execute(claim).fetchone() == (0,)
    assert leased(jobs_db_url, backend_name) == LIMIT


async def test_a_hint_far_from_the_limit_skips_the_first_count(jobs_db_url: str) -> None:
    policy = QueuePolicy(max_pending=2**31 - 1, lease=300, max_lease=600, concurrency=10_000)
    async with Jobs(jobs_db_url, QUEUES, policies={"llm": policy}) as jobs:
        await jobs.ensure_policies()
        await jobs.enqueue_many("llm", [{"n": n} for n in range(30)])
    with psycopg.connect(jobs_db_url, autocommit=True) as conn:
        claim = "SELECT count(*) FROM drainpipe.claim_jobs_v1('llm', 300, 10)"
        assert conn.execute(claim).fetchone() == (10,)
        row = conn.execute("SELECT current_setting('drainpipe.flow_leased.llm')").fetchone()
        assert row == ("0",)  # counted under the gate before this claim's own leases
        assert conn.execute(claim).fetchone() == (10,)
        row = conn.execute("SELECT current_setting('drainpipe.flow_leased.llm')").fetchone()
        assert row == ("10",)
