"""A concurrency far from binding: claims take their room from the queue's budget
(flow_budget_take) instead of counting what is leased. An exact count under the
exclusive flow lock opens an epoch (cap = concurrency - leased); sessions take chunks of it;
no instant is over the limit, an epoch changed under a session's feet is never spent, and
near the limit claims count again and stop exactly at it."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import psycopg

from drainpipe import Jobs, QueuePolicy

from .test_limits import leased_sql, watch_leased

QUEUES: dict[str, Any] = {"llm": dict[str, Any]}
LIMIT = 13_000  # chunks of 203, an epoch opens while 3,248 places are left
CHUNK = 203


def policy(limit: int = LIMIT) -> QueuePolicy:
    return QueuePolicy(max_pending=2**31 - 1, lease=300, max_lease=600, concurrency=limit)


async def fill(url: str, count: int, limit: int = LIMIT) -> None:
    async with Jobs(url, QUEUES, policies={"llm": policy(limit)}) as jobs:
        await jobs.ensure_policies()
        for start in range(0, count, 1000):
            await jobs.enqueue_many("llm", [{"n": n} for n in range(start, start + 1000)])


def budget(conn: psycopg.Connection[Any]) -> tuple[Any, ...]:
    row = conn.execute(
        # granted: what the epoch handed out, its counting claim's room and its chunks
        "SELECT epoch, cap, drainpipe.flow_budget_granted(b, drainpipe.flow_budget_chunk(concurrency))"
        " FROM drainpipe.flow_budget b WHERE queue = 'llm'"
    ).fetchone()
    assert row is not None
    return tuple(row)


def leased(conn: psycopg.Connection[Any], backend: str) -> int:
    row = conn.execute(leased_sql(backend, False)).fetchone()
    assert row is not None
    return int(row[0])


CLAIM = "SELECT count(*) FROM drainpipe.claim_jobs_v1('llm', 300, {})"


async def test_an_exact_count_opens_an_epoch_and_sessions_spend_chunks(
    jobs_db_url: str, backend_name: str
) -> None:
    await fill(jobs_db_url, 1000)
    with (
        psycopg.connect(jobs_db_url, autocommit=True) as a,
        psycopg.connect(jobs_db_url, autocommit=True) as b,
    ):
        assert a.execute(CLAIM.format(10)).fetchone() == (10,)
        epoch, cap, granted = budget(a)
        assert (cap, granted) == (LIMIT, 10)  # counted 0 leased; its own 10 handed out
        assert a.execute(CLAIM.format(10)).fetchone() == (10,)
        assert budget(a) == (epoch, LIMIT, 10 + CHUNK)  # a chunk for this session
        for _ in range(5):
            assert a.execute(CLAIM.format(10)).fetchone() == (10,)
        assert budget(a) == (epoch, LIMIT, 10 + CHUNK)  # spent locally: no write
        assert b.execute(CLAIM.format(10)).fetchone() == (10,)
        assert budget(a) == (epoch, LIMIT, 10 + 2 * CHUNK)  # the other session's own chunk
        assert leased(a, backend_name) == 80


async def test_a_chunk_of_a_closed_epoch_is_never_spent(
    jobs_db_url: str, backend_name: str
) -> None:
    """A session's leftover belongs to its epoch: once a change of limits closed it, the
    next claim counts exactly (under the exclusive lock) and opens a new one."""
    await fill(jobs_db_url, 1000)
    with psycopg.connect(jobs_db_url, autocommit=True) as a:
        assert a.execute(CLAIM.format(10)).fetchone() == (10,)
        assert a.execute(CLAIM.format(10)).fetchone() == (10,)  # holds CHUNK - 10
        first = budget(a)[0]
        async with Jobs(jobs_db_url, QUEUES, policies={"llm": policy(LIMIT + 1)}) as jobs:
            await jobs.ensure_policies()  # closes the epoch
        assert budget(a)[0] is None
        assert a.execute(CLAIM.format(10)).fetchone() == (10,)
        epoch, cap, granted = budget(a)
        assert epoch is not None and epoch != first
        assert (cap, granted) == (LIMIT + 1 - 20, 10)  # an exact count of the 20 leased
        assert a.execute(CLAIM.format(10)).fetchone() == (10,)
        assert budget(a) == (epoch, LIMIT + 1 - 20, 10 + CHUNK)  # a fresh chunk, not the old


async def test_a_chunk_checked_while_a_change_was_pending_is_not_spent_after_it(
    jobs_db_url: str, backend_name: str
) -> None:
    """A session spends its chunk without reading the row while the queue's budget sequence
    reads the value it checked the epoch at. A change advances the sequence at
    once but writes the row at its commit: a claim reading the row in between may still
    spend (the change has not happened for it), but keeps no value, so after the commit its
    next claim reads the row, finds the epoch closed and counts exactly."""
    await fill(jobs_db_url, 1000)
    with (
        psycopg.connect(jobs_db_url, autocommit=True) as a,
        psycopg.connect(jobs_db_url) as change,
    ):
        assert a.execute(CLAIM.format(10)).fetchone() == (10,)  # opens an epoch
        assert a.execute(CLAIM.format(10)).fetchone() == (10,)  # a chunk, checked
        first = budget(a)[0]
        assert a.execute(CLAIM.format(10)).fetchone() == (10,)  # spent without the row
        assert budget(a) == (first, LIMIT, 10 + CHUNK)
        # a change of the budget, written but not committed (what a change of limits does)
        change.execute(
            "UPDATE drainpipe.flow_budget SET epoch = NULL,"
            " stamp = drainpipe.flow_budget_advance('llm') WHERE queue = 'llm'"
        )
        assert a.execute(CLAIM.format(10)).fetchone() == (10,)  # before the change
        change.commit()
        assert a.execute(CLAIM.format(10)).fetchone() == (10,)
        epoch, cap, granted = budget(a)
        assert epoch is not None and epoch != first  # counted exactly: a new epoch
        assert (cap, granted) == (LIMIT - 40, 10)
        assert leased(a, backend_name) == 50


async def test_near_the_limit_claims_count_and_stop_exactly_at_it(
    jobs_db_url: str, backend_name: str
) -> None:
    """Another session leases all but 50 places while this one holds a chunk of an old
    epoch: this one's next claim finds the epoch closed, counts, and takes only the 50."""
    await fill(jobs_db_url, LIMIT + 200)
    with (
        psycopg.connect(jobs_db_url, autocommit=True) as a,
        psycopg.connect(jobs_db_url, autocommit=True) as b,
    ):
        assert a.execute(CLAIM.format(10)).fetchone() == (10,)
        assert a.execute(CLAIM.format(10)).fetchone() == (10,)  # holds a chunk
        taken = 20
        while taken < LIMIT - 50:
            got = b.execute(CLAIM.format(min(100, LIMIT - 50 - taken))).fetchone()
            assert got is not None and got[0] > 0
            taken += got[0]
        assert leased(a, backend_name) == LIMIT - 50
        assert budget(a)[0] is None  # closed near the limit
        assert a.execute(CLAIM.format(100)).fetchone() == (50,)
        assert a.execute(CLAIM.format(100)).fetchone() == (0,)
        assert b.execute(CLAIM.format(100)).fetchone() == (0,)
        assert leased(a, backend_name) == LIMIT


