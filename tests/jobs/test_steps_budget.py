"""The steps' budget rule counts the lease as well as the call's budget (docs/reference.md
section 13): a job with less than ``step_margin`` left of its lease suspends at its next
step with immediate eligibility instead of running into the end of its lease, under
``work`` and ``drain`` alike; a heartbeat that extended the lease moves that end on.

Time is moved, not waited for: the Jobs' clock (``now=``) is the one the rule reads, and a
step moves it forward."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from drainpipe import Job, Jobs
from drainpipe.jobs.steps import LEASE_END

QUEUES: dict[str, Any] = {"flows": dict[str, Any]}


class Clock:
    """The real time plus an offset a test moves."""

    def __init__(self) -> None:
        self.offset = timedelta()

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.offset

    def move(self, seconds: float) -> None:
        self.offset += timedelta(seconds=seconds)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def jobs(jobs_db_url: str, clock: Clock) -> AsyncIterator[Jobs]:
    client = Jobs(jobs_db_url, QUEUES, now=clock)
    yield client
    await client.close()


def workflow(clock: Clock, calls: list[str], runs: list[int], *, wait_for_beat: bool) -> Any:
    """Step ``a`` lets 16 of the lease's 20 seconds pass (4 left, under the margin of 5);
    step ``b`` is the one the rule stops or lets run."""

    async def handler(payload: Any, job: Job[Any]) -> None:
        runs.append(job.attempts)

        async def long_part() -> str:
            calls.append("a")
            before = job.__dict__[LEASE_END]
            clock.move(16)
            if wait_for_beat:  # a heartbeat is due: wait (for it, not for a time) until it came
                async with asyncio.timeout(30):
                    while job.__dict__[LEASE_END] == before:
                        await asyncio.sleep(0.01)
            return "a"

        await job.step("a", long_part)
        await job.step("b", lambda: calls.append("b"))

    return handler


async def test_a_step_with_little_lease_left_suspends_and_runs_on_a_fresh_lease(
    jobs: Jobs, clock: Clock
) -> None:
    calls: list[str] = []
    runs: list[int] = []
    job_id = await jobs.enqueue("flows", {})
    # no heartbeat extends the lease meanwhile (as when beats fail or the loop is blocked)
    report = await jobs.drain(
        "flows",
        workflow(clock, calls, runs, wait_for_beat=False),
        lease=20,
        step_margin=5,
        heartbeat_every=3600,
    )
    # the run suspended before "b" (immediately eligible, not waiting for anything), and
    # the same drain claimed the job again at once: "a" replayed, "b" ran on the new lease
    assert (report.suspended, report.succeeded, report.failed) == (1, 1, 0)
    assert calls == ["a", "b"]
    assert len(runs) == 2
    record = await jobs.get("flows", job_id)
    assert record is not None
    assert (record.state, record.attempts) == ("succeeded", 1)
    assert [(s.number, s.name, s.state) for s in record.steps] == [
        (1, "a", "done"),
        (2, "b", "done"),
    ]


async def test_a_lease_suspension_does_not_end_a_budgeted_run(jobs: Jobs, clock: Clock) -> None:
    """Under a budget with plenty left, the lease rule suspends the job but the call goes
    on claiming (a spent budget would end it)."""
    calls: list[str] = []
    runs: list[int] = []
    await jobs.enqueue_many("flows", [{}, {}])
    report = await jobs.drain(
        "flows",
        workflow(clock, calls, runs, wait_for_beat=False),
        lease=20,
        step_margin=5,
        heartbeat_every=3600,
        budget=600,
    )
    assert (report.suspended, report.succeeded) == (2, 2)
    assert sorted(calls) == ["a", "a", "b", "b"]  # each step of each job ran once


async def test_a_heartbeat_that_extended_the_lease_lets_the_next_step_run(
    jobs: Jobs, clock: Clock
) -> None:
    """What the worker's own heartbeats do: each extends the lease from now, so the rule
    counts from the new end and a job whose beats arrive never suspends for its lease."""
    calls: list[str] = []
    runs: list[int] = []
    await jobs.enqueue("flows", {})
    report = await jobs.drain(
        "flows",
        workflow(clock, calls, runs, wait_for_beat=True),
        lease=20,
        step_margin=5,
        heartbeat_every=0.05,
    )
    assert (report.suspended, report.succeeded) == (0, 1)
    assert calls == ["a", "b"]
    assert len(runs) == 1


async def test_the_margin_is_clamped_to_half_the_lease(jobs: Jobs, clock: Clock) -> None:
    """A margin of 30 s on a 20 s lease is 10 s: with 4 s left the job suspends, with 12
    left it does not."""
    calls: list[str] = []

    async def handler(payload: Any, job: Job[Any]) -> None:
        await job.step("a", lambda: clock.move(8))  # 12 s left: over the clamped margin
        await job.step("b", lambda: clock.move(8))  # 4 s left now
        await job.step("c", lambda: calls.append("c"))

    await jobs.enqueue("flows", {})
    report = await jobs.drain("flows", handler, lease=20, step_margin=30, heartbeat_every=3600)
    assert (report.suspended, report.succeeded) == (1, 1)
    assert calls == ["c"]


async def test_under_work_a_job_low_on_lease_suspends_and_the_worker_resumes_it(
    jobs: Jobs, clock: Clock
) -> None:
    """The same under ``work`` (no budget at all): the worker keeps going and takes the job
    again at once, on a fresh lease; it stops when told to, after "b" ran."""
    calls: list[str] = []
    runs: list[int] = []
    stop = asyncio.Event()
    inner = workflow(clock, calls, runs, wait_for_beat=False)

    async def handler(payload: Any, job: Job[Any]) -> None:
        await inner(payload, job)
        stop.set()

    await jobs.enqueue("flows", {})
    report = await asyncio.wait_for(
        jobs.work(
            "flows",
            handler,
            lease=20,
            step_margin=5,
            heartbeat_every=3600,
            stop=stop,
            poll_interval=0.05,
        ),
        timeout=60,
    )
    assert (report.suspended, report.succeeded) == (1, 1)
    assert calls == ["a", "b"]
    assert len(runs) == 2
