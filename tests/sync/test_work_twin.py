"""``sync.Jobs.work``: the endless loop of the sync twin (threads), on both storages. It runs
until its ``stop`` event is set, polls when idle, opens every lane at once, runs durable
steps (a job sleeps and is resumed by the same running loop; another connection's emit
wakes a waiting job), and rides out a database that is away for ``max_outage`` seconds."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from drainpipe import DrainpipeError, WorkReport, sync
from tests.sync.test_steps_twin import QUEUES, move_time, record_of

UNREACHABLE = "postgresql://postgres@127.0.0.1:1/none"  # nothing listens on port 1


@pytest.fixture
def jobs(jobs_db_url: str) -> Iterator[sync.Jobs]:
    with sync.Jobs(jobs_db_url, QUEUES) as client:
        yield client


class Running:
    """``work`` in a thread of its own, stopped (and joined) on exit."""

    def __init__(self, jobs: sync.Jobs, handler: Any, **options: Any) -> None:
        self.stop = threading.Event()
        self.report: WorkReport | None = None
        self.error: BaseException | None = None

        def run() -> None:
            try:
                self.report = jobs.work(
                    "flows", handler, stop=self.stop, poll_interval=0.02, **options
                )
            except BaseException as exc:  # handed to the test's thread
                self.error = exc

        self.thread = threading.Thread(target=run)

    def __enter__(self) -> Running:
        self.thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop.set()
        self.thread.join(30)
        assert not self.thread.is_alive(), "work did not stop"
        if self.error is not None:
            raise self.error


def wait_until(condition: Any, what: str, limit: float = 20.0) -> None:
    end = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_work_runs_jobs_until_stopped_and_picks_up_later_ones(jobs: sync.Jobs) -> None:
    seen: list[int] = []
    for n in range(3):
        jobs.enqueue("flows", {"n": n})
    with Running(jobs, lambda payload, job: seen.append(payload["n"])) as running:
        wait_until(lambda: len(seen) == 3, "the first jobs")
        time.sleep(0.1)  # idle: the loop polls, it does not return
        assert running.thread.is_alive()
        jobs.enqueue("flows", {"n": 3})
        wait_until(lambda: len(seen) == 4, "a job enqueued while idle")
    assert running.report is not None
    assert (running.report.succeeded, running.report.failed) == (4, 0)
    assert sorted(seen) == [0, 1, 2, 3]


def test_work_opens_every_lane_at_once(jobs: sync.Jobs) -> None:
    """On an empty queue the lanes are there already (a drain opens them only after a full
    claim); two jobs that each wait for the other then run side by side."""

    def lanes() -> int:
        return sum(t.name.startswith("drainpipe-flows-") for t in threading.enumerate())

    together = threading.Barrier(2, timeout=10)
    with Running(jobs, lambda payload, job: together.wait(), concurrency=3) as running:
        wait_until(lambda: lanes() == 2, "the other two lanes")
        jobs.enqueue("flows", {})
        jobs.enqueue("flows", {})
        wait_until(lambda: record_states(jobs) == {"succeeded"}, "both jobs")
    assert running.report is not None
    assert (running.report.succeeded, running.report.failed) == (2, 0)
    assert lanes() == 0  # every lane ended with the call


def record_states(jobs: sync.Jobs) -> set[str]:
    return {item.state for item in jobs.list_jobs("flows").items}


def test_a_sleeping_job_is_resumed_and_a_waiting_one_woken_by_a_running_work(
    jobs: sync.Jobs, jobs_db_url: str, backend_name: str
) -> None:
    calls: list[str] = []

    def handler(payload: Any, job: sync.Job[Any]) -> str:
        if payload["kind"] == "sleep":
            job.step("before", lambda: calls.append("before"))
            job.sleep(3600)
            job.step("after", lambda: calls.append("after"))
        else:
            calls.append(f"got {job.wait_for('paid', key='order-1')}")
        return "done"

    sleeper = jobs.enqueue("flows", {"kind": "sleep"})
    waiter = jobs.enqueue("flows", {"kind": "wait"})
    with Running(jobs, handler) as running:
        wait_until(
            lambda: (
                record_of(jobs, sleeper).state == "waiting"
                and record_of(jobs, waiter).state == "waiting"
            ),
            "both suspended",
        )
        move_time(jobs_db_url, backend_name, "flows", sleeper, 3600)
        with sync.Jobs(jobs_db_url, QUEUES) as other:  # another process emits
            other.emit("paid", "order-1", {"amount": 5})
        wait_until(lambda: record_states(jobs) == {"succeeded"}, "both finished")
    assert running.report is not None
    assert (running.report.succeeded, running.report.suspended) == (2, 2)
    assert sorted(calls) == ["after", "before", "got {'amount': 5}"]
    assert jobs.result("flows", sleeper) == "done"


def test_work_checks_its_options(jobs: sync.Jobs) -> None:
    with pytest.raises(TypeError):
        jobs.work("flows", lambda payload, job: None, stop=object())
    with pytest.raises(DrainpipeError) as negative:
        jobs.work("flows", lambda payload, job: None, max_outage=-1)
    assert negative.value.kind == "validation"
    with pytest.raises(DrainpipeError) as unknown:
        jobs.work("nope", lambda payload, job: None)
    assert unknown.value.kind == "invalid_request"


def test_work_rides_out_an_outage_for_max_outage_then_raises() -> None:
    reported: list[BaseException] = []
    with sync.Jobs(UNREACHABLE, QUEUES) as jobs:
        started = time.monotonic()
        with pytest.raises(DrainpipeError) as caught:
            jobs.work(
                "flows",
                lambda payload, job: None,
                poll_interval=0.05,
                max_outage=0.4,
                on_error=lambda error, job: reported.append(error),
            )
        elapsed = time.monotonic() - started
    assert caught.value.kind == "network"
    assert 0.4 <= elapsed < 5.0
    assert len(reported) >= 2  # each retry reported
    assert all(isinstance(error, DrainpipeError) for error in reported)


def test_work_without_max_outage_keeps_the_three_retries() -> None:
    reported: list[BaseException] = []
    with sync.Jobs(UNREACHABLE, QUEUES) as jobs, pytest.raises(DrainpipeError) as caught:
        jobs.work(
            "flows",
            lambda payload, job: None,
            poll_interval=0.01,
            max_outage=None,
            on_error=lambda error, job: reported.append(error),
        )
    assert caught.value.kind == "network"
    assert reported == []  # drain's retries are silent


class Interrupt(BaseException):
    """What a Ctrl-C is to the caller's thread: not an ``Exception``."""


def test_an_interrupted_caller_stops_every_lane(jobs: sync.Jobs) -> None:
    caller = threading.current_thread()
    for n in range(20):
        jobs.enqueue("flows", {"n": n})

    def handler(payload: Any, job: sync.Job[Any]) -> None:
        if threading.current_thread() is caller:
            raise Interrupt
        time.sleep(0.01)

    stop = threading.Event()
    guard = threading.Timer(15, stop.set)  # a hang fails the test instead of blocking it
    guard.start()
    try:
        with pytest.raises(Interrupt):
            jobs.work("flows", handler, concurrency=3, poll_interval=0.02, stop=stop)
    finally:
        guard.cancel()
    assert not stop.is_set()  # it returned on its own, before the guard
    assert not any(t.name.startswith("drainpipe-flows-") for t in threading.enumerate())
