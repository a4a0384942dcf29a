"""Handlers tested the way a user would, without Postgres: ``Jobs`` over the in-memory
backend, with a clock the test moves instead of sleeping. No database fixture here."""

from __future__ import annotations

import asyncio
import copy
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

import drainpipe
from drainpipe import DrainpipeError, Jobs, Retry
from drainpipe.testing import Clock, MemoryBackend, check_queue_backend, retry_delay

START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


class Email(BaseModel):
    to: str
    subject: str = "hi"


QUEUES: dict[str, Any] = {"emails": Email, "reports": dict[str, Any]}


@pytest.fixture
def clock() -> Clock:
    return Clock(START)


@pytest.fixture
def jobs(clock: Clock) -> Jobs:
    return Jobs(MemoryBackend(now=clock, rng=random.Random(7)), QUEUES, now=clock)


class Outbox:
    """A handler that 'sends' emails, failing for the addresses it is told to."""

    def __init__(self, failing: set[str] | None = None) -> None:
        self.sent: list[Email] = []
        self.failing = failing or set()
        self.attempts: list[int] = []

    async def __call__(self, email: Email, job: drainpipe.Job[Email]) -> None:
        self.attempts.append(job.attempts)
        if email.to in self.failing:
            raise RuntimeError(f"mailbox {email.to} is full")
        self.sent.append(email)


# -- the everyday path --------------------------------------------------------------------


async def test_drain_runs_the_handler_with_the_validated_payload(jobs: Jobs) -> None:
    outbox = Outbox()
    await jobs.enqueue("emails", Email(to="a@example.com"))
    await jobs.enqueue("emails", {"to": "b@example.com", "subject": "yo"})

    report = await jobs.drain("emails", outbox)

    assert (report.succeeded, report.failed) == (2, 0)
    assert outbox.sent == [Email(to="a@example.com"), Email(to="b@example.com", subject="yo")]
    assert outbox.attempts == [1, 1]
    stats = (await jobs.stats())["emails"]
    assert (stats.ready, stats.in_flight, stats.delayed, stats.dead) == (0, 0, 0, 0)
    assert stats.oldest_age_seconds is None
    # a completed job is gone: nothing comes back
    assert await jobs.claim("emails") == []


async def test_a_bad_payload_is_refused_before_anything_is_stored(jobs: Jobs) -> None:
    with pytest.raises(DrainpipeError) as caught:
        await jobs.enqueue("emails", {"subject": "no address"})
    assert caught.value.kind == "validation"
    with pytest.raises(DrainpipeError) as unknown:
        await jobs.enqueue("sms", {"to": "x"})
    assert unknown.value.kind == "invalid_request"
    assert str(unknown.value) == 'Unknown queue "sms". Queues: emails, reports'
    with pytest.raises(DrainpipeError):
        await jobs.enqueue_many("emails", [{"to": "ok@x"}, {"nope": 1}])
    assert (await jobs.stats())["emails"].ready == 0


async def test_context_reaches_the_handler(jobs: Jobs) -> None:
    seen: list[drainpipe.JobContext] = []

    async def handler(email: Email, job: drainpipe.Job[Email]) -> None:
        seen.append(job.context)

    await jobs.enqueue("emails", Email(to="a@x"), context={"actor": {"id": "u1"}, "tenant": "acme"})
    await jobs.drain("emails", handler)
    assert seen == [drainpipe.JobContext(actor=drainpipe.Actor("u1"), tenant="acme")]


async def test_a_handler_mutating_its_payload_does_not_change_the_stored_job(
    jobs: Jobs, clock: Clock
) -> None:
    seen: list[dict[str, Any]] = []

    async def mutate(report: dict[str, Any], job: drainpipe.Job[Any]) -> None:
        seen.append(copy.deepcopy(report))
        report["rows"].append("mutated")
        raise Retry(after=5)

    await jobs.enqueue("reports", {"rows": ["a"]})
    await jobs.drain("reports", mutate)
    clock.advance(5)
    await jobs.drain("reports", mutate)
    assert seen == [{"rows": ["a"]}, {"rows": ["a"]}]


# -- failures, retries, dead letters --------------------------------------------------------


