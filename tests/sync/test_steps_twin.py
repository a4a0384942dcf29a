"""Durable steps in the sync twin's handlers (docs/reference.md section 13, "sync.Jobs
handlers get the same calls without await"), on both storages: the key scenarios of
tests/jobs/test_steps.py, with plain handlers under ``sync.Jobs.drain``.

Time is moved, not waited for (:func:`move_time`); races run on real connections in
threads: a second worker taking the job over mid-step, an operator cancelling while steps
are recorded, emits crossing suspensions."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from drainpipe import Discard, DrainpipeError, Suspend, sync
from drainpipe.models import JobRecord

QUEUES: dict[str, Any] = {"flows": dict[str, Any], "other": dict[str, Any]}


@pytest.fixture
def jobs(jobs_db_url: str) -> Iterator[sync.Jobs]:
    with sync.Jobs(jobs_db_url, QUEUES) as client:
        yield client


def move_time(url: str, storage: str, queue: str, job_id: int, seconds: float) -> None:
    """``seconds`` pass for one job: its wake time (or lease end) and its wait's deadline
    come that much closer."""
    shift = timedelta(seconds=seconds)
    with psycopg.connect(url, autocommit=True) as conn:
        if storage == "pgmq":
            conn.execute(
                f"UPDATE pgmq.q_{queue} SET vt = vt - %s WHERE msg_id = %s", (shift, job_id)
            )
        else:
            conn.execute(
                "UPDATE drainpipe.job_messages SET visible_at = visible_at - %s WHERE id = %s",
                (shift, job_id),
            )
        conn.execute(
            "UPDATE drainpipe.job_workflows SET wait_deadline = wait_deadline - %s"
            " WHERE queue = %s AND job_id = %s",
            (shift, queue, job_id),
        )


def record_of(jobs: sync.Jobs, job_id: int, queue: str = "flows") -> JobRecord:
    record = jobs.get(queue, job_id)
    assert record is not None
    return record


def test_a_step_runs_once_over_attempts_and_replays_its_value(
    jobs: sync.Jobs, jobs_db_url: str, backend_name: str
) -> None:
    calls: list[str] = []
    runs: list[int] = []

    def create_user(email: str) -> dict[str, Any]:
        calls.append(email)
        return {"id": 7, "email": email}

    def handler(payload: dict[str, Any], job: sync.Job[Any]) -> dict[str, Any]:
        runs.append(job.attempts)
        user = job.step("create-user", create_user, payload["email"])
        if len(runs) == 1:
            raise RuntimeError("the mail server is down")
        mail = job.step("welcome", lambda user_id: calls.append(f"mail {user_id}") or "sent", 7)
        return {"user": user["id"], "mail": mail}

    job_id = jobs.enqueue("flows", {"email": "a@example.com"})
    first = jobs.drain("flows", handler)
    assert (first.succeeded, first.failed, first.suspended) == (0, 1, 0)
    move_time(jobs_db_url, backend_name, "flows", job_id, 3600)  # past the retry backoff
    second = jobs.drain("flows", handler)
    assert (second.succeeded, second.failed) == (1, 0)
    assert calls == ["a@example.com", "mail 7"]  # create-user ran once over two attempts
    assert jobs.result("flows", job_id) == {"user": 7, "mail": "sent"}
    record = record_of(jobs, job_id)
    assert record.state == "succeeded"
    assert [(s.number, s.name, s.state) for s in record.steps] == [
        (1, "create-user", "done"),
        (2, "welcome", "done"),
    ]


def test_a_failed_step_is_recorded_with_its_code(
    jobs: sync.Jobs, jobs_db_url: str, backend_name: str
) -> None:
    tries: list[int] = []

    def flaky() -> int:
        tries.append(1)
        if len(tries) == 1:
            raise DrainpipeError("network", "upstream down", code="UPSTREAM_DOWN")
        return 42

    def handler(payload: Any, job: sync.Job[Any]) -> None:
        assert job.step("fetch", flaky) == 42

    job_id = jobs.enqueue("flows", {})
    jobs.drain("flows", handler)
    record = record_of(jobs, job_id)
    assert record.state == "retry_wait"
    assert [(s.name, s.state, s.code) for s in record.steps] == [
        ("fetch", "failed", "UPSTREAM_DOWN")
    ]
    move_time(jobs_db_url, backend_name, "flows", job_id, 3600)
    jobs.drain("flows", handler)
    assert [(s.name, s.state) for s in record_of(jobs, job_id).steps] == [("fetch", "done")]


def test_a_changed_step_name_ends_the_job_dead_step_mismatch(
    jobs: sync.Jobs, jobs_db_url: str, backend_name: str
) -> None:
    version = {"name": "create-user"}

    def handler(payload: Any, job: sync.Job[Any]) -> None:
        job.step(version["name"], lambda: 1)
        raise RuntimeError("fail after the step")

    job_id = jobs.enqueue("flows", {})
    jobs.drain("flows", handler)
    version["name"] = "make-user"  # a deploy changed the handler's shape
    move_time(jobs_db_url, backend_name, "flows", job_id, 3600)
    report = jobs.drain("flows", handler)
    assert report.failed == 1
    record = record_of(jobs, job_id)
    assert (record.state, record.last_code, record.attempts_left) == ("dead", "STEP_MISMATCH", 0)


def test_step_arguments_are_checked_as_in_the_async_twin(jobs: sync.Jobs) -> None:
    errors: list[BaseException] = []

    def handler(payload: Any, job: sync.Job[Any]) -> None:
        if payload["case"] == "name":
            job.step("", lambda: 1)
        elif payload["case"] == "async":

            async def coroutine() -> int:
                return 1

            job.step("async", coroutine)  # an async step in a sync handler: refused
        else:
            job.join([1])  # no spawn in this run: join needs queue=

    for case in ("name", "async", "join"):
        jobs.enqueue("flows", {"case": case})
    report = jobs.drain("flows", handler, on_error=lambda error, job: errors.append(error))
    assert report.failed == 3
    assert isinstance(errors[0], DrainpipeError) and errors[0].kind == "validation"
    assert isinstance(errors[1], TypeError) and "plain function" in str(errors[1])
    assert isinstance(errors[2], DrainpipeError) and errors[2].kind == "invalid_request"


def test_steps_need_a_drain(jobs: sync.Jobs) -> None:
    jobs.enqueue("flows", {})
    [job] = jobs.claim("flows")
    assert isinstance(job, sync.Job)
    with pytest.raises(DrainpipeError) as refused:
        job.step("x", lambda: 1)
    assert refused.value.code == "STEPS_UNAVAILABLE"


def test_sleep_suspends_without_an_attempt_and_a_later_drain_resumes(
    jobs: sync.Jobs, jobs_db_url: str, backend_name: str
) -> None:
    calls: list[str] = []

    def handler(payload: Any, job: sync.Job[Any]) -> str:
        job.step("before", lambda: calls.append("before"))
        try:
            job.sleep(timedelta(days=3))
        except Exception:  # a handler's broad except does not swallow the suspension
            calls.append("swallowed")
        job.step("after", lambda: calls.append("after"))
        return "done"

    job_id = jobs.enqueue("flows", {}, max_attempts=1)
    first = jobs.drain("flows", handler)
    assert (first.succeeded, first.failed, first.suspended) == (0, 0, 1)
    record = record_of(jobs, job_id)
    assert (record.state, record.waiting_for, record.attempts) == ("waiting", "time", 1)
    assert [s.name for s in record.steps] == ["before", "sleep"]
    assert jobs.drain("flows", handler).succeeded == 0  # not due yet
    move_time(jobs_db_url, backend_name, "flows", job_id, 3 * 86400)
    with sync.Jobs(jobs_db_url, QUEUES) as other:  # any worker resumes it
        second = other.drain("flows", handler)
    assert (second.succeeded, second.failed, second.suspended) == (1, 0, 0)
    assert calls == ["before", "after"]
    record = record_of(jobs, job_id)
    assert (record.state, record.attempts, record.max_attempts) == ("succeeded", 1, 1)
    assert jobs.result("flows", job_id) == "done"


def test_wait_for_takes_each_emitted_event_once_and_times_out(
    jobs: sync.Jobs, jobs_db_url: str, backend_name: str
) -> None:
    seen: list[Any] = []

    def handler(payload: Any, job: sync.Job[Any]) -> None:
        seen.append(job.wait_for("email.clicked", key=payload["user"], timeout=timedelta(days=2)))
        seen.append(job.wait_for("email.clicked", key=payload["user"], timeout=60))

    job_id = jobs.enqueue("flows", {"user": "u1"})
    assert jobs.drain("flows", handler).suspended == 1
    record = record_of(jobs, job_id)
    assert (record.state, record.waiting_for) == ("waiting", "event:email.clicked")
    with sync.Jobs(jobs_db_url, QUEUES) as other:  # another process emits
        other.emit("email.clicked", "u2", {"n": 0})  # another key: no wake
        assert jobs.drain("flows", handler).succeeded == 0
        other.emit("email.clicked", "u1", {"n": 1})
    report = jobs.drain("flows", handler)
    assert (report.succeeded, report.suspended) == (0, 1)  # the second wait waits
    move_time(jobs_db_url, backend_name, "flows", job_id, 61)  # its timeout passes
    assert jobs.drain("flows", handler).succeeded == 1
    assert seen == [{"n": 1}, {"n": 1}, None]  # replayed: the first wait's data again
    record = record_of(jobs, job_id)
    assert (record.attempts, record.state) == (1, "succeeded")
    assert [s.name for s in record.steps] == ["wait:email.clicked", "wait:email.clicked"]


def test_an_emit_racing_a_suspension_never_loses_the_wake(jobs_db_url: str) -> None:
    """The wait (looking for an event, then suspending) and the emit run at once, each on
    its own connection and thread, many times: every job ends up with its event."""
    rounds = 12
    with sync.Jobs(jobs_db_url, QUEUES) as worker, sync.Jobs(jobs_db_url, QUEUES) as emitter:
        seen: dict[int, Any] = {}

        def handler(payload: Any, job: sync.Job[Any]) -> None:
            seen[job.id] = job.wait_for("race", key=payload["key"])

        ids = [worker.enqueue("flows", {"key": f"k{i}"}) for i in range(rounds)]
        for i in range(rounds):

            def emit(i: int = i) -> None:
                time.sleep((i % 4) * 0.002)
                emitter.emit("race", f"k{i}", {"i": i})

            thread = threading.Thread(target=emit)
            thread.start()
            worker.drain("flows", handler)
            thread.join()
        for _ in range(3):  # whatever was woken (or took its event at once) finishes
            worker.drain("flows", handler)
        assert seen == {job_id: {"i": i} for i, job_id in enumerate(ids)}


def test_spawn_enqueues_children_once_and_join_waits_for_every_one(
    jobs: sync.Jobs, jobs_db_url: str, backend_name: str
) -> None:
    joined: list[Any] = []
    parents: list[int] = []

    def parent(payload: Any, job: sync.Job[Any]) -> None:
        parents.append(job.id)
        one = job.spawn("other", {"size": 64})
        more = job.spawn_many("other", [{"size": 256}, {"size": 512}])
        if len(parents) == 1:
            raise RuntimeError("crash after spawning")  # the retry must not spawn again
        joined.append(job.join([one, *more]))

    def child(payload: Any, job: sync.Job[Any]) -> dict[str, int]:
        if payload["size"] == 512:
            raise Discard("TOO_BIG")
        return {"thumb": payload["size"]}

    parent_id = jobs.enqueue("flows", {})
    jobs.drain("flows", parent)
    move_time(jobs_db_url, backend_name, "flows", parent_id, 3600)
    assert jobs.drain("flows", parent).suspended == 1  # the children are not done yet
    record = record_of(jobs, parent_id)
    assert (record.state, record.waiting_for) == ("waiting", "children")
    page = jobs.list_jobs("other")
    assert len(page.items) == 3  # spawned once over two runs
    assert {item.parent_id for item in page.items} == {parent_id}
    jobs.drain("other", child)
    move_time(jobs_db_url, backend_name, "flows", parent_id, 60)
    assert jobs.drain("flows", parent).succeeded == 1
    [outcomes] = joined
    ids = sorted(item.id for item in page.items)
    assert [(o.id, o.queue, o.state, o.last_code, o.result) for o in outcomes] == [
        (ids[0], "other", "succeeded", None, {"thumb": 64}),
        (ids[1], "other", "succeeded", None, {"thumb": 256}),
        (ids[2], "other", "dead", "TOO_BIG", None),
    ]
    record = record_of(jobs, parent_id)
    assert [s.name for s in record.steps] == ["spawn:other", "spawn:other", "join"]
    assert record.attempts == 2  # one failed run, one that suspended and resumed


def test_a_stale_holder_cannot_record_a_step(
    jobs: sync.Jobs, jobs_db_url: str, backend_name: str
) -> None:
    """While the step runs, its lease ends and a second worker, on its own connection,
    takes the job over: the first holder's record is refused (``LEASE_LOST``), and what the
    job keeps is the second holder's step."""
    errors: list[BaseException] = []
    ran: list[int] = []
    with sync.Jobs(jobs_db_url, QUEUES) as other:

        def slow_charge(job_id: int) -> dict[str, int]:
            ran.append(job_id)
            move_time(jobs_db_url, backend_name, "flows", job_id, 10)  # the lease runs out
            [taken] = other.claim("flows", lease=60)  # ...and another worker takes it
            takeover.append(taken)
            return {"by": 1}

        takeover: list[Any] = []

        def handler(payload: Any, job: sync.Job[Any]) -> None:
            job.step("charge", slow_charge, job.id)

        job_id = jobs.enqueue("flows", {})
        report = jobs.drain("flows", handler, lease=5, on_error=lambda e, j: errors.append(e))
        assert report.succeeded == 0
        assert [getattr(e, "code", None) for e in errors] == ["LEASE_LOST"]
        [taken] = takeover
        assert taken.attempts == 2
        assert record_of(jobs, job_id).steps == ()  # the stale record was not written
        backend: Any = other.backend
        assert backend.record_step(taken, 1, "charge", "done", {"by": 2}) == "recorded"
        assert backend.load_steps("flows", job_id) == {1: ("charge", "done", {"by": 2})}
    assert ran == [job_id]


