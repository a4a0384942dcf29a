"""Flow control in the claim (docs/flow-control.md): concurrency, key_concurrency, rates and
ordered groups, enforced by the claim's SQL on both storages, for claimers on separate
pools racing each other, watched by a separate connection that looks for any instant over
a limit."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from drainpipe import Jobs, QueuePolicy, Rate
from drainpipe.sync import Jobs as SyncJobs

QUEUES: dict[str, Any] = {"llm": dict[str, Any], "plain": dict[str, Any]}
BIG = 2**31 - 1


def policy(**limits: Any) -> QueuePolicy:
    return QueuePolicy(max_pending=BIG, lease=30, max_lease=60, **limits)


async def limited(url: str, **limits: Any) -> Jobs:
    jobs = Jobs(url, QUEUES, policies={"llm": policy(**limits)})
    await jobs.ensure_policies()
    return jobs


async def test_concurrency_caps_what_one_claim_takes(jobs_db_url: str) -> None:
    async with await limited(jobs_db_url, concurrency=3) as jobs:
        await jobs.enqueue_many("llm", [{"n": n} for n in range(10)])
        first = await jobs.claim("llm", batch=10)
        assert len(first) == 3
        assert await jobs.claim("llm", batch=10) == []
        assert await jobs.complete(first[0])
        second = await jobs.claim("llm", batch=10)
        assert len(second) == 1
        # a failure releases its place too (the job waits out its backoff)
        assert await jobs.fail(first[1], "boom", retry_in=3600) == "queued"
        assert len(await jobs.claim("llm", batch=10)) == 1
        # an unlimited queue next to it is not held
        await jobs.enqueue_many("plain", [{"n": n} for n in range(5)])
        assert len(await jobs.claim("plain", batch=10)) == 5


async def test_key_concurrency_holds_a_key_not_the_queue(jobs_db_url: str) -> None:
    async with await limited(jobs_db_url, key_concurrency=1) as jobs:
        a = await jobs.enqueue_many("llm", [{"n": n} for n in range(3)], key="tenant-a")
        b = await jobs.enqueue_many("llm", [{"n": n} for n in range(3)], key="tenant-b")
        keyless = await jobs.enqueue("llm", {"n": 0})
        tenant = await jobs.enqueue("llm", {"n": 1}, context={"tenant": "tenant-a"})
        claimed = await jobs.claim("llm", batch=10)
        # one of each key, and a keyless job is a group of its own
        assert sorted(job.id for job in claimed) == sorted([a[0], b[0], keyless])
        assert await jobs.claim("llm", batch=10) == []
        assert await jobs.complete(claimed[0])  # a[0]
        # the tenant is the default key: tenant-a's jobs queue behind each other
        assert [job.id for job in await jobs.claim("llm", batch=10)] == [a[1]]
        record = await jobs.get("llm", tenant)
        assert record is not None and record.state == "queued"


async def test_ordered_runs_a_key_one_at_a_time_in_enqueue_order(jobs_db_url: str) -> None:
    async with await limited(jobs_db_url, ordered=True) as jobs:
        first, second, third = await jobs.enqueue_many(
            "llm", [{"n": n} for n in range(3)], key="ledger-1"
        )
        other = await jobs.enqueue("llm", {"n": 9}, key="ledger-2")
        claimed = await jobs.claim("llm", batch=10)
        assert sorted(job.id for job in claimed) == [first, other]
        # a failed attempt holds its group while it waits out its backoff
        head = next(job for job in claimed if job.id == first)
        assert await jobs.fail(head, "later", retry_in=0.05) == "queued"
        assert await jobs.claim("llm", batch=10) == []
        await asyncio.sleep(0.1)
        again = await jobs.claim("llm", batch=10)
        assert [job.id for job in again] == [first]  # the head again, not the second
        assert await jobs.complete(again[0])
        assert [job.id for job in await jobs.claim("llm", batch=10)] == [second]
        # a cancelled job releases its group
        assert await jobs.cancel("llm", second)
        assert [job.id for job in await jobs.claim("llm", batch=10)] == [third]


async def test_rate_caps_claims_in_a_window(jobs_db_url: str) -> None:
    async with await limited(jobs_db_url, rate=Rate(3, per=0.5)) as jobs:
        await jobs.enqueue_many("llm", [{"n": n} for n in range(10)])
        first = await jobs.claim("llm", batch=10)
        assert len(first) == 3
        assert all([await jobs.complete(job) for job in first])
        assert await jobs.claim("llm", batch=10) == []  # done, but the window is spent
        await asyncio.sleep(0.6)
        assert len(await jobs.claim("llm", batch=10)) == 3


async def test_key_rate_is_per_key(jobs_db_url: str) -> None:
    async with await limited(jobs_db_url, key_rate=Rate(1, per=30)) as jobs:
        await jobs.enqueue_many("llm", [{"n": n} for n in range(3)], key="a")
        await jobs.enqueue_many("llm", [{"n": n} for n in range(3)], key="b")
        claimed = await jobs.claim("llm", batch=10)
        assert len(claimed) == 2
        assert all([await jobs.complete(job) for job in claimed])
        assert await jobs.claim("llm", batch=10) == []


async def test_bad_values_are_value_errors(jobs_db_url: str) -> None:
    for bad in (
        {"concurrency": 0},
        {"key_concurrency": -1},
        {"concurrency": True},
        {"rate": 5},
        {"ordered": "yes"},
    ):
        with pytest.raises(ValueError, match="QueuePolicy"):
            QueuePolicy(**bad)
    for rate in ((0, 1), (1, 0), (1, -1), (True, 1)):
        with pytest.raises(ValueError, match="Rate"):
            Rate(*rate)
    async with Jobs(jobs_db_url, QUEUES) as jobs:
        for options in (
            {"key": ""},
            {"key": "x" * 201},
            {"key": "é" * 101},
            {"key": 7},
            {"priority": 101},
            {"priority": -101},
            {"priority": 1.5},
            {"priority": True},
        ):
            with pytest.raises(ValueError, match=r"key|priority"):
                await jobs.enqueue("llm", {}, **options)
            with pytest.raises(ValueError, match=r"key|priority"):
                await jobs.enqueue_many("llm", [{}], **options)
        assert await jobs.enqueue("llm", {}, key="é" * 100) > 0


# -- races: claimers on separate pools, a watcher on its own connection ---------------------


async def race(
    url: str,
    limits: dict[str, Any],
    jobs_count: int,
    keys: int,
    watch_sql: str,
    check: Callable[[Any], None],
    claimers: int = 8,
    hold: float = 0.01,
    started: list[int] | None = None,
) -> int:
    started = [] if started is None else started
    """Run ``claimers`` Jobs (each its own pool) claiming and completing the queue while a
    separate connection samples ``watch_sql`` continuously; ``check`` each sample. Returns
    how many jobs ran; ``started`` gets their ids."""
    async with await limited(url, **limits) as setup:
        await setup.enqueue_many("llm", [{"n": n} for n in range(jobs_count) if keys == 0])
        for key in range(keys):
            await setup.enqueue_many(
                "llm", [{"n": n} for n in range(jobs_count // keys)], key=f"k{key}"
            )
    done = asyncio.Event()
    samples = 0
    finished = 0

    async def watch() -> None:
        nonlocal samples
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            while not done.is_set():
                row = await (await conn.execute(watch_sql)).fetchone()
                check(row)
                samples += 1

    async def claimer() -> int:
        nonlocal finished
        ran = 0
        jobs = Jobs(url, QUEUES, policies={"llm": policy(**limits)})
        async with jobs:
            deadline = asyncio.get_running_loop().time() + 30
            while finished < jobs_count and asyncio.get_running_loop().time() < deadline:
                claimed = await jobs.claim("llm", batch=3)
                if not claimed:
                    await asyncio.sleep(0.005)
                    continue
                await asyncio.sleep(hold)
                for job in claimed:
                    assert await jobs.complete(job)
                    started.append(job.id)
                ran += len(claimed)
                finished += len(claimed)
        return ran

    watcher = asyncio.create_task(watch())
    try:
        ran = sum(await asyncio.gather(*(claimer() for _ in range(claimers))))
    finally:
        done.set()
        await watcher
    assert samples > 20
    return ran


def leased_sql(backend: str, by_key: bool) -> str:
    if backend == "table":
        key = "drainpipe.job_key(payload)" if by_key else "queue"
        return (
            "SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM drainpipe.job_messages"
            " WHERE queue = 'llm' AND state = 'leased' AND visible_at > clock_timestamp()"
            f" GROUP BY {key}) s"
        )
    key = "drainpipe.job_key(message -> 'payload')" if by_key else "true::int"
    return (
        "SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM pgmq.q_llm"
        " WHERE read_ct > 0 AND vt > clock_timestamp()"
        " AND message ->> 'failed' IS DISTINCT FROM read_ct::text"
        f" GROUP BY {key}) s"
    )


async def watch_leased(
    url: str, backend: str, done: asyncio.Event, seen: list[int], limit: int
) -> None:
    """Sample the queue's leased count on a connection of its own until ``done``: each
    sample goes to ``seen``, and none may be over ``limit``."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        while not done.is_set():
            row = await (await conn.execute(leased_sql(backend, False))).fetchone()
            assert row is not None
            seen.append(row[0])
            assert row[0] <= limit, f"{row[0]} leased at once under concurrency={limit}"


