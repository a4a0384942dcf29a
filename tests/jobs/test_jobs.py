"""Jobs core on real Postgres, both storage backends through the same tests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from pydantic import BaseModel

import drainpipe
from drainpipe import DrainpipeError, Jobs
from drainpipe.backends.postgrest import PostgrestBackend
from tests.conftest import connect
from tests.jobs.postgrest_emulation import BASE, SERVICE_KEY, postgrest_emulation


class Email(BaseModel):
    to: str
    subject: str = "hi"


QUEUES: dict[str, Any] = {"emails": Email, "reports": dict[str, Any]}


@pytest.fixture(params=["sql", "postgrest"])
async def jobs(request: pytest.FixtureRequest, jobs_db_url: str) -> AsyncIterator[Jobs]:
    """Jobs over a direct connection, and over PostgREST (drainpipe_api, emulated by respx
    on the same database): every test below runs through both."""
    if request.param == "postgrest":
        async with (
            postgrest_emulation(jobs_db_url),
            PostgrestBackend(BASE, SERVICE_KEY) as backend,
        ):
            yield Jobs(backend, QUEUES)
        return
    instance = Jobs(jobs_db_url, QUEUES)
    yield instance
    await instance.backend.db.close()  # type: ignore[attr-defined]


async def _count_live(url: str, backend_name: str) -> int:
    async with await connect(url) as c:
        if backend_name == "table":
            row = await (await c.execute("SELECT count(*) FROM drainpipe.job_messages")).fetchone()
        else:
            exists = await (
                await c.execute("SELECT to_regclass('pgmq.q_emails') IS NOT NULL")
            ).fetchone()
            if not exists or not exists[0]:
                return 0
            row = await (await c.execute("SELECT count(*) FROM pgmq.q_emails")).fetchone()
        assert row is not None
        return int(row[0])


# -- claiming and fencing --------------------------------------------------------------


async def test_two_workers_racing_never_get_the_same_job(jobs_db_url: str) -> None:
    seed = Jobs(jobs_db_url, QUEUES)
    ids = await seed.enqueue_many("emails", [{"to": f"{i}@x"} for i in range(200)])
    connections = [await connect(jobs_db_url) for _ in range(4)]
    workers = [Jobs(connection, QUEUES) for connection in connections]

    async def claim_all(worker: Jobs) -> list[int]:
        got: list[int] = []
        while batch := await worker.claim("emails", batch=7, lease=60):
            got += [job.id for job in batch]
        return got

    results = await asyncio.gather(*(claim_all(w) for w in workers))
    claimed = [job_id for result in results for job_id in result]
    assert len(claimed) == len(set(claimed)) == 200
    assert set(claimed) == set(ids)
    for connection in connections:
        await connection.close()
    await seed.backend.db.close()  # type: ignore[attr-defined]


async def test_stale_worker_changes_nothing_after_takeover(jobs: Jobs, jobs_db_url: str) -> None:
    await jobs.enqueue("emails", {"to": "a@x"})
    [stale] = await jobs.claim("emails", lease=0.05)
    await asyncio.sleep(0.1)
    other = Jobs(jobs_db_url, QUEUES)
    [fresh] = await other.claim("emails", lease=60)
    assert fresh.id == stale.id and (stale.attempts, fresh.attempts) == (1, 2)

    assert await jobs.complete(stale) is False
    assert await jobs.fail(stale, "late") is None
    assert await jobs.extend(stale, 600) is False
    # the new holder's lease and state are untouched by the stale calls
    assert await other.extend(fresh, 60) is True
    assert await other.complete(fresh) is True
    assert await jobs.claim("emails") == []
    await other.backend.db.close()  # type: ignore[attr-defined]


async def test_lease_hides_a_job_and_expired_lease_without_takeover_may_finish(jobs: Jobs) -> None:
    await jobs.enqueue("emails", {"to": "a@x"})
    [job] = await jobs.claim("emails", lease=0.05)
    await asyncio.sleep(0.1)
    # nobody claimed it again: the attempt still matches, so the slow worker may finish
    assert await jobs.complete(job) is True


# -- dedupe ----------------------------------------------------------------------------


async def test_fifty_concurrent_enqueues_with_one_key_return_one_id(
    jobs: Jobs, jobs_db_url: str, backend_name: str
) -> None:
    ids = await asyncio.gather(
        *(jobs.enqueue("emails", {"to": f"{i}@x"}, dedupe_key="digest") for i in range(50))
    )
    assert len(set(ids)) == 1
    assert await _count_live(jobs_db_url, backend_name) == 1


async def test_dedupe_waiting_queues_exactly_one_follow_up(jobs: Jobs) -> None:
    first = await jobs.enqueue("emails", {"to": "a@x"}, dedupe_key="k", dedupe="waiting")
    assert await jobs.enqueue("emails", {"to": "b@x"}, dedupe_key="k", dedupe="waiting") == first
    [running] = await jobs.claim("emails", lease=60)
    assert running.id == first
    follow_ups = await asyncio.gather(
        *(
            jobs.enqueue("emails", {"to": "c@x"}, dedupe_key="k", dedupe="waiting")
            for _ in range(10)
        )
    )
    assert len(set(follow_ups)) == 1 and follow_ups[0] != first
    # "always" coalesces onto any live job with the key
    assert await jobs.enqueue("emails", {"to": "d@x"}, dedupe_key="k") in {first, follow_ups[0]}
    assert await jobs.complete(running)
    [next_job] = await jobs.claim("emails", lease=60)
    assert next_job.id == follow_ups[0]
    assert await jobs.complete(next_job)
    # completed jobs never match: the key is free again
    fresh = await jobs.enqueue("emails", {"to": "e@x"}, dedupe_key="k")
    assert fresh not in {first, follow_ups[0]}


# -- dead workers, retries, dead letters -----------------------------------------------


async def test_job_of_a_dead_worker_is_claimed_again_then_dies_on_its_last_attempt(
    jobs: Jobs, jobs_db_url: str
) -> None:
    job_id = await jobs.enqueue("emails", {"to": "a@x"}, max_attempts=2)
    for expected_attempt in (1, 2):
        conn = await connect(jobs_db_url)
        worker = Jobs(conn, QUEUES)
        [job] = await worker.claim("emails", lease=0.2)
        assert (job.id, job.attempts) == (job_id, expected_attempt)
        await conn.close()  # the worker dies mid-job
        assert await jobs.claim("emails") == []  # still leased
        await asyncio.sleep(0.25)
    assert await jobs.claim("emails") == []  # the sweep archives it dead instead
    [dead] = await jobs.list_dead("emails")
    assert dead.id == job_id
    assert dead.last_error == "The lease ran out on the last attempt"
    assert dead.attempts == 2 and dead.payload == {"to": "a@x", "subject": "hi"}


async def test_fail_retries_with_full_jitter_then_dead_letters(
    jobs: Jobs, jobs_db_url: str, backend_name: str
) -> None:
    await jobs.enqueue("emails", {"to": "a@x"}, max_attempts=3)
    [job] = await jobs.claim("emails", lease=60)
    before = datetime.now(UTC)
    assert await jobs.fail(job, RuntimeError("smtp down")) == "queued"
    stats = (await jobs.stats(["emails"]))["emails"]
    assert (stats.ready, stats.in_flight) == (0, 1)  # waiting out its backoff
    assert await jobs.claim("emails") == []
    # a failed attempt holds no lease any more: its holder cannot extend it
    assert await jobs.extend(job, 0) is False
    # skip the backoff
    table = "drainpipe.job_messages" if backend_name == "table" else "pgmq.q_emails"
    column = "visible_at" if backend_name == "table" else "vt"
    async with await connect(jobs_db_url) as c:
        await c.execute(f"UPDATE {table} SET {column} = now() - interval '1 second'")
    [again] = await jobs.claim("emails", lease=60)
    assert again.attempts == 2 and again.last_error == "smtp down"
    assert await jobs.fail(again, "still down", retry_in=0) == "queued"
    [last] = await jobs.claim("emails", lease=60)
    assert last.attempts == 3
    assert await jobs.fail(last, "x" * 5000) == "dead"
    [dead] = await jobs.list_dead("emails")
    assert dead.last_error == "x" * 4000 and dead.died_at is not None and dead.died_at >= before


async def test_retry_delay_bounds(conn: psycopg.AsyncConnection[Any]) -> None:
    for attempt, cap in [(1, 10), (2, 20), (3, 40), (9, 2560), (10, 3600), (30, 3600)]:
        row = await (
            await conn.execute(
                "SELECT min(d), max(d), count(DISTINCT d), bool_and(d = floor(d))"
                " FROM (SELECT drainpipe.job_retry_delay(%s) AS d FROM generate_series(1, 2000)) s",
                (attempt,),
            )
        ).fetchone()
        assert row is not None
        low, high, distinct, whole = row
        assert low >= 1 and high <= cap and whole
        assert distinct > min(cap, 10) // 2  # spread over the range, not a constant


async def test_fail_without_retry_in_waits_inside_the_jitter_window(
    jobs: Jobs, jobs_db_url: str, backend_name: str
) -> None:
    await jobs.enqueue("emails", {"to": "a@x"})
    [job] = await jobs.claim("emails", lease=60)
    assert await jobs.fail(job, "boom") == "queued"
    table = "drainpipe.job_messages" if backend_name == "table" else "pgmq.q_emails"
    column = "visible_at" if backend_name == "table" else "vt"
    async with await connect(jobs_db_url) as c:
        row = await (
            await c.execute(f"SELECT extract(epoch FROM {column} - clock_timestamp()) FROM {table}")
        ).fetchone()
    assert row is not None and 0 < row[0] <= 10


async def test_replay_retry_dead_and_cursor(jobs: Jobs) -> None:
    ids = []
    for i in range(5):
        ids.append(
            await jobs.enqueue("emails", {"to": f"{i}@x"}, max_attempts=1, context={"tenant": "t1"})
        )
    for _ in range(5):
        [job] = await jobs.claim("emails", lease=60)
        assert await jobs.fail(job, "nope") == "dead"
    page1 = await jobs.list_dead("emails", limit=2)
    assert [d.id for d in page1] == sorted(ids, reverse=True)[:2]
    page2 = await jobs.list_dead("emails", limit=2, cursor=page1[-1].id)
    assert [d.id for d in page2] == sorted(ids, reverse=True)[2:4]
    assert page1[0].context.tenant == "t1"

    new_id = await jobs.replay("emails", ids[0])
    assert new_id is not None and new_id not in ids
    assert await jobs.replay("emails", ids[0]) is None  # already replayed
    assert await jobs.replay("emails", 999999) is None
    assert await jobs.retry_dead("emails", ids=[ids[1], ids[2], 424242]) == 2
    assert await jobs.retry_dead("emails", limit=1) == 1
    assert len(await jobs.list_dead("emails")) == 1
    stats = (await jobs.stats(["emails"]))["emails"]
    assert (stats.ready, stats.dead) == (4, 1)
    [replayed] = await jobs.claim("emails", lease=60)
    assert replayed.attempts == 1 and replayed.context.tenant == "t1"


async def test_purge_archive_keeps_live_jobs_and_young_dead_letters(jobs: Jobs) -> None:
    await jobs.enqueue_many("emails", [{"to": f"{i}@x"} for i in range(3)])
    await jobs.enqueue("emails", {"to": "dead@x"}, max_attempts=1)
    for job in await jobs.claim("emails", batch=4, lease=60):
        if job.payload["to"] == "dead@x":
            assert await jobs.fail(job, "x") == "dead"
        else:
            await jobs.complete(job)
    await jobs.enqueue("emails", {"to": "live@x"})
    assert await jobs.purge_archive("emails") == 0  # everything is young
    # completed only: both backends keep succeeded jobs as records until purged
    assert await jobs.purge_archive("emails", older_than=0) == 3
    assert len(await jobs.list_dead("emails")) == 1
    assert await jobs.purge_archive("emails", older_than=0, dead_older_than=timedelta(0)) == 1
    assert (await jobs.stats(["emails"]))["emails"].ready == 1


async def test_stats_in_a_mixed_state(jobs: Jobs) -> None:
    empty = await jobs.stats()
    assert empty["reports"] == drainpipe.QueueStats(0, 0, 0, 0, None)
    await jobs.enqueue_many("emails", [{"to": f"{i}@x"} for i in range(4)])
    await jobs.enqueue("emails", {"to": "dead@x"}, max_attempts=1)
    await jobs.enqueue("emails", {"to": "later@x"}, delay=3600)
    claimed = await jobs.claim("emails", batch=5, lease=60)
    by_to = {job.payload["to"]: job for job in claimed}
    await jobs.fail(by_to["dead@x"], "x")  # dead
    await jobs.fail(by_to["0@x"], "x", retry_in=3600)  # backing off: in flight
    # 1@x held by a worker (in flight); 2@x, 3@x put back ready
    await jobs.fail(by_to["2@x"], "x", retry_in=0)
    await jobs.fail(by_to["3@x"], "x", retry_in=0)
    stats = (await jobs.stats(["emails"]))["emails"]
    assert (stats.ready, stats.in_flight, stats.delayed, stats.dead) == (2, 2, 1, 1)
    assert stats.oldest_age_seconds is not None and 0 <= stats.oldest_age_seconds < 60


# -- workers ---------------------------------------------------------------------------


async def test_heartbeat_keeps_a_long_job_from_being_claimed(jobs: Jobs, jobs_db_url: str) -> None:
    await jobs.enqueue("emails", {"to": "slow@x"})
    thief = Jobs(jobs_db_url, QUEUES)
    stolen: list[int] = []
    attempts: list[int] = []

    async def slow(payload: Email, job: drainpipe.Job[Email]) -> None:
        attempts.append(job.attempts)
        for _ in range(16):  # 1.6 s, twice the 0.8 s lease
            await asyncio.sleep(0.1)
            stolen.extend(job.id for job in await thief.claim("emails", lease=60))

    # a lease of 0.8 s renewed every 0.1 s: a stall of this VM up to 0.7 s (a checkpoint)
    # must not lose it; 0.4 s did once in a full run
    report = await jobs.drain("emails", slow, lease=0.8, heartbeat_every=0.1)
    assert (report.succeeded, report.failed) == (1, 0)
    assert stolen == [] and attempts == [1]
    assert await thief.claim("emails") == []
    await thief.backend.db.close()  # type: ignore[attr-defined]


async def test_drain_validates_runs_retries_and_reports(jobs: Jobs) -> None:
    await jobs.enqueue_many("emails", [{"to": f"{i}@x"} for i in range(6)])
    # a payload that no longer matches the schema (stored by another version of the app)
    await jobs.backend.send("emails", {"nope": 1}, max_attempts=1)
    errors: list[tuple[str, int | None]] = []
    seen: list[str] = []

    async def handle(payload: Email, job: drainpipe.Job[Email]) -> None:
        assert isinstance(payload, Email) and job.payload is payload
        seen.append(payload.to)
        if payload.to == "1@x":
            raise ValueError("bad address")
        if payload.to == "2@x":
            raise drainpipe.Retry(after=3600)

    report = await jobs.drain(
        "emails",
        handle,
        concurrency=2,
        batch=3,
        on_error=lambda error, job: errors.append((type(error).__name__, job.id if job else None)),
    )
    assert (report.succeeded, report.failed) == (4, 3)
    assert sorted(seen) == [f"{i}@x" for i in range(6)]
    assert sorted(kind for kind, _ in errors) == [
        "DrainpipeError",
        "ValueError",
    ]  # Retry is not an error
    stats = (await jobs.stats(["emails"]))["emails"]
    assert (stats.ready, stats.in_flight, stats.dead) == (0, 2, 1)


async def test_drain_budget_zero_claims_nothing(jobs: Jobs) -> None:
    await jobs.enqueue("emails", {"to": "a@x"})
    calls: list[Any] = []

    async def handle(payload: Email, job: drainpipe.Job[Email]) -> None:
        calls.append(payload)

    report = await jobs.drain("emails", handle, budget=0)
    assert (report.succeeded, report.failed, report.budget_exhausted) == (0, 0, True)
    assert calls == [] and (await jobs.stats(["emails"]))["emails"].ready == 1


async def test_work_until_stop_with_poll_backoff_and_all_tenants(jobs: Jobs) -> None:
    stop = asyncio.Event()
    contexts: list[drainpipe.JobContext] = []

    async def handle(payload: Email, job: drainpipe.Job[Email]) -> None:
        contexts.append(job.context)
        if len(contexts) == 2:
            stop.set()

    async def produce() -> None:
        await asyncio.sleep(0.15)  # the worker is polling an empty queue by now
        await jobs.enqueue(
            "emails",
            {"to": "a@x"},
            context={"tenant": "acme", "actor": {"id": "u1", "kind": "user"}},
        )
        await jobs.enqueue("emails", {"to": "b@x"})

    report, _ = await asyncio.gather(
        asyncio.wait_for(
            jobs.work(
                "emails",
                handle,
                poll_interval=0.05,
                max_poll_interval=0.1,
                stop=stop,
                all_tenants=True,
            ),
            timeout=5,
        ),
        produce(),
    )
    assert report.succeeded == 2
    assert contexts[0] == drainpipe.JobContext(actor=drainpipe.Actor("u1", "user"), tenant="acme")
    assert contexts[1] == drainpipe.JobContext(all_tenants=True)


class FlakyBackend:
    """The SQL backend, with claims that fail a given number of times."""

    api_version = 1
    name = "flaky"
    leases = True

    def __init__(self, inner: Any, failures: list[DrainpipeError]) -> None:
        self.inner = inner
        self.failures = failures
        self.reads = 0

    async def read(self, queue: str, *, lease: float, batch: int) -> list[Any]:
        self.reads += 1
        if self.failures:
            raise self.failures.pop(0)
        return await self.inner.read(queue, lease=lease, batch=batch)  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_transient_claim_errors_are_retried_then_fatal_ones_raise(jobs: Jobs) -> None:
    await jobs.enqueue("emails", {"to": "a@x"})
    flaky = FlakyBackend(
        jobs.backend, [DrainpipeError("network", "gone"), DrainpipeError("timeout", "slow")]
    )
    retried = Jobs(flaky, QUEUES)
    done: list[str] = []

    async def handle(payload: Email, job: drainpipe.Job[Email]) -> None:
        done.append(payload.to)

    report = await retried.drain("emails", handle)
    assert done == ["a@x"] and report.succeeded == 1

    # drain (and work with max_outage=None) keep the contract's 3 retries; work by default
    # rides out an outage for max_outage seconds instead (tests/engine/test_outages.py)
    four = FlakyBackend(jobs.backend, [DrainpipeError("network", "gone") for _ in range(4)])
    with pytest.raises(DrainpipeError) as info:
        await Jobs(four, QUEUES).work("emails", handle, poll_interval=0.01, max_outage=None)
    assert info.value.kind == "network" and four.reads == 4

    fatal = FlakyBackend(jobs.backend, [DrainpipeError("forbidden", "no")])
    with pytest.raises(DrainpipeError) as info:
        await Jobs(fatal, QUEUES).work("emails", handle, concurrency=3, poll_interval=0.01)
    assert info.value.kind == "forbidden"


# -- bad input -------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["", "Emails", "1emails", "e-mails", "a" * 48, "emails ", "é"])
def test_invalid_queue_names_fail_at_construction(name: str) -> None:
    with pytest.raises(ValueError, match="queue names"):
        Jobs("postgresql://127.0.0.1:1/none", {name: dict})


async def test_unknown_queue_is_invalid_request_without_sql() -> None:
    # a database nobody listens on: any SQL sent would fail with a network error instead
    jobs = Jobs("postgresql://postgres@127.0.0.1:1/none?connect_timeout=1", QUEUES)
    calls: list[Any] = [
        lambda: jobs.enqueue("nope", {}),
        lambda: jobs.claim("nope"),
        lambda: jobs.stats(["nope"]),
        lambda: jobs.list_dead("nope"),
        lambda: jobs.replay("nope", 1),
        lambda: jobs.retry_dead("nope"),
        lambda: jobs.purge_archive("nope"),
        lambda: jobs.drain("nope", lambda p, j: None),
    ]
    for call in calls:
        with pytest.raises(DrainpipeError) as info:
            await call()
        assert info.value.kind == "invalid_request" and info.value.status == 400
        assert str(info.value) == 'Unknown queue "nope". Queues: emails, reports'


async def test_bad_payloads_and_options_are_validation_errors_and_store_nothing(
    jobs: Jobs, jobs_db_url: str, backend_name: str
) -> None:
    bad_calls: list[Any] = [
        lambda: jobs.enqueue("emails", {"subject": "no recipient"}),
        lambda: jobs.enqueue("emails", {"to": 5}),
        lambda: jobs.enqueue("reports", {"raw": b"\xff\xfe"}),  # bytes that are not text
        lambda: jobs.enqueue("reports", {"obj": object()}),
        lambda: jobs.enqueue("emails", {"to": "a@x"}, run_at=datetime(2030, 1, 1)),  # naive
        lambda: jobs.enqueue("emails", {"to": "a@x"}, max_attempts=0),
        lambda: jobs.enqueue("emails", {"to": "a@x"}, max_attempts=True),
        lambda: jobs.enqueue("emails", {"to": "a@x"}, delay=-1),
        lambda: jobs.enqueue("emails", {"to": "a@x"}, delay=float("nan")),
        lambda: jobs.enqueue("emails", {"to": "a@x"}, dedupe_key=""),
        lambda: jobs.enqueue("emails", {"to": "a@x"}, dedupe="sometimes"),  # type: ignore[arg-type]
        lambda: jobs.enqueue("emails", {"to": "a@x"}, context={"tenant": 3}),
        lambda: jobs.enqueue_many("emails", [{"to": "ok@x"}, {"to": None}]),
    ]
    for index, call in enumerate(bad_calls):
        with pytest.raises(DrainpipeError) as info:
            await call()
        assert (info.value.kind, info.value.status) == ("validation", 422), index
        assert info.value.issues, index
    with pytest.raises(DrainpipeError) as info:
        await jobs.enqueue("emails", {"subject": "x"})
    assert info.value.issues == [{"message": "Field required", "path": ["to"]}]
    with pytest.raises(DrainpipeError) as info:
        await jobs.enqueue_many("emails", [{"to": "ok@x"}, {"to": None}])
    assert info.value.issues is not None and info.value.issues[0]["path"] == [1, "to"]
    assert await _count_live(jobs_db_url, backend_name) == 0


async def test_run_at_and_delay(jobs: Jobs) -> None:
    fixed = datetime(2030, 1, 1, tzinfo=UTC)
    clocked = Jobs(jobs.backend, QUEUES, now=lambda: fixed)
    await clocked.enqueue("emails", {"to": "a@x"}, run_at=fixed + timedelta(hours=1))
    await clocked.enqueue("emails", {"to": "b@x"}, run_at=fixed - timedelta(hours=1))  # past: now
    await jobs.enqueue("emails", {"to": "c@x"}, delay=timedelta(minutes=5))
    stats = (await jobs.stats(["emails"]))["emails"]
    assert (stats.ready, stats.delayed) == (1, 2)


async def test_typed_queue_handle(jobs: Jobs) -> None:
    emails = jobs.queue("emails", Email)
    job_id = await emails.enqueue(Email(to="a@x"))
    [job] = await emails.claim()
    assert job.id == job_id and job.payload == {"to": "a@x", "subject": "hi"}
    assert await emails.complete(job)
    with pytest.raises(ValueError, match="another schema"):
        jobs.queue("emails", dict)
    with pytest.raises(DrainpipeError):
        jobs.queue("nope")


# -- privileges and errors -------------------------------------------------------------


@pytest.mark.parametrize("role", ["anon", "authenticated"])
async def test_api_roles_cannot_execute_job_functions(db_url: str, role: str) -> None:
    async with await connect(db_url) as c:
        await c.execute(f"SET ROLE {role}")
        jobs = Jobs(c, QUEUES)
        with pytest.raises(DrainpipeError) as info:
            await jobs.enqueue("emails", {"to": "a@x"})
        assert info.value.kind == "forbidden" and info.value.status == 403
        assert isinstance(info.value.__cause__, psycopg.errors.InsufficientPrivilege)
        await c.execute("RESET ROLE")
        rows = await (
            await c.execute(
                "SELECT p.oid::regprocedure::text, has_function_privilege(%s, p.oid, 'execute'),"
                " has_function_privilege('service_role', p.oid, 'execute')"
                " FROM pg_proc p WHERE p.pronamespace = 'drainpipe'::regnamespace",
                (role,),
            )
        ).fetchall()
    assert len(rows) > 10
    # but the last term of a pgmq lease bound, a check every writer of a queue table runs:
    # it does nothing but refuse (raise DPQ03)
    executable = [name for name, api, _ in rows if api]
    assert executable in (
        [],
        ["drainpipe.pgmq_lease_refused(text,timestamp with time zone,double precision)"],
    )
    assert [name for name, _, service in rows if not service] == []


async def test_service_role_can_run_jobs(db_url: str) -> None:
    async with await connect(db_url) as c:
        await c.execute("SET ROLE service_role")
        jobs = Jobs(c, QUEUES)
        job_id = await jobs.enqueue("emails", {"to": "a@x"})
        [job] = await jobs.claim("emails")
        assert job.id == job_id and await jobs.complete(job)


async def test_network_errors_are_translated(caplog: pytest.LogCaptureFixture) -> None:
    from drainpipe.db import Database

    db = Database("postgresql://postgres@127.0.0.1:1/none?connect_timeout=1", timeout=0.5)
    jobs = Jobs(db, QUEUES)
    with pytest.raises(DrainpipeError) as info:
        await jobs.enqueue("emails", {"to": "a@x"})
    assert info.value.kind == "network" and info.value.status == 503
    await db.close()