async def test_a_failing_handler_is_retried_with_backoff_then_dead(
    jobs: Jobs, clock: Clock
) -> None:
    outbox = Outbox(failing={"full@x"})
    errors: list[tuple[BaseException, Any]] = []
    job_id = await jobs.enqueue("emails", Email(to="full@x"), max_attempts=3)

    async def on_error(error: BaseException, job: Any) -> None:
        errors.append((error, job))

    report = await jobs.drain("emails", outbox, on_error=on_error)
    assert (report.succeeded, report.failed) == (0, 1)
    # waiting out its backoff (1 to 10 s after the first attempt): not ready yet
    stats = (await jobs.stats())["emails"]
    assert (stats.ready, stats.in_flight) == (0, 1)
    assert (await jobs.drain("emails", outbox)).failed == 0

    clock.advance(10)  # the longest first backoff
    assert (await jobs.drain("emails", outbox)).failed == 1
    clock.advance(20)  # the longest second backoff
    assert (await jobs.drain("emails", outbox)).failed == 1

    assert outbox.attempts == [1, 2, 3] and outbox.sent == []
    assert [str(error) for error, _ in errors] == ["mailbox full@x is full"]
    assert errors[0][1].id == job_id
    stats = (await jobs.stats())["emails"]
    assert (stats.ready, stats.in_flight, stats.dead) == (0, 0, 1)
    [dead] = await jobs.list_dead("emails")
    assert (dead.id, dead.attempts, dead.max_attempts) == (job_id, 3, 3)
    assert dead.payload == {"to": "full@x", "subject": "hi"}
    assert dead.last_error == "mailbox full@x is full"
    assert dead.died_at == clock()

    # the operator fixes the mailbox and replays the dead letter
    outbox.failing.clear()
    new_id = await jobs.replay("emails", job_id)
    assert new_id is not None and new_id != job_id
    assert await jobs.replay("emails", job_id) is None  # not a dead letter any more
    assert (await jobs.drain("emails", outbox)).succeeded == 1
    assert outbox.sent == [Email(to="full@x")]
    assert await jobs.list_dead("emails") == []


async def test_retry_waits_exactly_as_long_as_asked(jobs: Jobs, clock: Clock) -> None:
    runs: list[datetime] = []

    async def flaky(email: Email, job: drainpipe.Job[Email]) -> None:
        runs.append(clock())
        if len(runs) == 1:
            raise Retry(after=30)

    await jobs.enqueue("emails", Email(to="a@x"))
    assert (await jobs.drain("emails", flaky)).failed == 1
    clock.advance(29.9)
    assert (await jobs.drain("emails", flaky)).succeeded == 0
    clock.advance(0.1)
    assert (await jobs.drain("emails", flaky)).succeeded == 1
    assert runs == [START, START + timedelta(seconds=30)]


async def test_the_backoff_is_full_jitter_within_the_contract_bounds() -> None:
    assert [retry_delay(n, lambda: 0.0) for n in (1, 2, 9)] == [1.0, 1.0, 1.0]
    assert [retry_delay(n, lambda: 0.9999999) for n in (1, 2, 3, 9, 10, 50)] == [
        10.0,
        20.0,
        40.0,
        2560.0,
        3600.0,
        3600.0,
    ]
    assert retry_delay(0, lambda: 0.9999999) == 10.0  # attempt 0 counts as the first


async def test_dead_letters_newest_first_with_a_cursor_and_retry_dead(
    jobs: Jobs, clock: Clock
) -> None:
    ids = [await jobs.enqueue("emails", Email(to=f"{n}@x"), max_attempts=1) for n in range(5)]
    for job in await jobs.claim("emails", batch=5):
        assert await jobs.fail(job, f"boom {job.id}") == "dead"
        clock.advance(1)
    page = await jobs.list_dead("emails", limit=2)
    assert [dead.id for dead in page] == [ids[4], ids[3]]
    older = await jobs.list_dead("emails", limit=2, cursor=page[-1].id)
    assert [dead.id for dead in older] == [ids[2], ids[1]]
    assert (await jobs.stats())["emails"].dead == 5

    assert await jobs.retry_dead("emails", ids=[ids[0], 999]) == 1
    assert await jobs.retry_dead("emails", limit=2) == 2  # the two newest
    assert [dead.id for dead in await jobs.list_dead("emails")] == [ids[2], ids[1]]
    assert (await jobs.stats())["emails"].ready == 3

    # dead letters older than dead_older_than are purged; newer ones stay
    clock.advance(timedelta(days=30) - timedelta(seconds=3.5))  # ids[1] died 30 days ago
    assert await jobs.purge_archive("emails") == 2  # with ids[0], replayed but kept as a record
    assert [dead.id for dead in await jobs.list_dead("emails")] == [ids[2]]