def test_a_cancel_racing_a_running_workflow_stops_its_step_records(
    jobs: sync.Jobs, jobs_db_url: str
) -> None:
    """An operator cancels, on its own connection and thread, while the handler records
    steps: the job ends cancelled and no step is recorded after the cancel took the row."""
    recorded: list[int] = []
    errors: list[BaseException] = []
    started = threading.Event()

    def handler(payload: Any, job: sync.Job[Any]) -> None:
        for n in range(200):
            job.step(f"s{n}", lambda: None)
            recorded.append(n)
            started.set()
            time.sleep(0.002)

    job_id = jobs.enqueue("flows", {})
    with sync.Jobs(jobs_db_url, QUEUES) as operator:

        def cancel_soon() -> None:
            started.wait(10)
            time.sleep(0.03)
            assert operator.cancel("flows", job_id) is True

        thread = threading.Thread(target=cancel_soon)
        thread.start()
        jobs.drain("flows", handler, on_error=lambda error, job: errors.append(error))
        thread.join()
    record = record_of(jobs, job_id)
    assert record.state == "cancelled"
    assert 0 < len(recorded) < 200
    assert len(record.steps) == len(recorded)  # the refused record was the last attempt
    assert any(getattr(error, "code", None) in ("LEASE_LOST", "CANCELLED") for error in errors)


