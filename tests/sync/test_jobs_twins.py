"""The jobs calls of both twins on real Postgres, on both storage backends: the same calls
give the same results, and the same mistakes the same errors."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from pydantic import BaseModel

import drainpipe
from drainpipe import DrainpipeError, Retry, sync
from drainpipe.models import Job
from drainpipe.testing import Clock
from tests.sync.conftest import InThread, Twin


class Email(BaseModel):
    to: str
    subject: str = ""


QUEUES: dict[str, Any] = {"emails": Email, "raw": dict}


async def test_enqueue_claim_settle_dead_letters_and_replay(twin: Twin, jobs_db_url: str) -> None:
    jobs = twin.jobs(jobs_db_url, QUEUES)
    first = await jobs.enqueue("emails", Email(to="a@example.com"))
    second = await jobs.enqueue("emails", {"to": "b@example.com"}, max_attempts=1)
    later = await jobs.enqueue("emails", {"to": "c@example.com"}, delay=3600)
    assert len({first, second, later}) == 3

    claimed = await jobs.claim("emails", batch=10, lease=30)
    assert sorted(job.id for job in claimed) == [first, second]
    by_id = {job.id: job for job in claimed}
    assert by_id[first].payload == {"to": "a@example.com", "subject": ""}  # stored serialised
    assert by_id[first].attempts == 1 and by_id[second].max_attempts == 1
    assert await jobs.extend(by_id[first], 60) is True
    assert await jobs.complete(by_id[first]) is True
    assert await jobs.complete(by_id[first]) is False  # settled already: the lease is gone
    assert await jobs.fail(by_id[second], ValueError("boom")) == "dead"
    assert await jobs.fail(by_id[second], "again") is None

    stats = (await jobs.stats())["emails"]
    assert (stats.ready, stats.in_flight, stats.delayed, stats.dead) == (0, 0, 1, 1)
    [dead] = await jobs.list_dead("emails")
    assert (dead.id, dead.payload, dead.last_error, dead.attempts) == (
        second,
        {"to": "b@example.com", "subject": ""},
        "boom",
        1,
    )
    assert await jobs.replay("emails", first) is None  # completed, not dead
    replayed = await jobs.replay("emails", second)
    assert replayed is not None and replayed not in (first, second, later)
    assert await jobs.retry_dead("emails") == 0
    assert await jobs.purge_archive("emails", older_than=0, dead_older_than=0) >= 0
    typed = jobs.queue("emails", Email) if not twin.is_sync else jobs.target.queue("emails")
    stats = await (typed.stats() if not twin.is_sync else asyncio.to_thread(typed.stats))
    assert stats.ready == 1  # the replayed one


async def test_enqueue_many_and_dedupe(twin: Twin, jobs_db_url: str) -> None:
    jobs = twin.jobs(jobs_db_url, QUEUES)
    ids = await jobs.enqueue_many("raw", [{"n": 1}, {"n": 2}, {"n": 3}])
    assert len(ids) == 3 and ids == sorted(ids)
    assert await jobs.enqueue_many("raw", []) == []
    key = await jobs.enqueue("raw", {"n": 4}, dedupe_key="k")
    assert await jobs.enqueue("raw", {"n": 5}, dedupe_key="k") == key
    claimed = await jobs.claim("raw", batch=10)
    assert key in {job.id for job in claimed}
    # "always" coalesces onto the running job, "waiting" queues one follow-up
    assert await jobs.enqueue("raw", {"n": 6}, dedupe_key="k") == key
    follow_up = await jobs.enqueue("raw", {"n": 7}, dedupe_key="k", dedupe="waiting")
    assert follow_up != key
    assert await jobs.enqueue("raw", {"n": 8}, dedupe_key="k", dedupe="waiting") == follow_up


def _error(call: Any) -> tuple[Any, ...]:
    try:
        call()
    except DrainpipeError as exc:
        return (exc.kind, exc.status, exc.code, str(exc), exc.issues)
    except (ValueError, TypeError) as exc:
        return (type(exc).__name__, str(exc))
    raise AssertionError("no error")


async def _async_error(call: Any) -> tuple[Any, ...]:
    try:
        await call()
    except DrainpipeError as exc:
        return (exc.kind, exc.status, exc.code, str(exc), exc.issues)
    except (ValueError, TypeError) as exc:
        return (type(exc).__name__, str(exc))
    raise AssertionError("no error")


STALE = Job(
    id=1,
    queue="emails",
    payload={},
    context=drainpipe.JobContext(),
    attempts=0,
    max_attempts=5,
    enqueued_at=datetime(2026, 1, 1, tzinfo=UTC),
    visible_until=datetime(2026, 1, 1, tzinfo=UTC),
    last_error=None,
)

MISTAKES: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
    ("enqueue", ("nope", {}), {}),
    ("enqueue", ("emails", {"subject": 1}), {}),
    ("enqueue", ("emails", {"to": "x"}), {"max_attempts": 0}),
    ("enqueue", ("emails", {"to": "x"}), {"dedupe": "never"}),
    ("enqueue", ("emails", {"to": "x"}), {"dedupe_key": ""}),
    ("enqueue", ("emails", {"to": "x"}), {"delay": -1}),
    ("enqueue", ("emails", {"to": "x"}), {"run_at": datetime(2026, 1, 1)}),
    ("enqueue", ("raw", {"x": float("nan")}), {}),
    ("enqueue", ("emails", {"to": "x"}), {"context": {"nobody": 1}}),
    ("enqueue_many", ("emails", [{"to": "x"}, {"to": 2}]), {}),
    ("enqueue_many", ("emails", "not a list"), {}),
    ("claim", ("emails",), {"batch": 0}),
    ("claim", ("nope",), {}),
    ("complete", ("not a job",), {}),
    ("fail", (STALE, "x"), {}),
    ("extend", (STALE, 10), {}),
    ("stats", (["emails", "nope"],), {}),
    ("list_dead", ("emails",), {"limit": 0}),
    ("list_dead", ("emails",), {"cursor": -1}),
    ("retry_dead", ("emails",), {"ids": ["1"]}),
    ("replay", ("emails", -1), {}),
    ("purge_archive", ("emails",), {"batch": 0}),
    ("schedule", ("s", "61 * * * *", "emails", {"to": "x"}), {}),
    ("schedule", ("s", "0 9 * * *", "emails", {"to": "x"}), {"time_zone": "Mars/Base"}),
    ("schedule", ("", "0 9 * * *", "emails", {"to": "x"}), {}),
    ("unschedule", (5,), {}),
    ("list_schedules", (), {"prefix": 5}),
    ("unschedule_all", (), {"tenant": ""}),
    (
        "ensure_schedules",
        ([{"name": "b:1", "cron": "@daily", "queue": "emails"}],),
        {"prefix": "a:"},
    ),
    ("ensure_schedules", ([],), {"prefix": ""}),
]


async def test_both_twins_refuse_the_same_input_with_the_same_error(db_url: str) -> None:
    # nothing reaches the database: the checks are the shared rules
    async_jobs = drainpipe.Jobs(db_url, QUEUES)
    sync_jobs = sync.Jobs(db_url, QUEUES)
    try:
        for name, args, kwargs in MISTAKES:
            expected = await _async_error(
                lambda n=name, a=args, k=kwargs: getattr(async_jobs, n)(*a, **k)
            )
            got = await asyncio.to_thread(
                _error, lambda n=name, a=args, k=kwargs: getattr(sync_jobs, n)(*a, **k)
            )
            assert got == expected, (name, args, kwargs)
    finally:
        await async_jobs.close()
        sync_jobs.close()


async def test_drain_runs_plain_handlers_with_retries_and_errors(
    twin: Twin, jobs_db_url: str
) -> None:
    jobs = twin.jobs(jobs_db_url, QUEUES)
    for n in range(3):
        await jobs.enqueue("raw", {"n": n})
    seen: list[tuple[int, int]] = []
    errors: list[tuple[str, Any]] = []

    def handle(payload: dict[str, int], job: Job[Any]) -> None:
        seen.append((payload["n"], job.attempts))
        if payload["n"] == 1:
            raise ValueError("broken")
        if payload["n"] == 2:
            raise Retry(after=600)

    def on_error(error: BaseException, job: Job[Any] | None) -> None:
        errors.append((str(error), job.payload if job else None))

    report = await jobs.drain("raw", twin.handler(handle), batch=2, on_error=on_error)
    assert (report.succeeded, report.failed, report.budget_exhausted) == (1, 2, False)
    assert sorted(seen) == [(0, 1), (1, 1), (2, 1)]
    assert errors == [("broken", {"n": 1})]  # Retry is not an error
    stats = (await jobs.stats(["raw"]))["raw"]
    assert (stats.ready, stats.dead) == (0, 0) and stats.in_flight + stats.delayed == 2
    # nothing is ready any more: an empty drain is one claim
    assert tuple(await jobs.drain("raw", twin.handler(handle))) == (0, 0)


async def test_drain_validates_payloads_and_honours_the_budget(
    twin: Twin, jobs_db_url: str
) -> None:
    jobs = twin.jobs(jobs_db_url, QUEUES)
    raw = twin.jobs(jobs_db_url, {"emails": dict})
    await raw.enqueue("emails", {"subject": "no recipient"})
    errors: list[BaseException] = []
    report = await jobs.drain(
        "emails", twin.handler(lambda payload, job: None), on_error=lambda e, j: errors.append(e)
    )
    assert (report.succeeded, report.failed) == (0, 1)
    assert isinstance(errors[0], DrainpipeError) and errors[0].kind == "validation"
    await jobs.enqueue("emails", {"to": "x"})
    spent = await jobs.drain("emails", twin.handler(lambda payload, job: None), budget=0)
    assert (spent.succeeded, spent.budget_exhausted) == (0, True)


async def test_drain_lanes_run_every_job_once(twin: Twin, jobs_db_url: str) -> None:
    jobs = twin.jobs(jobs_db_url, QUEUES)
    await jobs.enqueue_many("raw", [{"n": n} for n in range(24)])
    seen: list[int] = []
    lock = threading.Lock()

    def handle(payload: dict[str, int], job: Job[Any]) -> None:
        time.sleep(0.01)
        with lock:
            seen.append(payload["n"])

    report = await jobs.drain("raw", twin.handler(handle), concurrency=4, batch=3)
    assert report.succeeded == 24 and sorted(seen) == list(range(24))


async def test_heartbeats_keep_a_long_job_and_a_lost_lease_is_reported(
    twin: Twin, jobs_db_url: str
) -> None:
    jobs = twin.jobs(jobs_db_url, QUEUES)
    rival = sync.Jobs(jobs_db_url, QUEUES)
    try:
        await jobs.enqueue("raw", {"n": 1})
        stolen: list[Any] = []

        def long_job(payload: Any, job: Job[Any]) -> None:
            time.sleep(1.4)  # past the 1 s lease: only the heartbeat keeps it
            stolen.extend(rival.claim("raw"))

        report = await jobs.drain("raw", twin.handler(long_job), lease=1, heartbeat_every=0.2)
        assert report.succeeded == 1 and stolen == []

        await jobs.enqueue("raw", {"n": 2})
        errors: list[BaseException] = []

        def outlived(payload: Any, job: Job[Any]) -> None:
            time.sleep(1.3)  # no heartbeat before the lease ends: the rival takes it
            stolen.extend(rival.claim("raw", lease=30))

        report = await jobs.drain(
            "raw",
            twin.handler(outlived),
            lease=1,
            heartbeat_every=30,
            on_error=lambda error, job: errors.append(error),
        )
        assert [job.attempts for job in stolen] == [2]
        assert [getattr(e, "code", None) for e in errors] == ["LEASE_LOST"]
        assert rival.complete(stolen[0]) is True  # the rival's result stands
    finally:
        rival.close()


async def test_schedules_on_both_twins(twin: Twin, db_url: str) -> None:
    clock = Clock(datetime.now(UTC))
    jobs = twin.jobs(db_url, QUEUES, now=clock)
    await jobs.schedule("digest", "0 9 * * *", "raw", {"kind": "digest"}, time_zone="UTC")
    [info] = await jobs.list_schedules()
    assert info.name == "digest" and info.next_run > clock()
    assert (info.next_run.hour, info.next_run.minute) == (9, 0)
    result = await jobs.ensure_schedules(
        [{"name": "t:a", "cron": "@hourly", "queue": "raw", "payload": {}}], prefix="t:"
    )
    assert (result.scheduled, result.removed) == (["t:a"], [])
    assert await jobs.run_schedules() == 0  # nothing is due yet
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(
            "UPDATE drainpipe.job_schedules SET next_run = now() - interval '1 minute'"
            " WHERE name = 'digest'"
        )
    clock.advance(1)
    assert await jobs.run_schedules() == 1
    assert await jobs.run_schedules() == 0  # advanced: never twice
    assert (await jobs.stats(["raw"]))["raw"].ready == 1
    assert await jobs.unschedule("digest") is True
    assert await jobs.unschedule("digest") is False
    assert await jobs.unschedule_all(tenant="nobody") == 0


async def test_rollback_enqueues_nothing_and_commit_enqueues(twin: Twin, db_url: str) -> None:
    if twin.is_sync:
        conn: Any = await asyncio.to_thread(psycopg.connect, db_url)  # not autocommit
        jobs: Any = InThread(sync.Jobs(conn, QUEUES))
        run = asyncio.to_thread
    else:
        conn = await psycopg.AsyncConnection.connect(db_url)

        async def run(fn: Any) -> Any:
            return await fn()

        jobs = drainpipe.Jobs(conn, QUEUES)
    observer = sync.Jobs(db_url, QUEUES)
    try:
        await jobs.enqueue("raw", {"n": 1})
        await run(conn.rollback)
        assert observer.stats(["raw"])["raw"].ready == 0
        await jobs.enqueue("raw", {"n": 2})
        assert observer.stats(["raw"])["raw"].ready == 0  # not committed yet
        await run(conn.commit)
        assert observer.stats(["raw"])["raw"].ready == 1
        [job] = observer.claim("raw")
        assert job.payload == {"n": 2}
    finally:
        observer.close()
        await run(conn.close)


async def test_run_at_uses_the_given_clock(twin: Twin, db_url: str) -> None:
    clock = Clock(datetime(2026, 1, 1, tzinfo=UTC))
    jobs = twin.jobs(db_url, QUEUES, now=clock)
    await jobs.enqueue("raw", {}, run_at=clock() + timedelta(hours=1))
    assert (await jobs.stats(["raw"]))["raw"].delayed == 1


def test_the_sync_twin_refuses_async_handlers_and_async_connections(db_url: str) -> None:
    with sync.Jobs(db_url, QUEUES) as jobs:

        async def handler(payload: Any, job: Any) -> None:
            return None

        with pytest.raises(TypeError, match="plain functions"):
            jobs.drain("raw", handler)
        jobs.enqueue("raw", {})
        errors: list[BaseException] = []
        report = jobs.drain(
            "raw", lambda p, j: handler(p, j), on_error=lambda e, j: errors.append(e)
        )
        assert report.failed == 1 and "awaitable" in str(errors[0])
    with pytest.raises(TypeError, match="async ones belong"):
        sync.Jobs(object(), QUEUES)


async def test_database_failures_are_the_same_errors_on_both_twins(server_dsn: str) -> None:
    from tests.conftest import with_database

    empty = f"t_sync_empty_{int(time.time() * 1000)}"
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{empty}"')
    try:
        targets = {
            "missing database": with_database(server_dsn, "no_such_database_here"),
            "bad DSN": "postgresql://127.0.0.1:notaport/x",
            "no drainpipe SQL": with_database(server_dsn, empty),
        }
        for label, url in targets.items():
            async_jobs = drainpipe.Jobs(url, QUEUES)
            with pytest.raises(DrainpipeError) as expected:
                await async_jobs.enqueue("raw", {})
            await async_jobs.close()
            sync_jobs = sync.Jobs(url, QUEUES)
            with pytest.raises(DrainpipeError) as got:
                await asyncio.to_thread(sync_jobs.enqueue, "raw", {})
            sync_jobs.close()
            assert (got.value.kind, got.value.code) == (
                expected.value.kind,
                expected.value.code,
            ), label
            assert got.value.code is not None, label
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{empty}"')