# -- leases and fencing, with time moved ----------------------------------------------------


async def test_a_lease_hides_the_job_until_it_runs_out(jobs: Jobs, clock: Clock) -> None:
    await jobs.enqueue("emails", Email(to="a@x"))
    [first] = await jobs.claim("emails", lease=30)
    assert first.visible_until == START + timedelta(seconds=30)
    assert await jobs.claim("emails") == []
    assert (await jobs.stats())["emails"].in_flight == 1

    clock.advance(30)
    [second] = await jobs.claim("emails", lease=30)
    assert (second.id, first.attempts, second.attempts) == (first.id, 1, 2)
    # the first holder is fenced off: nothing it does changes the job
    assert await jobs.complete(first) is False
    assert await jobs.fail(first, "late") is None
    assert await jobs.extend(first, 60) is False
    assert await jobs.extend(second, 60) is True
    clock.advance(45)
    assert await jobs.claim("emails") == []  # the extension holds
    assert await jobs.complete(second) is True


async def test_a_worker_whose_lease_ran_out_may_still_finish_an_unclaimed_job(
    jobs: Jobs, clock: Clock
) -> None:
    await jobs.enqueue("emails", Email(to="a@x"))
    [job] = await jobs.claim("emails", lease=5)
    clock.advance(60)
    assert await jobs.complete(job) is True
    assert (await jobs.stats())["emails"].ready == 0


async def test_a_lease_that_ran_out_on_the_last_attempt_is_a_dead_letter(
    jobs: Jobs, clock: Clock
) -> None:
    job_id = await jobs.enqueue("emails", Email(to="a@x"), max_attempts=1, dedupe_key="k")
    [job] = await jobs.claim("emails", lease=10)
    clock.advance(10)
    stats = (await jobs.stats())["emails"]
    assert (stats.ready, stats.in_flight, stats.dead) == (0, 0, 1)
    # dead already: a new job with the key is not coalesced onto it
    assert await jobs.enqueue("emails", Email(to="b@x"), dedupe_key="k") != job_id
    assert await jobs.list_dead("emails") == []  # archived by the next claim, not before
    [fresh] = await jobs.claim("emails")
    assert fresh.id != job_id
    [dead] = await jobs.list_dead("emails")
    assert (dead.id, dead.attempts, dead.last_error) == (
        job_id,
        1,
        "The lease ran out on the last attempt",
    )
    assert dead.died_at == clock()
    assert await jobs.complete(job) is False


async def test_the_worker_heartbeat_keeps_a_long_handler_s_lease(clock: Clock) -> None:
    extends: list[set[int]] = []

    class Counting(MemoryBackend):
        async def extend_many(self, jobs: Any, lease: float) -> set[int]:
            held = await super().extend_many(jobs, lease)
            extends.append(held)
            return held

    jobs = Jobs(Counting(now=clock), QUEUES, now=clock)
    job_id = await jobs.enqueue("emails", Email(to="a@x"))
    stolen: list[list[drainpipe.Job[Any]]] = []

    async def slow(email: Email, job: drainpipe.Job[Email]) -> None:
        # ten fake seconds pass against a 2 s lease; the heartbeat runs on real time
        for _ in range(5):
            clock.advance(2)
            await asyncio.sleep(0.08)
            stolen.append(await jobs.claim("emails"))

    report = await jobs.drain("emails", slow, lease=2, heartbeat_every=0.02)
    assert (report.succeeded, report.failed) == (1, 0)
    assert stolen == [[]] * 5  # nobody could take the job over while it ran
    assert extends and all(held == {job_id} for held in extends)
    assert (await jobs.stats())["emails"] == drainpipe.QueueStats(0, 0, 0, 0, None, succeeded=1)


# -- dedupe and delays -----------------------------------------------------------------------