def test_a_step_with_the_budget_spent_suspends_with_immediate_eligibility(
    jobs: sync.Jobs,
) -> None:
    calls: list[int] = []

    def handler(payload: Any, job: sync.Job[Any]) -> None:
        for n in range(3):
            job.step(f"part-{n}", lambda n=n: calls.append(n))

    job_id = jobs.enqueue("flows", {})
    jobs.enqueue("flows", {})  # a second job: not claimed once the budget is spent
    report = jobs.drain("flows", handler, budget=1.0, step_margin=10)
    assert (report.succeeded, report.suspended, report.budget_exhausted) == (0, 1, True)
    record = record_of(jobs, job_id)
    assert (record.state, record.waiting_for, record.attempts) == ("queued", None, 1)
    assert calls == []
    report = jobs.drain("flows", handler)
    assert report.succeeded == 2
    assert calls == [0, 1, 2, 0, 1, 2]
    assert record_of(jobs, job_id).attempts == 1  # the budget's suspension cost no attempt


def test_step_margin_is_clamped_to_half_the_lease(jobs: sync.Jobs) -> None:
    """A margin past half the lease would suspend every step: with ``lease=4`` a margin of
    10 s acts as 2 s, so a 60 s budget runs the steps."""

    def handler(payload: Any, job: sync.Job[Any]) -> int:
        return int(job.step("one", lambda: 1))

    job_id = jobs.enqueue("flows", {})
    report = jobs.queue("flows").drain(handler, lease=4, budget=60, step_margin=10)
    assert (report.succeeded, report.suspended) == (1, 0)
    assert jobs.result("flows", job_id) == 1
    with pytest.raises(DrainpipeError) as refused:
        jobs.drain("flows", handler, step_margin=-1)
    assert refused.value.kind == "validation"