async def test_racing_claimers_never_pass_concurrency(jobs_db_url: str, backend_name: str) -> None:
    seen: list[int] = []

    def check(row: Any) -> None:
        seen.append(row[0])
        assert row[0] <= 4, f"{row[0]} leased at once under concurrency=4"

    ran = await race(
        jobs_db_url, {"concurrency": 4}, 200, 0, leased_sql(backend_name, False), check
    )
    assert ran == 200
    assert max(seen) == 4  # the limit was reached, not just respected by slowness


async def test_racing_claimers_never_pass_key_concurrency(
    jobs_db_url: str, backend_name: str
) -> None:
    seen: list[int] = []

    def check(row: Any) -> None:
        seen.append(row[0])
        assert row[0] <= 2, f"{row[0]} leased of one key under key_concurrency=2"

    ran = await race(
        jobs_db_url, {"key_concurrency": 2}, 240, 4, leased_sql(backend_name, True), check
    )
    assert ran == 240
    assert max(seen) == 2


async def test_racing_claimers_never_pass_concurrency_and_key_concurrency_together(
    jobs_db_url: str, backend_name: str
) -> None:
    """Both limits at once (the key-limited claim's one-statement pass counts the queue's
    leases too): no instant over either."""
    seen: list[tuple[int, int]] = []

    def check(row: Any) -> None:
        seen.append((row[0], row[1]))
        assert row[0] <= 3, f"{row[0]} leased at once under concurrency=3"
        assert row[1] <= 1, f"{row[1]} leased of one key under key_concurrency=1"

    watch = f"SELECT ({leased_sql(backend_name, False)}), ({leased_sql(backend_name, True)})"
    limits = {"concurrency": 3, "key_concurrency": 1}
    ran = await race(jobs_db_url, limits, 180, 6, watch, check)
    assert ran == 180
    assert max(queue for queue, _ in seen) == 3 and max(key for _, key in seen) == 1