async def test_dedupe_always_and_waiting(jobs: Jobs) -> None:
    first = await jobs.enqueue("emails", Email(to="a@x"), dedupe_key="user:1")
    assert await jobs.enqueue("emails", Email(to="b@x"), dedupe_key="user:1") == first
    assert await jobs.enqueue("emails", Email(to="c@x"), dedupe_key="user:2") != first
    [running] = [job for job in await jobs.claim("emails", batch=5) if job.id == first]
    # "always" coalesces onto the running job, "waiting" queues exactly one follow-up
    assert await jobs.enqueue("emails", Email(to="d@x"), dedupe_key="user:1") == first
    follow_up = await jobs.enqueue("emails", Email(to="e@x"), dedupe_key="user:1", dedupe="waiting")
    assert follow_up != first
    assert (
        await jobs.enqueue("emails", Email(to="f@x"), dedupe_key="user:1", dedupe="waiting")
        == follow_up
    )
    assert await jobs.complete(running) is True
    # the completed job never matches again; the follow-up still does
    assert await jobs.enqueue("emails", Email(to="g@x"), dedupe_key="user:1") == follow_up


async def test_delay_and_run_at_wait_for_the_clock(jobs: Jobs, clock: Clock) -> None:
    outbox = Outbox()
    await jobs.enqueue("emails", Email(to="later@x"), delay=60)
    await jobs.enqueue("emails", Email(to="at@x"), run_at=START + timedelta(minutes=5))
    stats = (await jobs.stats())["emails"]
    assert (stats.ready, stats.delayed, stats.oldest_age_seconds) == (0, 2, 0.0)
    assert (await jobs.drain("emails", outbox)).succeeded == 0

    clock.advance(60)
    assert (await jobs.drain("emails", outbox)).succeeded == 1
    clock.advance(240)
    assert (await jobs.drain("emails", outbox)).succeeded == 1
    assert [email.to for email in outbox.sent] == ["later@x", "at@x"]


async def test_stats_count_every_state(jobs: Jobs, clock: Clock) -> None:
    await jobs.enqueue("emails", Email(to="done@x"))
    await jobs.enqueue("emails", Email(to="running@x"))
    await jobs.enqueue("emails", Email(to="retrying@x"))
    await jobs.enqueue("emails", Email(to="dead@x"), max_attempts=1)
    await jobs.enqueue("emails", Email(to="delayed@x"), delay=600)
    clock.advance(5)
    done, running, retrying, dying = await jobs.claim("emails", batch=4, lease=60)
    assert await jobs.complete(done) is True
    await jobs.enqueue("emails", Email(to="ready@x"))
    assert (running.payload["to"], dying.payload["to"]) == ("running@x", "dead@x")
    assert await jobs.fail(retrying, "again", retry_in=120) == "queued"
    assert await jobs.fail(dying, "boom") == "dead"
    clock.advance(1)
    stats = await jobs.stats(["emails", "reports"])
    assert stats["emails"] == drainpipe.QueueStats(
        ready=1, in_flight=2, delayed=1, dead=1, oldest_age_seconds=6.0, succeeded=1
    )
    assert stats["reports"] == drainpipe.QueueStats(0, 0, 0, 0, None)


# -- many tasks at once -----------------------------------------------------------------------


async def test_racing_claimers_never_get_the_same_job(jobs: Jobs) -> None:
    ids = await jobs.enqueue_many("emails", [{"to": f"{n}@x"} for n in range(300)])

    async def claim_all() -> list[int]:
        got: list[int] = []
        while batch := await jobs.claim("emails", batch=7, lease=60):
            got += [job.id for job in batch]
        return got

    results = await asyncio.gather(*(claim_all() for _ in range(8)))
    claimed = [job_id for result in results for job_id in result]
    assert len(claimed) == len(set(claimed)) == 300 and set(claimed) == set(ids)
    assert sum(1 for result in results if result) > 1  # the tasks really interleaved


