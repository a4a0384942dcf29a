"""The lease engine: its pure core, and the runner's semantics on real Postgres (jobs on both
backends, the webhook inbox), with real racing connections taking leases over."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from pydantic import BaseModel

import drainpipe
from drainpipe import DrainpipeError, Jobs, WebhookInbox, WebhookMessage
from drainpipe.engine import LEASE_LOST, Runner, core
from tests.conftest import connect


class Email(BaseModel):
    to: str


QUEUES: dict[str, Any] = {"emails": Email}


@pytest.fixture
async def jobs(jobs_db_url: str) -> AsyncIterator[Jobs]:
    instance = Jobs(jobs_db_url, QUEUES)
    yield instance
    await instance.backend.db.close()  # type: ignore[attr-defined]


class Errors:
    def __init__(self) -> None:
        self.seen: list[tuple[BaseException, Any]] = []

    def __call__(self, error: BaseException, item: Any) -> None:
        self.seen.append((error, item))

    def codes(self) -> list[str | None]:
        return [getattr(error, "code", None) for error, _ in self.seen]


# -- the pure core -------------------------------------------------------------------------


def test_claim_retries_wait_doubling_and_stop_after_three() -> None:
    assert [core.claim_retry_wait(n, 1.0) for n in (1, 2, 3)] == [1.0, 2.0, 4.0]
    assert [core.claim_retry_wait(n, 0.25) for n in (1, 2, 3)] == [0.25, 0.5, 1.0]
    assert [core.should_retry_claim(True, done) for done in range(5)] == [
        True, True, True, False, False,
    ]  # fmt: skip
    assert core.should_retry_claim(False, 0) is False
    assert core.next_idle_wait(1.0, 30.0) == 2.0 and core.next_idle_wait(20.0, 30.0) == 30.0


def test_heartbeat_cadence_is_half_the_lease_above_the_floor_or_the_given_one() -> None:
    assert core.heartbeat_interval(300) == 150
    assert core.heartbeat_interval(1.0, floor=core.JOB_HEARTBEAT_FLOOR) == 1.0  # jobs: max(1, ½)
    assert core.heartbeat_interval(0.6) == 0.3  # the inbox: every half lease, however short
    assert core.heartbeat_interval(300, every=0.1, floor=1.0) == 0.1


def test_budget_and_deadline_math() -> None:
    assert core.run_deadline(100.0, None, None) is None
    assert core.run_deadline(100.0, 5.0, None) == 105.0
    assert core.run_deadline(100.0, 5.0, 103.0) == 103.0
    assert core.run_deadline(100.0, None, 103.0) == 103.0
    assert core.budget_spent(103.0, 103.0) and not core.budget_spent(102.9, 103.0)
    assert not core.budget_spent(1e9, None)
    assert core.time_left(110.0, 105.0) == 0.0


def test_route_leases_cover_the_rest_of_the_budget_plus_the_margin() -> None:
    assert core.route_lease(now=10.0, deadline=50.0, floor=0.0, margin=30.0) == 70.0
    assert core.route_lease(now=60.0, deadline=50.0, floor=0.0, margin=30.0) == 30.0  # past it
    assert core.route_lease(now=10.0, deadline=50.0, floor=600.0, margin=30.0) == 600.0


def test_fair_shares_split_what_is_left_and_hand_unused_time_on() -> None:
    # three sources, 30 s: the first gets 10 s
    assert core.fair_share_deadline(0.0, 30.0, 3) == 10.0
    # the first finished after 1 s: the two left share 29 s
    assert core.fair_share_deadline(1.0, 30.0, 2) == 15.5
    assert core.fair_share_deadline(16.0, 30.0, 1) == 30.0
    assert core.fair_share_deadline(40.0, 30.0, 2) == 40.0  # past the deadline: nothing left


# -- the runner over a source of its own (no database: the engine's retry rule) -------------


@dataclass
class Item:
    id: int


class FlakySource:
    """A source whose claims fail with ``errors`` first, then hand out ``items`` once."""

    leases = False
    heartbeat_floor = 0.0
    complete_each = False
    async_handler = True

    def __init__(self, errors: list[BaseException], items: Sequence[Item] = ()) -> None:
        self.errors = list(errors)
        self.items = list(items)
        self.claims = 0
        self.completed: list[int] = []

    async def claim(self, batch: int, lease: float) -> list[Item]:
        self.claims += 1
        if self.errors:
            raise self.errors.pop(0)
        items, self.items = self.items[:batch], self.items[batch:]
        return items

    async def extend(self, items: Sequence[Item], lease: float) -> set[int]:
        return {item.id for item in items}

    async def complete(self, items: Sequence[Item]) -> Sequence[Item]:
        self.completed += [item.id for item in items]
        return ()

    async def fail(self, item: Item, error: str, retry_in: float | None) -> None:
        raise AssertionError("nothing fails here")

    def start(self, item: Item) -> Any:
        return asyncio.sleep(0)

    def describe(self, item: Item | None) -> str:
        return "test source" if item is None else f"test item {item.id}"


async def test_transient_claim_errors_are_retried_three_times_then_the_run_raises() -> None:
    def network() -> DrainpipeError:
        return DrainpipeError("network", "connection refused")

    source = FlakySource([network(), network(), network()], [Item(1)])
    report = await Runner(source, poll_interval=0.01).run(until_empty=True)
    assert (report.succeeded, source.claims, source.completed) == (1, 5, [1])

    source = FlakySource([network() for _ in range(4)], [Item(1)])
    started = time.monotonic()
    with pytest.raises(DrainpipeError) as info:
        await Runner(source, poll_interval=0.01).run(until_empty=True)
    assert info.value.kind == "network" and source.claims == 4
    assert time.monotonic() - started >= 0.07  # waited 0.01 + 0.02 + 0.04

    # not transient: no retry; a non-drainpipe exception becomes kind unexpected
    source = FlakySource([RuntimeError("bug in a backend")])
    with pytest.raises(DrainpipeError) as info:
        await Runner(source, poll_interval=0.01).run(until_empty=True)
    assert (info.value.kind, source.claims) == ("unexpected", 1)
    assert isinstance(info.value.__cause__, RuntimeError)

    # the drain route's rule: before the source ever answered, a claim error is not retried
    source = FlakySource([network()], [Item(1)])
    with pytest.raises(DrainpipeError):
        await Runner(source, poll_interval=0.01, retry_unreached=False).run(until_empty=True)
    assert source.claims == 1


# -- lost leases: jobs, both backends ---------------------------------------------------------


async def test_a_job_whose_lease_was_taken_over_is_stopped_and_reported(
    jobs: Jobs, jobs_db_url: str
) -> None:
    [job_id] = await jobs.enqueue_many("emails", [{"to": "slow@x"}])
    thief = Jobs(jobs_db_url, QUEUES)
    taken: list[drainpipe.Job[Any]] = []
    progress: list[str] = []
    errors = Errors()

    async def take_over() -> None:
        # the 0.3 s lease runs out (no beat before 1 s): another worker claims the job
        while not taken:
            await asyncio.sleep(0.05)
            taken.extend(await thief.claim("emails", lease=60))

    async def slow(payload: Email, job: drainpipe.Job[Email]) -> None:
        progress.append("started")
        thief_task = asyncio.create_task(take_over())
        try:
            await asyncio.sleep(4)  # the heartbeat at 1 s finds the lease lost and cancels this
            progress.append("finished")  # never reached
        except asyncio.CancelledError:
            progress.append("cancelled")
            raise
        finally:
            await thief_task

    started = time.monotonic()
    report = await jobs.drain("emails", slow, lease=0.3, heartbeat_every=1.0, on_error=errors)
    assert time.monotonic() - started < 3
    assert progress == ["started", "cancelled"]
    assert (report.succeeded, report.failed) == (0, 0)
    [(error, job)] = errors.seen
    assert isinstance(error, DrainpipeError)
    assert (error.kind, error.code, error.status) == ("conflict", LEASE_LOST, 409)
    assert job.id == job_id and job.attempts == 1
    # the takeover's result stands: it still holds attempt 2 and completes it
    [stolen] = taken
    assert (stolen.id, stolen.attempts) == (job_id, 2)
    assert await thief.complete(stolen) is True
    stats = (await jobs.stats(["emails"]))["emails"]
    assert (stats.ready, stats.in_flight, stats.dead) == (0, 0, 0)
    await thief.backend.db.close()  # type: ignore[attr-defined]


async def test_a_done_job_taken_over_before_the_batch_settles_is_discarded(
    jobs: Jobs, jobs_db_url: str
) -> None:
    ids = await jobs.enqueue_many("emails", [{"to": "first@x"}, {"to": "second@x"}])
    thief = Jobs(jobs_db_url, QUEUES)
    taken: list[drainpipe.Job[Any]] = []
    errors = Errors()

    async def handle(payload: Email, job: drainpipe.Job[Email]) -> None:
        if payload.to == "second@x":
            # the first job is done but not yet completed (batches settle together); its
            # lease runs out and another worker takes it while this one is still busy
            while not taken:
                await asyncio.sleep(0.05)
                taken.extend(await thief.claim("emails", lease=60))
            await asyncio.sleep(1.2)  # the beat at 1 s sees the first job lost

    report = await jobs.drain(
        "emails", handle, batch=2, lease=0.3, heartbeat_every=1.0, on_error=errors
    )
    assert [job.id for job in taken] == [ids[0]]
    assert report.succeeded == 1  # only the second job was completed by this worker
    assert errors.codes() == [LEASE_LOST]
    assert errors.seen[0][1].id == ids[0]
    assert await thief.complete(taken[0]) is True  # the takeover still holds it
    stats = (await jobs.stats(["emails"]))["emails"]
    assert (stats.ready, stats.in_flight) == (0, 0)
    await thief.backend.db.close()  # type: ignore[attr-defined]


async def test_default_on_error_logs_the_queue_and_the_job_id(
    jobs: Jobs, caplog: pytest.LogCaptureFixture
) -> None:
    job_id = await jobs.enqueue("emails", {"to": "a@x"})

    async def broken(payload: Email, job: drainpipe.Job[Email]) -> None:
        raise RuntimeError("smtp said no")

    with caplog.at_level(logging.ERROR, logger="drainpipe"):
        report = await jobs.drain("emails", broken)
    assert report.failed == 1
    [record] = [r for r in caplog.records if r.name == "drainpipe.jobs"]
    assert record.levelno == logging.ERROR
    assert f"queue emails job {job_id} (attempt 1/5)" in record.getMessage()
    assert "smtp said no" in record.getMessage()
    assert record.exc_info is not None and isinstance(record.exc_info[1], RuntimeError)


# -- lost leases: the webhook inbox -----------------------------------------------------------


@pytest.fixture
async def inbox(db_url: str) -> AsyncIterator[WebhookInbox]:
    box = WebhookInbox(db_url, source="billing", worker="slow")
    yield box
    await box.close()


async def _row(conn: psycopg.AsyncConnection[Any], message_id: str) -> dict[str, Any]:
    cur = await conn.execute(
        "SELECT status, attempts, locked_by, last_error, processed_at"
        " FROM drainpipe.webhook_inbox WHERE message_id = %s",
        (message_id,),
    )
    row = await cur.fetchone()
    assert row is not None and cur.description is not None
    return dict(zip([d.name for d in cur.description], row, strict=True))


async def test_an_inbox_message_taken_over_is_stopped_and_the_takeover_stands(
    db_url: str, inbox: WebhookInbox, conn: psycopg.AsyncConnection[Any]
) -> None:
    await inbox.store(id="evt_slow", payload={"n": 1})
    progress: list[str] = []
    taken: list[tuple[Any, ...]] = []
    errors = Errors()

    async def take_over() -> None:
        thief = await connect(db_url)
        while not taken:  # the 0.3 s lease runs out (no beat before 1 s)
            await asyncio.sleep(0.05)
            cur = await thief.execute(
                "SELECT id, attempts FROM drainpipe.claim_webhooks_v1('billing', 'thief', 1, 60)"
            )
            taken.extend(await cur.fetchall())
        [(row_id, attempt)] = taken
        await thief.execute(
            "SELECT drainpipe.complete_webhook_v1(%s, 'thief', %s)", (row_id, attempt)
        )
        await thief.close()

    async def handler(message: WebhookMessage) -> None:
        progress.append("started")
        thief_task = asyncio.create_task(take_over())
        try:
            await asyncio.sleep(4)
            progress.append("finished")
        except asyncio.CancelledError:
            progress.append("cancelled")
            raise
        finally:
            await thief_task
        raise RuntimeError("a late failure that must not be recorded")

    started = time.monotonic()
    report = await inbox.process(handler, lease=0.3, heartbeat_every=1.0, on_error=errors)
    assert time.monotonic() - started < 3
    assert progress == ["started", "cancelled"]
    assert (report.succeeded, report.failed) == (0, 0)
    [(error, message)] = errors.seen
    assert isinstance(error, DrainpipeError) and (error.kind, error.code) == (
        "conflict",
        LEASE_LOST,
    )
    assert message.message_id == "evt_slow" and message.attempts == 1
    row = await _row(conn, "evt_slow")
    assert (row["status"], row["attempts"], row["last_error"]) == ("processed", 2, None)


async def test_an_inbox_message_whose_attempt_changed_is_skipped_before_it_runs(
    inbox: WebhookInbox, conn: psycopg.AsyncConnection[Any]
) -> None:
    await inbox.store(id="evt_first", payload={})
    await inbox.store(id="evt_second", payload={})
    handled: list[str] = []
    errors = Errors()

    async def handler(message: WebhookMessage) -> None:
        handled.append(message.message_id)
        if message.message_id == "evt_first":
            # an operator (or a reclaim) bumps the waiting message's attempt: the next beat
            # finds it no longer held by this worker's attempt
            await conn.execute(
                "UPDATE drainpipe.webhook_inbox SET attempts = attempts + 1"
                " WHERE message_id = 'evt_second'"
            )
            await asyncio.sleep(0.3)  # beats every 0.1 s

    report = await inbox.process(handler, batch=2, heartbeat_every=0.1, on_error=errors)
    assert handled == ["evt_first"]
    assert (report.succeeded, report.failed) == (1, 0)
    assert errors.codes() == [LEASE_LOST]
    assert errors.seen[0][1].message_id == "evt_second"
    assert (await _row(conn, "evt_first"))["status"] == "processed"
    second = await _row(conn, "evt_second")
    assert (second["status"], second["attempts"], second["processed_at"]) == ("processing", 2, None)


async def test_the_inbox_retries_a_transient_claim_error_and_reports_to_on_error(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    from drainpipe.db import Database

    class DropsFirstClaim(Database):
        """Real Postgres; the first claim fails as a dropped connection would."""

        dropped = False

        async def fetch(self, sql: str, params: Any = None) -> Any:
            if "claim_webhooks" in sql and not self.dropped:
                self.dropped = True
                raise DrainpipeError("network", "server closed the connection unexpectedly")
            return await super().fetch(sql, params)

    database = DropsFirstClaim(db_url)
    box = WebhookInbox(database, source="billing")
    await box.store(id="evt_ok", payload={})
    await box.store(id="evt_bad", payload={})
    errors = Errors()

    async def handler(message: WebhookMessage) -> None:
        if message.message_id == "evt_bad":
            raise ValueError("cannot book it")

    report = await box.process(handler, on_error=errors)
    assert database.dropped
    assert (report.succeeded, report.failed) == (1, 1)
    [(error, message)] = errors.seen
    assert isinstance(error, ValueError) and message.message_id == "evt_bad"
    assert (await _row(conn, "evt_bad"))["last_error"] == "cannot book it"
    await box.close()


async def test_inbox_default_on_error_logs_the_source_and_message(
    inbox: WebhookInbox, caplog: pytest.LogCaptureFixture
) -> None:
    await inbox.store(id="evt_log", payload={})

    def handler(message: WebhookMessage) -> None:
        raise RuntimeError("ledger down")

    with caplog.at_level(logging.ERROR, logger="drainpipe"):
        assert (await inbox.process(handler)).failed == 1
    [record] = [r for r in caplog.records if r.name == "drainpipe.inbox"]
    assert "inbox billing message evt_log" in record.getMessage()
    assert "ledger down" in record.getMessage()


async def test_a_handler_that_swallows_the_cancel_has_its_result_discarded(
    jobs: Jobs, jobs_db_url: str
) -> None:
    job_id = await jobs.enqueue("emails", {"to": "stubborn@x"})
    thief = Jobs(jobs_db_url, QUEUES)
    taken: list[drainpipe.Job[Any]] = []
    errors = Errors()

    async def stubborn(payload: Email, job: drainpipe.Job[Email]) -> None:
        while not taken:
            await asyncio.sleep(0.05)
            taken.extend(await thief.claim("emails", lease=60))
        # a handler that ignores cancellation: it returns "successfully" after the cancel
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(4)

    report = await jobs.drain("emails", stubborn, lease=0.3, heartbeat_every=1.0, on_error=errors)
    assert (report.succeeded, report.failed) == (0, 0)
    assert errors.codes() == [LEASE_LOST] and errors.seen[0][1].id == job_id
    assert await thief.complete(taken[0]) is True  # nothing was completed in its name
    await thief.backend.db.close()  # type: ignore[attr-defined]


async def test_on_error_must_be_callable(jobs: Jobs, inbox: WebhookInbox) -> None:
    async def handle(payload: Email, job: drainpipe.Job[Email]) -> None:
        pass

    with pytest.raises(TypeError, match="on_error must be callable"):
        await jobs.drain("emails", handle, on_error="print")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="on_error must be callable"):
        await inbox.process(lambda message: None, on_error=42)  # type: ignore[arg-type]