async def test_a_shorter_max_lease_keeps_counting_the_longer_leases(
    jobs_db_url: str, backend_name: str
) -> None:
    """Claimers lease for 300 s while the policy's max_lease flips between 600 and 60 s:
    a lease granted under the longer bound still counts once the bound is shorter (the
    count's window reaches it, docs/flow-control.md), so no instant is over concurrency=4.
    A window of max_lease alone would see none of the long leases and let 4 more in."""

    async def ensure(conn: psycopg.AsyncConnection[Any], max_lease: int) -> None:
        await conn.execute(
            "SELECT drainpipe.ensure_queue_policy_v3('llm', 1000000, 1000000, 30, %s, 86400, 5,"
            " NULL, 86400, false, NULL, true, p_concurrency => 4)",
            (max_lease,),
        )

    async with await psycopg.AsyncConnection.connect(jobs_db_url, autocommit=True) as setup:
        await ensure(setup, 600)
    async with Jobs(jobs_db_url, QUEUES) as jobs:
        await jobs.enqueue_many("llm", [{"n": n} for n in range(60)])
    done = asyncio.Event()
    seen: list[int] = []
    long_leases = 0

    async def claimer() -> None:
        nonlocal long_leases
        async with await psycopg.AsyncConnection.connect(jobs_db_url, autocommit=True) as conn:
            while not done.is_set():
                lease = 300
                try:
                    rows = await (
                        await conn.execute(
                            "SELECT id, attempts FROM drainpipe.claim_jobs_v1('llm', %s, 1)",
                            (lease,),
                        )
                    ).fetchall()
                except psycopg.Error as exc:
                    if exc.sqlstate != "DPQ03":  # only a lease over the 60 s bound
                        raise
                    lease = 30
                    rows = await (
                        await conn.execute(
                            "SELECT id, attempts FROM drainpipe.claim_jobs_v1('llm', 30, 1)"
                        )
                    ).fetchall()
                await asyncio.sleep(0.01)
                for job_id, attempt in rows:
                    if lease == 300:
                        long_leases += 1  # kept until the test ends
                        continue
                    await conn.execute(
                        "SELECT drainpipe.complete_jobs_v1('llm', %s, %s)", ([job_id], [attempt])
                    )

    async def flipper() -> None:
        async with await psycopg.AsyncConnection.connect(jobs_db_url, autocommit=True) as conn:
            for flip in range(16):
                await ensure(conn, 60 if flip % 2 == 0 else 600)
                await asyncio.sleep(0.1)
        done.set()

    watcher = watch_leased(jobs_db_url, backend_name, done, seen, 4)
    await asyncio.gather(flipper(), watcher, *(claimer() for _ in range(8)))
    assert long_leases > 0 and max(seen) == 4


async def test_racing_claimers_never_overlap_in_an_ordered_group(
    jobs_db_url: str, backend_name: str
) -> None:
    def check(row: Any) -> None:
        assert row[0] <= 1, "two jobs of one ordered key leased at once"

    ran = await race(jobs_db_url, {"ordered": True}, 120, 6, leased_sql(backend_name, True), check)
    assert ran == 120