async def test_a_budget_spent_under_the_shared_lock_counts_its_chunks_as_leased(
    jobs_db_url: str, backend_name: str
) -> None:
    """The claim saw room in the budget, then waited for the flow lock while another
    transaction handed the rest out: it closes the epoch and counts what the epoch handed
    out as leased (claims in flight may spend it), never more."""
    await fill(jobs_db_url, 1000)
    with (
        psycopg.connect(jobs_db_url, autocommit=True) as a,
        psycopg.connect(jobs_db_url) as holder,
    ):
        assert a.execute(CLAIM.format(10)).fetchone() == (10,)
        holder.execute("SELECT pg_advisory_xact_lock(hashtext('drainpipe.flow'), hashtext('llm'))")
        # all but 11 handed out (by chunks this test does not spend): with the 10 leased,
        # one place is left
        holder.execute("UPDATE drainpipe.flow_budget SET granted = cap - 11 WHERE queue = 'llm'")
        result: list[Any] = []
        claimer = threading.Thread(
            target=lambda: result.append(a.execute(CLAIM.format(10)).fetchone())
        )
        # the claim's first look sees the committed row (room), then waits on the lock
        claimer.start()
        with psycopg.connect(jobs_db_url, autocommit=True) as look:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                row = look.execute(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                ).fetchone()
                if row and row[0]:
                    break
                time.sleep(0.01)
        holder.commit()  # the budget is spent now
        claimer.join(10)
        # leased 10 + handed out LIMIT - 11: room for 1 only
        assert result == [(1,)]
        assert budget(a)[0] is None
        assert leased(a, backend_name) == 11
        # the next claim finds it closed, counts exactly under the exclusive lock
        assert a.execute(CLAIM.format(10)).fetchone() == (10,)
        assert budget(a)[1:] == (LIMIT - 11, 10)


async def test_the_chunk_is_spent_by_an_expression_inlined_into_the_claim(
    jobs_db_url: str, backend_name: str
) -> None:
    """flow_budget_spend must stay one SQL expression the planner inlines (no FROM, no
    subquery, no SECURITY DEFINER, no SET): a call per claim is what it replaced."""
    await fill(jobs_db_url, 10)
    with psycopg.connect(jobs_db_url, autocommit=True) as conn:
        plan = "\n".join(
            str(row[0])
            for row in conn.execute("EXPLAIN VERBOSE SELECT drainpipe.flow_budget_spend('llm', 10)")
        )
        assert "pg_try_advisory_xact_lock_shared" in plan
        assert "flow_budget_spend" not in plan