async def test_work_with_lanes_runs_each_job_once(jobs: Jobs) -> None:
    await jobs.enqueue_many("emails", [{"to": f"{n}@x"} for n in range(100)])
    seen: list[str] = []
    stop = asyncio.Event()

    async def handler(email: Email, job: drainpipe.Job[Email]) -> None:
        seen.append(email.to)
        await asyncio.sleep(0)
        if len(seen) == 100:
            stop.set()

    report = await asyncio.wait_for(
        jobs.work("emails", handler, concurrency=4, batch=5, stop=stop, poll_interval=0.01), 10
    )
    assert report.succeeded == 100 and sorted(seen) == sorted(f"{n}@x" for n in range(100))


# -- the drain route and schedules ------------------------------------------------------------


async def test_the_drain_route_runs_schedules_and_handlers(jobs: Jobs, clock: Clock) -> None:
    outbox = Outbox()
    await jobs.schedule("digest", "@hourly", "emails", Email(to="digest@x"))
    await jobs.enqueue("emails", Email(to="a@x"))
    route = jobs.drain_route(
        secret="s3cret-0123456789abcdef0123456789abcdef", handlers={"emails": outbox}
    )
    transport = httpx.ASGITransport(app=route)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        denied = await client.get("/api/drain")
        assert denied.status_code == 401
        first = await client.get(
            "/api/drain",
            headers={"Authorization": "Bearer s3cret-0123456789abcdef0123456789abcdef"},
        )
        clock.advance(3600)
        second = await client.post(
            "/api/drain",
            headers={"Authorization": "Bearer s3cret-0123456789abcdef0123456789abcdef"},
        )
        clock.advance(60)
        third = await client.get(
            "/api/drain",
            headers={"Authorization": "Bearer s3cret-0123456789abcdef0123456789abcdef"},
        )
    assert first.status_code == 200
    assert first.json() == {
        "schedules": 0,
        "queues": {"emails": {"succeeded": 1, "failed": 0}},
        "budgetExhausted": False,
        "errors": 0,
        "more": False,
    }
    assert (second.json()["schedules"], second.json()["queues"]["emails"]["succeeded"]) == (1, 1)
    assert third.json()["schedules"] == 0  # the next run is an hour away
    assert [email.to for email in outbox.sent] == ["a@x", "digest@x"]
    [info] = await jobs.list_schedules()
    assert (info.name, info.last_run, info.next_run) == (
        "digest",
        datetime(2026, 3, 1, 13, 0, tzinfo=UTC),
        datetime(2026, 3, 1, 14, 0, tzinfo=UTC),
    )


async def test_missed_runs_collapse_and_overlapping_runs_enqueue_once(
    jobs: Jobs, clock: Clock
) -> None:
    await jobs.schedule("tick", "1 minute", "reports", {"kind": "tick"})
    clock.advance(timedelta(minutes=10))
    counts = await asyncio.gather(*(jobs.run_schedules() for _ in range(4)))
    assert sorted(counts) == [0, 0, 0, 1]
    assert (await jobs.stats())["reports"].ready == 1
    assert await jobs.run_schedules() == 0


async def test_ensure_schedules_and_unschedule(jobs: Jobs) -> None:
    result = await jobs.ensure_schedules(
        [
            {"name": "app:a", "cron": "0 9 * * *", "queue": "reports", "payload": {}},
            drainpipe.ScheduleDef(
                "app:b", "@daily", "reports", {}, time_zone="Europe/Amsterdam", tenant="acme"
            ),
        ],
        prefix="app:",
    )
    assert result.scheduled == ["app:a", "app:b"] and result.removed == []
    assert [s.name for s in await jobs.list_schedules(tenant="acme")] == ["app:b"]
    assert (await jobs.list_schedules(prefix="app:"))[1].next_run == datetime(
        2026, 3, 1, 23, 0, tzinfo=UTC
    )  # midnight in Amsterdam
    again = await jobs.ensure_schedules(
        [{"name": "app:a", "cron": "0 9 * * *", "queue": "reports", "payload": {}}],
        prefix="app:",
    )
    assert again.removed == ["app:b"]
    with pytest.raises(DrainpipeError) as bad:
        await jobs.schedule("x", "61 * * * *", "reports", {})
    assert bad.value.kind == "validation"
    assert await jobs.unschedule("app:a") is True
    assert await jobs.unschedule("app:a") is False
    await jobs.schedule("t1", "@daily", "reports", {}, tenant="t")
    await jobs.schedule("t2", "@daily", "reports", {}, tenant="t")
    assert await jobs.unschedule_all(tenant="t") == 2
    assert await jobs.list_schedules() == []


