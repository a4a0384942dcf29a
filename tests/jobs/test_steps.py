"""Durable steps (docs/reference.md section 13) on both storages: steps run once and replay
from storage, sleeps and event waits suspend without counting an attempt, every write is
fenced by the attempt, and an emit racing a suspension never loses a wake.

Time is moved, not waited for: :func:`move_time` shifts one job's stored wake time (and
its wait's deadline) back, which is what the passing of that time does to it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import drainpipe
from drainpipe import DrainpipeError, Job, Jobs, Keyring, QueuePolicy, Suspend
from tests.conftest import connect

QUEUES: dict[str, Any] = {"flows": dict[str, Any], "other": dict[str, Any]}


@pytest.fixture
async def jobs(jobs_db_url: str) -> AsyncIterator[Jobs]:
    client = Jobs(jobs_db_url, QUEUES)
    yield client
    await client.close()


async def move_time(url: str, backend: str, queue: str, job_id: int, seconds: float) -> None:
    """``seconds`` pass for one job: its wake time and its wait's deadline come that much
    closer (the database clock itself cannot be moved)."""
    shift = timedelta(seconds=seconds)
    async with await connect(url) as conn:
        if backend == "pgmq":
            await conn.execute(
                f"UPDATE pgmq.q_{queue} SET vt = vt - %s WHERE msg_id = %s", (shift, job_id)
            )
        else:
            await conn.execute(
                "UPDATE drainpipe.job_messages SET visible_at = visible_at - %s WHERE id = %s",
                (shift, job_id),
            )
        await conn.execute(
            "UPDATE drainpipe.job_workflows SET wait_deadline = wait_deadline - %s"
            " WHERE queue = %s AND job_id = %s",
            (shift, queue, job_id),
        )


async def state_of(jobs: Jobs, job_id: int, queue: str = "flows") -> Any:
    record = await jobs.get(queue, job_id)
    assert record is not None
    return record


# -- slice 1: steps ----------------------------------------------------------------------


async def test_a_step_runs_once_over_attempts_and_replays_its_value(jobs: Jobs) -> None:
    calls: list[str] = []
    runs: list[int] = []

    async def create_user(email: str) -> dict[str, Any]:
        calls.append(email)
        return {"id": 7, "email": email}

    def welcome(user_id: int) -> str:  # plain functions are steps too
        calls.append(f"mail {user_id}")
        return "sent"

    async def handler(payload: dict[str, Any], job: Job[Any]) -> dict[str, Any]:
        runs.append(job.attempts)
        user = await job.step("create-user", create_user, payload["email"])
        if len(runs) == 1:
            raise RuntimeError("the mail server is down")
        mail = await job.step("welcome", welcome, user["id"])
        return {"user": user["id"], "mail": mail}

    job_id = await jobs.enqueue("flows", {"email": "a@example.com"})
    first = await jobs.drain("flows", handler)
    assert (first.succeeded, first.failed) == (0, 1)
    await jobs.retry_dead("flows")  # not dead: nothing to do
    await _make_eligible(jobs, job_id)
    second = await jobs.drain("flows", handler)
    assert (second.succeeded, second.failed) == (1, 0)
    assert calls == ["a@example.com", "mail 7"]  # create-user ran once over two attempts
    assert await jobs.result("flows", job_id) == {"user": 7, "mail": "sent"}
    record = await state_of(jobs, job_id)
    assert record.state == "succeeded"
    assert [(s.number, s.name, s.state) for s in record.steps] == [
        (1, "create-user", "done"),
        (2, "welcome", "done"),
    ]
    assert "a@example.com" not in repr(record)  # metadata only


async def _make_eligible(jobs: Jobs, job_id: int, queue: str = "flows") -> None:
    """End a retry backoff now (the same as moving time past it)."""
    url = _url(jobs)
    async with await connect(url) as conn:
        await conn.execute(
            "DO $$ BEGIN"
            f" IF to_regclass('pgmq.q_{queue}') IS NOT NULL THEN"
            f"   UPDATE pgmq.q_{queue} SET vt = clock_timestamp() WHERE msg_id = {int(job_id)};"
            " ELSE UPDATE drainpipe.job_messages SET visible_at = clock_timestamp()"
            f"   WHERE id = {int(job_id)} AND finished_at IS NULL; END IF; END $$"
        )


def _url(jobs: Jobs) -> str:
    dsn = jobs.backend.db.dsn  # type: ignore[attr-defined]
    assert isinstance(dsn, str)
    return dsn


async def test_a_failed_step_is_recorded_and_a_later_run_finishes_it(jobs: Jobs) -> None:
    tries: list[int] = []

    async def flaky() -> int:
        tries.append(1)
        if len(tries) == 1:
            raise DrainpipeError("network", "upstream down", code="UPSTREAM_DOWN")
        return 42

    async def handler(payload: Any, job: Job[Any]) -> None:
        assert await job.step("fetch", flaky) == 42

    job_id = await jobs.enqueue("flows", {})
    await jobs.drain("flows", handler)
    record = await state_of(jobs, job_id)
    assert record.state == "retry_wait"
    assert [(s.name, s.state, s.code) for s in record.steps] == [
        ("fetch", "failed", "UPSTREAM_DOWN")
    ]
    await _make_eligible(jobs, job_id)
    await jobs.drain("flows", handler)
    record = await state_of(jobs, job_id)
    assert record.state == "succeeded"
    assert [(s.name, s.state, s.code) for s in record.steps] == [("fetch", "done", None)]


async def test_a_changed_step_name_ends_the_job_dead_step_mismatch(jobs: Jobs) -> None:
    version = {"name": "create-user"}

    async def handler(payload: Any, job: Job[Any]) -> None:
        await job.step(version["name"], lambda: 1)
        raise RuntimeError("fail after the step")

    job_id = await jobs.enqueue("flows", {})
    await jobs.drain("flows", handler)
    version["name"] = "make-user"  # a deploy changed the handler's shape
    await _make_eligible(jobs, job_id)
    report = await jobs.drain("flows", handler)
    assert report.failed == 1
    record = await state_of(jobs, job_id)
    assert (record.state, record.last_code) == ("dead", "STEP_MISMATCH")
    assert record.attempts_left == 0


async def test_a_step_result_over_max_payload_bytes_fails_the_attempt(jobs_db_url: str) -> None:
    policies = {"flows": QueuePolicy(max_payload_bytes=64)}
    async with Jobs(jobs_db_url, QUEUES, policies=policies) as jobs:

        async def handler(payload: Any, job: Job[Any]) -> None:
            await job.step("big", lambda: "x" * 100)

        job_id = await jobs.enqueue("flows", {})
        report = await jobs.drain("flows", handler)
        assert report.failed == 1
        record = await state_of(jobs, job_id)
        assert (record.state, record.history[0].code) == ("retry_wait", "PAYLOAD_TOO_LARGE")
        assert record.steps == ()


async def test_step_results_are_sealed_on_an_encrypted_queue(jobs_db_url: str) -> None:
    keyring = Keyring.parse(Keyring.new_entry("k1"))
    policies = {"flows": QueuePolicy(encrypt=True)}
    async with Jobs(jobs_db_url, QUEUES, policies=policies, keyring=keyring) as jobs:
        seen: list[Any] = []

        async def handler(payload: Any, job: Job[Any]) -> str:
            secret = await job.step("secret", lambda: {"card": "SECRET-4242"})
            seen.append(secret)
            if len(seen) == 1:
                raise RuntimeError("again")
            return "RESULT-MARKER"

        job_id = await jobs.enqueue("flows", {"a": 1})
        await jobs.drain("flows", handler)
        await _make_eligible(jobs, job_id)
        await jobs.drain("flows", handler)
        assert seen == [{"card": "SECRET-4242"}, {"card": "SECRET-4242"}]  # opened on replay
        assert await jobs.result("flows", job_id) == "RESULT-MARKER"
        async with await connect(jobs_db_url) as conn:
            rows = await (
                await conn.execute("SELECT result::text FROM drainpipe.job_steps")
            ).fetchall()
        stored = " ".join(str(row[0]) for row in rows)
        assert "SECRET-4242" not in stored and "RESULT-MARKER" not in stored


async def test_a_stale_holder_never_records_a_step(jobs: Jobs, jobs_db_url: str) -> None:
    await jobs.enqueue("flows", {})
    [stale] = await jobs.claim("flows", lease=1)
    await move_time(jobs_db_url, _backend_of(jobs_db_url), "flows", stale.id, 2)  # lease ran out
    async with Jobs(jobs_db_url, QUEUES) as other:  # another worker takes it over
        [taken] = await other.claim("flows", lease=60)
        assert taken.attempts == stale.attempts + 1
        backend: Any = jobs.backend
        assert await backend.record_step(stale, 1, "charge", "done", {"ok": 1}) == "lost"
        assert await backend.record_step(taken, 1, "charge", "done", {"ok": 2}) == "recorded"
        assert await backend.suspend(stale, 10, "time") == "lost"
        assert await backend.load_steps("flows", stale.id) == {1: ("charge", "done", {"ok": 2})}


def _backend_of(url: str) -> str:
    return "pgmq" if _has_pgmq(url) else "table"


def _has_pgmq(url: str) -> bool:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT options ->> 'backend' FROM drainpipe.modules WHERE name = 'jobs'"
        ).fetchone()
    return bool(row and row[0] == "pgmq")


async def test_steps_need_a_runner(jobs: Jobs) -> None:
    await jobs.enqueue("flows", {})
    [job] = await jobs.claim("flows")
    with pytest.raises(DrainpipeError) as refused:
        await job.step("x", lambda: 1)
    assert refused.value.code == "STEPS_UNAVAILABLE"


# -- slice 2: sleep ------------------------------------------------------------------------


async def test_sleep_suspends_without_an_attempt_and_any_drain_resumes(
    jobs: Jobs, jobs_db_url: str, backend_name: str
) -> None:
    calls: list[str] = []
    seen_attempts: list[int] = []

    async def handler(payload: Any, job: Job[Any]) -> str:
        seen_attempts.append(job.attempts)
        await job.step("before", lambda: calls.append("before"))
        try:
            await job.sleep(timedelta(days=3))
        except Exception:  # a handler's broad except does not swallow the suspension
            calls.append("swallowed")
        await job.step("after", lambda: calls.append("after"))
        return "done"

    job_id = await jobs.enqueue("flows", {}, max_attempts=1)
    first = await jobs.drain("flows", handler)
    assert (first.succeeded, first.failed, first.suspended) == (0, 0, 1)
    record = await state_of(jobs, job_id)
    assert (record.state, record.waiting_for) == ("waiting", "time")
    assert (record.attempts, record.max_attempts, record.attempts_left) == (1, 1, 0)
    assert [s.name for s in record.steps] == ["before", "sleep"]
    stats = (await jobs.stats(["flows"]))["flows"]
    assert stats.ready == 0

    assert (await jobs.drain("flows", handler)).succeeded == 0  # not due yet
    await move_time(jobs_db_url, backend_name, "flows", job_id, 3 * 86400)
    async with Jobs(jobs_db_url, QUEUES) as other:  # any worker resumes it
        second = await other.drain("flows", handler)
    assert (second.succeeded, second.failed, second.suspended) == (1, 0, 0)
    assert calls == ["before", "after"]
    record = await state_of(jobs, job_id)
    # a job with max_attempts=1 slept and resumed: the resumption counted no attempt
    assert (record.state, record.attempts, record.max_attempts) == ("succeeded", 1, 1)
    assert await jobs.result("flows", job_id) == "done"


async def test_a_resumed_run_that_fails_on_its_last_attempt_ends_dead(
    jobs: Jobs, jobs_db_url: str, backend_name: str
) -> None:
    async def handler(payload: Any, job: Job[Any]) -> None:
        await job.sleep(60)
        raise RuntimeError("after the sleep")

    job_id = await jobs.enqueue("flows", {}, max_attempts=1)
    await jobs.drain("flows", handler)
    await move_time(jobs_db_url, backend_name, "flows", job_id, 60)
    report = await jobs.drain("flows", handler)
    assert report.failed == 1
    record = await state_of(jobs, job_id)
    assert (record.state, record.last_code, record.attempts) == ("dead", "MAX_ATTEMPTS", 1)


async def test_sleep_past_max_delay_fails_the_attempt(jobs_db_url: str) -> None:
    policies = {"flows": QueuePolicy(max_delay=3600)}
    async with Jobs(jobs_db_url, QUEUES, policies=policies) as jobs:

        async def handler(payload: Any, job: Job[Any]) -> None:
            await job.sleep(timedelta(hours=2))

        job_id = await jobs.enqueue("flows", {})
        report = await jobs.drain("flows", handler)
        assert (report.failed, report.suspended) == (1, 0)
        record = await state_of(jobs, job_id)
        assert record.history[0].code == "SCHEDULE_TOO_FAR"


async def test_sleep_until_an_instant_and_a_naive_one_is_refused(jobs: Jobs) -> None:
    errors: list[BaseException] = []

    async def handler(payload: Any, job: Job[Any]) -> None:
        if payload["naive"]:
            await job.sleep(datetime(2030, 1, 1))  # naive: the mistake under test
        await job.sleep(datetime.now(UTC) + timedelta(hours=1))

    await jobs.enqueue("flows", {"naive": True})
    await jobs.drain("flows", handler, on_error=lambda error, job: errors.append(error))
    assert isinstance(errors[0], DrainpipeError) and errors[0].kind == "validation"
    job_id = await jobs.enqueue("flows", {"naive": False})
    report = await jobs.drain("flows", handler)
    assert report.suspended == 1
    assert (await state_of(jobs, job_id)).state == "waiting"


async def test_a_cancelled_waiting_job_never_resumes(
    jobs: Jobs, jobs_db_url: str, backend_name: str
) -> None:
    async def handler(payload: Any, job: Job[Any]) -> None:
        await job.sleep(60)

    job_id = await jobs.enqueue("flows", {})
    await jobs.drain("flows", handler)
    assert await jobs.cancel("flows", job_id) is True
    await move_time(jobs_db_url, backend_name, "flows", job_id, 60)
    assert (await jobs.drain("flows", handler)).succeeded == 0
    assert (await state_of(jobs, job_id)).state == "cancelled"


# -- slice 3: events ------------------------------------------------------------------------


def _waiter(seen: list[Any]) -> Any:
    async def handler(payload: Any, job: Job[Any]) -> None:
        first = await job.wait_for("email.clicked", key=payload["user"], timeout=timedelta(days=2))
        seen.append(first)
        second = await job.wait_for("email.clicked", key=payload["user"], timeout=60)
        seen.append(second)

    return handler


async def test_wait_for_suspends_until_an_emit_and_takes_each_event_once(
    jobs: Jobs, jobs_db_url: str
) -> None:
    seen: list[Any] = []
    job_id = await jobs.enqueue("flows", {"user": "u1"})
    report = await jobs.drain("flows", _waiter(seen))
    assert report.suspended == 1
    record = await state_of(jobs, job_id)
    assert (record.state, record.waiting_for) == ("waiting", "event:email.clicked")
    async with Jobs(jobs_db_url, QUEUES) as other:  # another process emits
        await other.emit("email.clicked", "u2", {"n": 0})  # another key: no wake
        assert (await jobs.drain("flows", _waiter(seen))).succeeded == 0
        await other.emit("email.clicked", "u1", {"n": 1})
        await other.emit("email.clicked", "u1", {"n": 2})
    report = await jobs.drain("flows", _waiter(seen))
    assert (report.succeeded, report.suspended) == (1, 0)
    assert seen == [{"n": 1}, {"n": 2}]  # the oldest first; the second wait the next one
    record = await state_of(jobs, job_id)
    assert (record.attempts, record.state) == (1, "succeeded")
    assert [s.name for s in record.steps] == ["wait:email.clicked", "wait:email.clicked"]
    assert "{'n'" not in repr(record)  # metadata only: never event data


async def test_an_event_emitted_after_enqueue_and_before_the_wait_counts(jobs: Jobs) -> None:
    seen: list[Any] = []
    await jobs.emit("email.clicked", "u1", {"n": "before-enqueue"})
    await asyncio.sleep(0.01)
    job_id = await jobs.enqueue("flows", {"user": "u1"})
    await jobs.emit("email.clicked", "u1", {"n": "early"})
    report = await jobs.drain("flows", _waiter(seen))
    assert report.suspended == 1  # the first wait took the early one, the second waits
    assert seen == [{"n": "early"}]
    await jobs.emit("email.clicked", "u1", None)
    await jobs.drain("flows", _waiter(seen))
    assert seen == [{"n": "early"}, {"n": "early"}, None]
    assert (await state_of(jobs, job_id)).state == "succeeded"


async def test_an_event_reaches_every_waiting_job(jobs: Jobs) -> None:
    seen: list[Any] = []

    async def handler(payload: Any, job: Job[Any]) -> None:
        seen.append(await job.wait_for("paid", key="order-1"))

    ids = [await jobs.enqueue("flows", {}) for _ in range(3)]
    assert (await jobs.drain("flows", handler)).suspended == 3
    await jobs.emit("paid", "order-1", {"amount": 5})
    assert (await jobs.drain("flows", handler)).succeeded == 3
    assert seen == [{"amount": 5}] * 3
    assert {(await state_of(jobs, i)).state for i in ids} == {"succeeded"}


async def test_wait_for_returns_none_after_its_timeout(
    jobs: Jobs, jobs_db_url: str, backend_name: str
) -> None:
    seen: list[Any] = []

    async def handler(payload: Any, job: Job[Any]) -> None:
        seen.append(await job.wait_for("never", key="k", timeout=timedelta(days=2)))

    job_id = await jobs.enqueue("flows", {})
    await jobs.drain("flows", handler)
    await move_time(jobs_db_url, backend_name, "flows", job_id, 86400)
    assert (await jobs.drain("flows", handler)).succeeded == 0  # half way: still waiting
    await move_time(jobs_db_url, backend_name, "flows", job_id, 86400)
    assert (await jobs.drain("flows", handler)).succeeded == 1
    assert seen == [None]


async def test_emit_validates_its_input(jobs: Jobs) -> None:
    with pytest.raises(DrainpipeError) as empty:
        await jobs.emit("", "k")
    assert empty.value.kind == "validation"
    with pytest.raises(DrainpipeError) as long_key:
        await jobs.emit("e", "k" * 201)
    assert long_key.value.kind == "validation"
    with pytest.raises(DrainpipeError) as unknown:
        await jobs.result("nope", 1)
    assert unknown.value.kind == "invalid_request"


async def test_an_emit_racing_a_suspension_never_loses_the_wake(jobs_db_url: str) -> None:
    """The wait (looking for an event, then suspending) and the emit run at once on their
    own connections, many times: every job ends up with its event."""
    rounds = 12
    async with Jobs(jobs_db_url, QUEUES) as worker, Jobs(jobs_db_url, QUEUES) as emitter:
        seen: dict[int, Any] = {}

        async def handler(payload: Any, job: Job[Any]) -> None:
            seen[job.id] = await job.wait_for("race", key=payload["key"])

        ids = [await worker.enqueue("flows", {"key": f"k{i}"}) for i in range(rounds)]
        for i in range(rounds):
            delay = (i % 4) * 0.002

            async def emit(i: int = i, delay: float = delay) -> None:
                await asyncio.sleep(delay)
                await emitter.emit("race", f"k{i}", {"i": i})

            await asyncio.gather(worker.drain("flows", handler), emit())
        for _ in range(3):  # whatever was woken (or took its event at once) finishes
            await worker.drain("flows", handler)
        assert seen == {job_id: {"i": i} for i, job_id in enumerate(ids)}


async def test_suspend_raises_a_base_exception() -> None:
    assert issubclass(Suspend, BaseException) and not issubclass(Suspend, Exception)


# -- slice 5: the budget ----------------------------------------------------------------------


async def test_a_step_with_the_budget_spent_suspends_with_immediate_eligibility(jobs: Jobs) -> None:
    calls: list[int] = []

    async def handler(payload: Any, job: Job[Any]) -> None:
        for n in range(3):
            await job.step(f"part-{n}", lambda n=n: calls.append(n))

    job_id = await jobs.enqueue("flows", {})
    report = await jobs.drain("flows", handler, budget=1.0, step_margin=10)
    assert (report.succeeded, report.suspended) == (0, 1)
    record = await state_of(jobs, job_id)
    assert (record.state, record.waiting_for, record.attempts) == ("queued", None, 1)
    report = await jobs.drain("flows", handler)
    assert report.succeeded == 1
    assert calls == [0, 1, 2]


# -- slice 4: children -------------------------------------------------------------------------


async def test_spawn_enqueues_children_once_and_join_waits_for_every_one(
    jobs: Jobs, jobs_db_url: str, backend_name: str
) -> None:
    joined: list[Any] = []
    parents: list[int] = []

    async def parent(payload: Any, job: Job[Any]) -> None:
        parents.append(job.id)
        one = await job.spawn("other", {"size": 64})
        more = await job.spawn_many("other", [{"size": 256}, {"size": 512}])
        if len(parents) == 1:
            raise RuntimeError("crash after spawning")  # the retry must not spawn again
        joined.append(await job.join([one, *more]))

    async def child(payload: Any, job: Job[Any]) -> dict[str, int]:
        if payload["size"] == 512:
            raise drainpipe.Discard("TOO_BIG")
        return {"thumb": payload["size"]}

    parent_id = await jobs.enqueue("flows", {})
    await jobs.drain("flows", parent)
    await move_time(jobs_db_url, backend_name, "flows", parent_id, 3600)
    report = await jobs.drain("flows", parent)
    assert report.suspended == 1  # the children are not done yet
    record = await state_of(jobs, parent_id)
    assert (record.state, record.waiting_for) == ("waiting", "children")
    page = await jobs.list_jobs("other")
    assert len(page.items) == 3  # spawned once over two runs
    assert {item.parent_id for item in page.items} == {parent_id}
    await jobs.drain("other", child)
    await move_time(jobs_db_url, backend_name, "flows", parent_id, 60)
    report = await jobs.drain("flows", parent)
    assert report.succeeded == 1
    [outcomes] = joined
    ids = sorted(item.id for item in page.items)
    assert [(o.id, o.queue, o.state, o.last_code, o.result) for o in outcomes] == [
        (ids[0], "other", "succeeded", None, {"thumb": 64}),
        (ids[1], "other", "succeeded", None, {"thumb": 256}),
        (ids[2], "other", "dead", "TOO_BIG", None),
    ]
    record = await state_of(jobs, parent_id)
    assert [s.name for s in record.steps] == ["spawn:other", "spawn:other", "join"]
    assert record.attempts == 2  # one failed run, one that suspended and resumed


async def test_cancel_with_children_cancels_the_live_children(jobs: Jobs) -> None:
    async def parent(payload: Any, job: Job[Any]) -> None:
        kids = await job.spawn_many("other", [{"n": 1}, {"n": 2}])
        await job.join(kids)

    parent_id = await jobs.enqueue("flows", {})
    await jobs.drain("flows", parent)
    page = await jobs.list_jobs("other")
    done = page.items[0].id
    await jobs.drain("other", _one_of(done))
    assert await jobs.cancel("flows", parent_id, children=True) is True
    assert (await state_of(jobs, parent_id)).state == "cancelled"
    states = {item.id: item.state for item in (await jobs.list_jobs("other")).items}
    assert states[done] == "succeeded"
    assert [state for key, state in states.items() if key != done] == ["cancelled"]


def _one_of(wanted: int) -> Any:
    async def handler(payload: Any, job: Job[Any]) -> None:
        if job.id != wanted:
            raise drainpipe.Retry(after=3600)

    return handler


async def _wakes_in(url: str, backend: str, queue: str, job_id: int) -> float:
    """Seconds from now (the database's clock) until a waiting job is eligible again."""
    sql = (
        f"SELECT extract(epoch FROM vt - clock_timestamp()) FROM pgmq.q_{queue} WHERE msg_id = %s"
        if backend == "pgmq"
        else "SELECT extract(epoch FROM visible_at - clock_timestamp())"
        " FROM drainpipe.job_messages WHERE id = %s"
    )
    async with await connect(url) as conn:
        row = await (await conn.execute(sql, (job_id,))).fetchone()
    assert row is not None
    return float(row[0])


async def test_a_join_rechecks_soon_however_often_the_job_was_suspended_before(
    jobs: Jobs, jobs_db_url: str, backend_name: str
) -> None:
    """The recheck delay grows with the time this join has waited (half of it, 2-60 s),
    not with the job's earlier sleeps: six sleeps first used to mean a 60 s first recheck."""

    async def parent(payload: Any, job: Job[Any]) -> None:
        for _ in range(6):
            await job.sleep(1)
        await job.join(await job.spawn_many("other", [{}]))

    parent_id = await jobs.enqueue("flows", {})
    for _ in range(6):
        await jobs.drain("flows", parent)
        await move_time(jobs_db_url, backend_name, "flows", parent_id, 5)
    assert (await jobs.drain("flows", parent)).suspended == 1
    record = await state_of(jobs, parent_id)
    assert (record.state, record.waiting_for) == ("waiting", "children")
    assert 0.5 <= await _wakes_in(jobs_db_url, backend_name, "flows", parent_id) <= 2.5  # not 60
    # the same join, having waited 40 s: half of that
    async with await connect(jobs_db_url) as conn:
        await conn.execute(
            "UPDATE drainpipe.job_workflows SET waiting_since = waiting_since - interval '40 s'"
            " WHERE queue = 'flows' AND job_id = %s",
            (parent_id,),
        )
    await move_time(jobs_db_url, backend_name, "flows", parent_id, 10)
    assert (await jobs.drain("flows", parent)).suspended == 1
    assert 18 <= await _wakes_in(jobs_db_url, backend_name, "flows", parent_id) <= 20.5


async def test_join_without_a_queue_needs_one_spawned_queue(jobs: Jobs) -> None:
    errors: list[BaseException] = []

    async def handler(payload: Any, job: Job[Any]) -> None:
        await job.join([1, 2])

    await jobs.enqueue("flows", {})
    await jobs.drain("flows", handler, on_error=lambda error, job: errors.append(error))
    assert isinstance(errors[0], DrainpipeError) and errors[0].kind == "invalid_request"


async def test_a_long_workflow_finishes_over_short_drain_route_calls(jobs: Jobs) -> None:
    """The drain route's budget rule: each call runs steps until less than step_margin is
    left, suspends the job eligible at once and answers more=true; each step runs once."""
    import httpx

    secret = "s" * 40
    ran: list[int] = []
    runs: list[int] = []

    async def part(n: int) -> int:
        await asyncio.sleep(0.15)  # a step that takes a while (kept short: real time)
        ran.append(n)
        return n

    async def workflow(payload: Any, job: Job[Any]) -> int:
        runs.append(len(ran))
        total = 0
        for n in range(8):
            total += await job.step(f"part-{n}", part, n)
        return total

    route = jobs.drain_route(
        secret=secret, handlers={"flows": workflow}, budget=0.8, step_margin=0.5, schedules=False
    )
    job_id = await jobs.enqueue("flows", {})
    answers: list[dict[str, Any]] = []
    transport = httpx.ASGITransport(app=route)
    async with httpx.AsyncClient(transport=transport, base_url="http://route") as client:
        for _ in range(20):
            response = await client.get("/", headers={"Authorization": f"Bearer {secret}"})
            assert response.status_code == 200, response.text
            answers.append(response.json())
            if not answers[-1]["more"]:
                break
    assert ran == list(range(8))  # each step once, in order, over several calls
    assert len(answers) > 2
    # a call claims the suspended job again only while a step can still start: no spinning
    # (claim, replay, suspend) through the last step_margin seconds of each call
    assert len(runs) <= len(answers) + 1, runs
    assert all(answer["more"] for answer in answers[:-1])
    assert answers[-1]["queues"]["flows"]["succeeded"] == 1
    assert await jobs.result("flows", job_id) == sum(range(8))
    record = await state_of(jobs, job_id)
    assert (record.state, record.attempts, len(record.steps)) == ("succeeded", 1, 8)


# -- the sync twin --------------------------------------------------------------------------------


async def test_the_sync_twin_emits_reads_and_cancels_children(jobs: Jobs, jobs_db_url: str) -> None:
    from drainpipe import sync

    seen: list[Any] = []

    async def handler(payload: Any, job: Job[Any]) -> str:
        seen.append(await job.wait_for("signed", key="doc-1"))
        return "filed"

    job_id = await jobs.enqueue("flows", {})
    await jobs.drain("flows", handler)
    with sync.Jobs(jobs_db_url, QUEUES) as twin:
        record = await asyncio.to_thread(twin.get, "flows", job_id)
        assert record is not None
        assert (record.state, record.waiting_for, record.attempts) == ("waiting", "event:signed", 1)
        assert await asyncio.to_thread(twin.emit, "signed", "doc-1", {"by": "ann"}) > 0
        await jobs.drain("flows", handler)
        assert seen == [{"by": "ann"}]
        assert await asyncio.to_thread(twin.result, "flows", job_id) == "filed"
        with pytest.raises(DrainpipeError) as refused:
            await asyncio.to_thread(twin.emit, "", "k")
        assert refused.value.kind == "validation"

        async def parent(payload: Any, job: Job[Any]) -> None:
            await job.join(await job.spawn_many("other", [{}, {}]))

        parent_id = await jobs.enqueue("flows", {})
        await jobs.drain("flows", parent)
        assert await asyncio.to_thread(twin.cancel, "flows", parent_id, children=True)
        states = {item.state for item in (await jobs.list_jobs("other")).items}
        assert states == {"cancelled"}


# -- over PostgREST (drainpipe_api, routed to real Postgres) -------------------------------------


@pytest.fixture(params=["pgmq", "table"])
async def over_http(
    request: pytest.FixtureRequest, fresh_database: Any
) -> AsyncIterator[tuple[Jobs, str, str]]:
    from drainpipe.backends.postgrest import PostgrestBackend
    from tests.jobs.postgrest_emulation import BASE, SERVICE_KEY, postgrest_emulation

    storage = str(request.param)
    url = str(fresh_database(storage))
    async with postgrest_emulation(url), PostgrestBackend(BASE, SERVICE_KEY) as backend:
        yield Jobs(backend, QUEUES), url, storage


async def test_a_whole_workflow_over_postgrest(over_http: tuple[Jobs, str, str]) -> None:
    jobs, url, storage = over_http
    calls: list[str] = []

    async def child(payload: Any, job: Job[Any]) -> int:
        return int(payload["n"]) * 10

    async def flow(payload: Any, job: Job[Any]) -> dict[str, Any]:
        user = await job.step("create", lambda: calls.append("create") or {"id": 1})
        await job.sleep(3600)
        data = await job.wait_for("clicked", key="1", timeout=600)
        kids = await job.spawn_many("other", [{"n": 1}, {"n": 2}])
        outcomes = await job.join(kids)
        return {"user": user, "data": data, "kids": [o.result for o in outcomes]}

    job_id = await jobs.enqueue("flows", {})
    assert (await jobs.drain("flows", flow)).suspended == 1  # sleeping
    record = await state_of(jobs, job_id)
    assert (record.state, record.waiting_for) == ("waiting", "time")
    await move_time(url, storage, "flows", job_id, 3600)
    assert (await jobs.drain("flows", flow)).suspended == 1  # waiting for the event
    await jobs.emit("clicked", "1", {"at": "noon"})
    assert (await jobs.drain("flows", flow)).suspended == 1  # waiting for the children
    await jobs.drain("other", child)
    await move_time(url, storage, "flows", job_id, 60)
    assert (await jobs.drain("flows", flow)).succeeded == 1
    assert calls == ["create"]
    assert await jobs.result("flows", job_id) == {
        "user": {"id": 1},
        "data": {"at": "noon"},
        "kids": [10, 20],
    }
    record = await state_of(jobs, job_id)
    assert (record.state, record.attempts, record.max_attempts) == ("succeeded", 1, 5)
    assert [s.name for s in record.steps] == [
        "create",
        "sleep",
        "wait:clicked",
        "spawn:other",
        "join",
    ]


# -- the Job Inbox -------------------------------------------------------------------------------


async def test_the_job_inbox_shows_steps_and_waiting_for_but_no_results(jobs: Jobs) -> None:
    import httpx

    from tests.admin.conftest import VIEWER, bearer, make_app

    async def handler(payload: Any, job: Job[Any]) -> None:
        await job.step("lookup", lambda: {"secret": "STEP-RESULT-MARKER"})
        await job.wait_for("approved", key="EVENT-KEY")

    job_id = await jobs.enqueue("flows", {})
    await jobs.drain("flows", handler)
    await jobs.emit("approved", "other", {"secret": "EVENT-DATA-MARKER"})
    app = make_app(jobs)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://inbox") as http:
        one = await http.get(f"/jobs/flows/{job_id}", headers=bearer(VIEWER))
        listed = await http.get("/jobs?state=waiting", headers=bearer(VIEWER))
    assert one.status_code == 200, one.text
    data = one.json()["data"]
    assert (data["state"], data["waiting_for"]) == ("waiting", "event:approved")
    # the pending wait is not a recorded step yet
    assert [(s["number"], s["name"], s["state"]) for s in data["steps"]] == [(1, "lookup", "done")]
    assert set(data["steps"][0]) == {"number", "name", "state", "started_at", "ended_at", "code"}
    assert listed.status_code == 200, listed.text
    assert [item["id"] for item in listed.json()["data"]] == [job_id]
    for body in (one.text, listed.text):
        assert "MARKER" not in body


async def test_a_cancel_racing_a_running_workflow_stops_its_step_records(
    jobs: Jobs, jobs_db_url: str
) -> None:
    """An operator cancels (on its own connection) while the handler records steps: the
    job ends cancelled and no step is recorded after the cancel took the row."""
    recorded: list[int] = []
    errors: list[BaseException] = []

    async def handler(payload: Any, job: Job[Any]) -> None:
        for n in range(200):
            await job.step(f"s{n}", lambda: None)
            recorded.append(n)
            await asyncio.sleep(0.002)

    job_id = await jobs.enqueue("flows", {})
    async with Jobs(jobs_db_url, QUEUES) as operator:

        async def cancel_soon() -> None:
            await asyncio.sleep(0.05)
            assert await operator.cancel("flows", job_id) is True

        await asyncio.gather(
            jobs.drain("flows", handler, on_error=lambda error, job: errors.append(error)),
            cancel_soon(),
        )
    record = await state_of(jobs, job_id)
    assert record.state == "cancelled"
    assert 0 < len(recorded) < 200
    assert len(record.steps) == len(recorded)  # the refused record was the last attempt
    assert any(getattr(error, "code", None) in ("LEASE_LOST", "CANCELLED") for error in errors)