async def test_a_transaction_holding_the_shared_lock_never_waits_for_the_exclusive_one(
    jobs_db_url: str, backend_name: str
) -> None:
    """Spending a chunk takes the flow lock shared and marks nothing. A later claim of the
    same transaction that cannot spend (a batch over 100, or its chunk short while the
    budget has nothing left to hand out) finds the lock in the lock table and stays under
    it (taking nothing, as such a claim does under the shared lock), rather than wait for
    the exclusive one behind another transaction that holds it shared too."""
    await fill(jobs_db_url, 1000)
    with (
        psycopg.connect(jobs_db_url) as a,
        psycopg.connect(jobs_db_url) as c,
    ):
        for conn in (a, c):
            conn.execute("SET statement_timeout = '5s'")
            assert conn.execute(CLAIM.format(10)).fetchone() == (10,)
            assert conn.execute(CLAIM.format(10)).fetchone() == (10,)  # a chunk
            conn.commit()
        assert a.execute(CLAIM.format(10)).fetchone() == (10,)  # spent: the lock, shared
        assert c.execute(CLAIM.format(10)).fetchone() == (10,)  # beside it
        assert a.execute(CLAIM.format(101)).fetchone() == (0,)
        with psycopg.connect(jobs_db_url, autocommit=True) as other:
            other.execute("UPDATE drainpipe.flow_budget SET granted = cap WHERE queue = 'llm'")
        assert a.execute(CLAIM.format(100)).fetchone() == (100,)  # its chunk still
        assert a.execute(CLAIM.format(100)).fetchone() == (0,)  # short, nothing left
        a.commit()
        c.commit()
        assert leased(a, backend_name) == 160


async def test_racing_claimers_with_a_budget_never_pass_the_limit(
    jobs_db_url: str, backend_name: str
) -> None:
    """8 claimers on their own pools take batches of 100 and hold everything: far from the
    limit they spend chunks side by side, near it they count one at a time; a watcher never
    sees more than the limit leased, and together they end exactly at it."""
    limit = 4_000  # chunks of 200: an epoch opens while 3,200 places are left
    await fill(jobs_db_url, limit + 1000, limit)
    done = asyncio.Event()
    seen: list[int] = []

    async def hoard() -> int:
        async with Jobs(jobs_db_url, QUEUES, policies={"llm": policy(limit)}) as j:
            taken, empty = 0, 0
            while empty < 3:  # a claim may take less than it might, never more
                batch = await j.claim("llm", batch=100, lease=300)
                taken += len(batch)
                empty = 0 if batch else empty + 1
            return taken

    watcher = asyncio.create_task(watch_leased(jobs_db_url, backend_name, done, seen, limit))
    try:
        taken = await asyncio.gather(*(hoard() for _ in range(8)))
    finally:
        done.set()
        await watcher
    assert sum(taken) == limit
    assert seen and max(seen) <= limit
    with psycopg.connect(jobs_db_url, autocommit=True) as conn:
        assert leased(conn, backend_name) == limit


async def test_a_lease_longer_than_a_later_max_lease_still_counts(
    jobs_db_url: str, backend_name: str
) -> None:
    """On pgmq a concurrency alone counts what is leased through pgmq's own index of `vt`,
    over the next `max_lease` (every writer is held to it): a lease granted before the
    policy, longer than its `max_lease`, is counted all the same until it ends."""
    async with Jobs(jobs_db_url, QUEUES) as undeclared:
        await undeclared.enqueue_many("llm", [{"n": n} for n in range(10)])
        assert len(await undeclared.claim("llm", batch=2, lease=300)) == 2
    limited = QueuePolicy(max_pending=2**31 - 1, lease=5, max_lease=10, concurrency=3)
    async with Jobs(jobs_db_url, QUEUES, policies={"llm": limited}) as jobs:
        await jobs.ensure_policies()
        assert len(await jobs.claim("llm", batch=5)) == 1  # 2 of 3 places held since before
        assert await jobs.claim("llm", batch=5) == []
    with psycopg.connect(jobs_db_url) as conn:
        assert leased(conn, backend_name) == 3


async def test_a_chunk_kept_under_limits_that_changed_is_forgotten(
    jobs_db_url: str, backend_name: str
) -> None:
    """A session's chunk of a budget the queue's limits no longer have is never spent: its
    next claim forgets it, so later claims do not look for the flow lock again."""
    await fill(jobs_db_url, 1000)
    with psycopg.connect(jobs_db_url, autocommit=True) as a:
        assert a.execute(CLAIM.format(10)).fetchone() == (10,)
        assert a.execute(CLAIM.format(10)).fetchone() == (10,)  # a chunk, kept
        kept = "SELECT current_setting('drainpipe.flow_budget.llm', true)"
        assert a.execute(kept).fetchone() not in [(None,), ("",)]
        # the same concurrency with a rate: counted on every claim, no budget
        a.execute(
            f"SELECT drainpipe.ensure_queue_flow_v1('llm', {LIMIT}, NULL, 1000, 1, NULL, NULL,"
            " false)"
        )
        assert a.execute(CLAIM.format(10)).fetchone() == (10,)
        assert a.execute(kept).fetchone() == ("",)