# -- the backend itself ------------------------------------------------------------------------


async def test_the_memory_backend_passes_the_conformance_kit_with_moved_time() -> None:
    # a real clock: the kit's lease and delay checks move this backend's time ahead
    report = await check_queue_backend(MemoryBackend(), queue="conformance")
    assert report.ok and report.subject == 'QueueBackend "memory"'
    names = [check.name for check in report.checks]
    assert names[names.index("lease_expiry") :][:2] == ["lease_expiry", "delay"]
    assert names[-4:] == ["records_states", "records_cancel", "records_replay", "records_list"]
    assert not any(check.skipped for check in report.checks)


async def test_direct_calls_get_the_errors_the_sql_functions_raise() -> None:
    backend = MemoryBackend()
    with pytest.raises(DrainpipeError) as name:
        await backend.send("Bad-Name", {})
    assert name.value.kind == "invalid_input"
    with pytest.raises(DrainpipeError) as attempts:
        await backend.send("emails", {}, max_attempts=0)
    assert attempts.value.kind == "invalid_input"
    with pytest.raises(DrainpipeError) as nan:
        await backend.send_many("emails", [{"n": 1}, {"n": float("nan")}])
    assert nan.value.kind == "invalid_input"
    with pytest.raises(DrainpipeError) as nul:
        await backend.send("emails", {"text": "a\x00b"})
    assert nul.value.kind == "invalid_input"
    assert await backend.read("emails", lease=30, batch=10) == []  # nothing was stored


def test_the_clock_moves_only_forward_and_only_when_told() -> None:
    clock = Clock(START)
    assert clock() == START
    assert clock.advance(1.5) == START + timedelta(seconds=1.5)
    assert clock.advance(timedelta(minutes=1)) == START + timedelta(seconds=61.5)
    with pytest.raises(ValueError, match="step >= 0"):
        clock.advance(-1)
    with pytest.raises(ValueError, match="timezone-aware"):
        Clock(datetime(2026, 1, 1))  # a naive datetime: no instant
    assert Clock()().tzinfo is UTC
    backend = MemoryBackend(now=clock)
    assert backend.advance_time(10) == clock() == backend.now() == START + timedelta(seconds=71.5)


async def test_advance_time_runs_a_backend_on_another_clock_ahead_of_it() -> None:
    fixed = MemoryBackend(now=lambda: START)
    await fixed.send("emails", {"n": 1}, delay=60)
    assert await fixed.read("emails", lease=30, batch=1) == []
    assert fixed.advance_time(timedelta(seconds=60)) == START + timedelta(seconds=60)
    [job] = await fixed.read("emails", lease=30, batch=1)
    assert job.visible_until == START + timedelta(seconds=90)
    with pytest.raises(ValueError, match="step >= 0"):
        fixed.advance_time(-1)
    real = MemoryBackend()
    before = datetime.now(UTC)
    assert real.advance_time(3600) >= before + timedelta(seconds=3600)


async def test_batch_settlements_are_fenced_job_by_job(clock: Clock) -> None:
    backend = MemoryBackend(now=clock)
    jobs = Jobs(backend, QUEUES, now=clock)
    assert isinstance(backend, drainpipe.QueueBackend) and jobs.backend is backend
    emails = jobs.queue("emails", Email)
    await emails.enqueue_many([Email(to="a@x"), Email(to="b@x"), Email(to="c@x")])
    a, b, c = await emails.claim(batch=3, lease=10)
    assert await backend.extend_many([a, c], 60) == {a.id, c.id}
    clock.advance(10)
    [b_again] = await emails.claim(batch=3, lease=60)  # only b's lease ran out
    assert (b_again.id, b_again.attempts) == (b.id, 2)
    assert await backend.extend_many([a, b, c], 60) == {a.id, c.id}
    clock.advance(30)
    assert await emails.claim(batch=3) == []  # a and c extended, b held by its new claim
    assert await backend.complete_many([a, b, c, b_again]) == [True, False, True, True]
    assert await backend.complete_many([]) == [] and await backend.extend_many([], 5) == set()
    assert await emails.stats() == drainpipe.QueueStats(0, 0, 0, 0, None, succeeded=3)