def test_the_twins_resume_each_others_workflows(jobs_db_url: str, backend_name: str) -> None:
    """One workflow, started by the sync twin and finished by the async one: the steps,
    their names and their stored values are the same in both."""
    import asyncio

    import drainpipe

    calls: list[str] = []

    def sync_flow(payload: Any, job: sync.Job[Any]) -> None:
        job.step("create", lambda: calls.append("create") or {"id": 1})
        job.sleep(60)

    async def async_flow(payload: Any, job: drainpipe.Job[Any]) -> Any:
        user = await job.step("create", lambda: calls.append("again") or {"id": 2})
        await job.sleep(60)
        return user

    with sync.Jobs(jobs_db_url, QUEUES) as jobs:
        job_id = jobs.enqueue("flows", {})
        assert jobs.drain("flows", sync_flow).suspended == 1
        move_time(jobs_db_url, backend_name, "flows", job_id, 60)

        async def finish() -> None:
            async with drainpipe.Jobs(jobs_db_url, QUEUES) as twin:
                assert (await twin.drain("flows", async_flow)).succeeded == 1

        asyncio.run(finish())
        assert calls == ["create"]
        assert jobs.result("flows", job_id) == {"id": 1}


def test_suspend_is_not_an_exception() -> None:
    assert issubclass(Suspend, BaseException) and not issubclass(Suspend, Exception)