async def test_racing_claimers_keep_every_rate_window(jobs_db_url: str, backend_name: str) -> None:
    ids: list[int] = []
    ran = await race(
        jobs_db_url,
        {"rate": Rate(10, per=0.5)},
        40,
        0,
        "SELECT 1",
        lambda row: None,
        hold=0.0,
        started=ids,
    )
    assert ran == 40
    # the attempts' start times, as the claim stamped them (the database's clock)
    async with Jobs(jobs_db_url, QUEUES) as jobs:
        times = sorted(
            record.started_at.timestamp()
            for record in [await jobs.get("llm", job_id) for job_id in ids]
            if record is not None and record.started_at is not None
        )
    assert len(times) == 40
    worst = max(sum(1 for t in times[i:] if t < start + 0.5) for i, start in enumerate(times))
    assert worst <= 10, f"{worst} claims in one 0.5 s window under Rate(10, per=0.5)"
    assert times[-1] - times[0] >= 1.5  # 40 claims at 10 per 0.5 s take at least 1.5 s


async def test_racing_claimers_never_pass_a_concurrency_far_from_binding(
    jobs_db_url: str, backend_name: str
) -> None:
    """A concurrency with room for 1,600 more lets claims run side by side (shared flow
    lock, 8 slots); raised to binding, the same claimers still never pass it."""
    seen: list[int] = []

    def check(row: Any) -> None:
        seen.append(row[0])
        assert row[0] <= 1700

    ran = await race(
        jobs_db_url, {"concurrency": 1700}, 300, 0, leased_sql(backend_name, False), check
    )
    assert ran == 300


async def test_held_by_says_which_limit_holds_a_queued_job(jobs_db_url: str) -> None:
    jobs = Jobs(
        jobs_db_url,
        {**QUEUES, "ledger": dict[str, Any], "slow": dict[str, Any]},
        policies={
            "llm": policy(concurrency=1),
            "ledger": policy(ordered=True),
            "slow": policy(key_rate=Rate(1, per=60)),
        },
    )
    async with jobs:
        await jobs.ensure_policies()
        first, second = await jobs.enqueue_many("llm", [{"n": 1}, {"n": 2}])
        head, behind = await jobs.enqueue_many("ledger", [{"n": 1}, {"n": 2}], key="acct")
        fast, later = await jobs.enqueue_many("slow", [{"n": 1}, {"n": 2}], key="api")
        plain = await jobs.enqueue("plain", {"n": 1})

        async def held(queue: str, job_id: int) -> str | None:
            record = await jobs.get(queue, job_id)
            assert record is not None
            return record.held_by

        # nothing leased yet: only the ordered group holds its second job
        assert [await held("llm", first), await held("ledger", behind)] == [None, "order"]
        assert await held("ledger", head) is None
        (claimed,) = await jobs.claim("llm", batch=5)
        assert await held("llm", second) == "concurrency"
        assert len(await jobs.claim("slow", batch=5)) == 1
        assert await held("slow", later) == "rate"
        assert await held("plain", plain) is None
        page = await jobs.list_jobs("llm")
        assert {item.id: item.held_by for item in page.items} == {
            second: "concurrency",
            first: None,
        }
        assert await jobs.complete(claimed)
        assert await held("llm", second) is None
        del fast
        with SyncJobs(jobs_db_url, QUEUES) as twin:
            record = twin.get("llm", second)
            assert record is not None and record.held_by is None
            assert [job.id for job in twin.claim("llm", batch=5, lease=30)] == [second]
        assert await held("ledger", behind) == "order"


async def test_claims_side_by_side_stop_exactly_at_a_large_concurrency(
    jobs_db_url: str, backend_name: str
) -> None:
    """8 claimers take batches of 100 and hold everything they get: while 1,600 places are
    free they claim side by side (shared flow lock), then one at a time; the leased count
    ends exactly at the limit, and a watcher never sees it above."""
    limit = 1750
    async with await limited(jobs_db_url, concurrency=limit) as setup:
        for start in range(0, 2600, 500):
            await setup.enqueue_many("llm", [{"n": n} for n in range(start, start + 500)])
    done = asyncio.Event()
    seen: list[int] = []

    async def hoard() -> int:
        async with Jobs(jobs_db_url, QUEUES, policies={"llm": policy(concurrency=limit)}) as j:
            taken = 0
            while batch := await j.claim("llm", batch=100, lease=60):
                taken += len(batch)
            return taken

    watcher = asyncio.create_task(watch_leased(jobs_db_url, backend_name, done, seen, limit))
    try:
        taken = await asyncio.gather(*(hoard() for _ in range(8)))
    finally:
        done.set()
        await watcher
    assert sum(taken) == limit
    assert seen and max(seen) <= limit
