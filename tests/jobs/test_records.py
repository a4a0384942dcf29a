"""Jobs as records (docs/reference.md section 8) on every backend through one suite: states, attempt
history, codes, cancel, replay lineage, paging, metadata only."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

import drainpipe
from drainpipe import Discard, DrainpipeError, JobRecord, Jobs, Position, Retry, Skip
from drainpipe.backends.memory import Clock, MemoryBackend
from drainpipe.backends.postgrest import PostgrestBackend
from drainpipe.codes import valid_code
from tests.conftest import connect
from tests.jobs.postgrest_emulation import BASE, SERVICE_KEY, postgrest_emulation

QUEUES: dict[str, Any] = {"emails": dict[str, Any], "reports": dict[str, Any]}
PAYLOAD_MARKER = "PAYLOAD-MARKER-7f3a"
ERROR_MARKER = "ERROR-MARKER-91c2"


@dataclass
class Env:
    jobs: Jobs
    backend: str
    url: str | None
    clock: Clock | None
    _other: Jobs | None = None

    async def pass_time(self, seconds: float) -> None:
        """Let leases and backoffs run out: the memory backend's clock moves, the
        database's is waited for (kept short)."""
        if self.clock is not None:
            self.clock.advance(seconds)
        else:
            await asyncio.sleep(seconds)

    def other(self) -> Jobs:
        """A second client (another worker or operator) on the same storage, with its own
        connections on the SQL backends; made once, closed by the fixture."""
        if self._other is None:
            self._other = Jobs(self.jobs.backend if self.url is None else self.url, QUEUES)
        return self._other


@pytest.fixture(params=["table", "pgmq", "memory", "table-postgrest"])
async def env(request: pytest.FixtureRequest, fresh_database: Any) -> AsyncIterator[Env]:
    name = str(request.param)
    if name == "memory":
        clock = Clock()
        yield Env(Jobs(MemoryBackend(now=clock), QUEUES), name, None, clock)
        return
    if name.endswith("-postgrest"):  # the same storage through drainpipe_api over PostgREST
        url = str(fresh_database(name.removesuffix("-postgrest")))
        async with (
            postgrest_emulation(url),
            PostgrestBackend(BASE, SERVICE_KEY) as backend,
        ):
            yield Env(Jobs(backend, QUEUES), name, url, None)
        return
    url = str(fresh_database(name))
    jobs = Jobs(url, QUEUES)
    env = Env(jobs, name, url, None)
    yield env
    await jobs.close()
    if env._other is not None:
        await env._other.close()


async def _record(env: Env, job_id: int, queue: str = "emails") -> JobRecord:
    record = await env.jobs.get(queue, job_id)
    assert record is not None
    return record


def _outcomes(record: JobRecord) -> list[tuple[str, str | None]]:
    return [(attempt.outcome, attempt.code) for attempt in record.history]


# -- states and history -------------------------------------------------------------------


async def test_a_job_is_a_record_from_enqueue_to_success(env: Env) -> None:
    jobs = env.jobs
    job_id = await jobs.enqueue("emails", {"to": "a"}, dedupe_key="k1")
    queued = await _record(env, job_id)
    assert (queued.state, queued.attempts, queued.attempts_left, queued.history) == (
        "queued",
        0,
        5,
        (),
    )
    assert queued.dedupe_key == "k1" and queued.eligible_at is not None
    assert queued.started_at is None and queued.finished_at is None and queued.last_code is None
    [job] = await jobs.claim("emails", lease=60)
    leased = await _record(env, job_id)
    assert (leased.state, leased.attempts, leased.attempts_left) == ("leased", 1, 4)
    assert _outcomes(leased) == [("running", None)] and leased.started_at is not None
    assert await jobs.complete(job) is True
    done = await _record(env, job_id)
    assert (done.state, done.attempts_left, done.last_code) == ("succeeded", 0, None)
    assert done.finished_at is not None and done.finished_at >= done.started_at  # type: ignore[operator]
    [attempt] = done.history
    assert (attempt.number, attempt.outcome, attempt.code) == (1, "succeeded", None)
    assert attempt.ended_at == done.finished_at
    stats = (await jobs.stats(["emails"]))["emails"]
    assert (stats.succeeded, stats.cancelled, stats.ready, stats.dead) == (1, 0, 0, 0)
    assert await jobs.get("emails", job_id + 1000) is None


async def test_failures_keep_their_codes_until_the_job_dies(env: Env) -> None:
    class SmtpDown(Exception):
        code = "SMTP_DOWN"

    jobs = env.jobs
    job_id = await jobs.enqueue("emails", {"to": "a"}, max_attempts=2)
    [job] = await jobs.claim("emails", lease=60)
    assert await jobs.fail(job, SmtpDown("x"), retry_in=0) == "queued"
    waiting = await _record(env, job_id)
    assert (waiting.state, waiting.last_code, waiting.attempts_left) == (
        "retry_wait",
        "SMTP_DOWN",
        1,
    )
    assert _outcomes(waiting) == [("failed", "SMTP_DOWN")]
    [again] = await jobs.claim("emails", lease=60)
    assert await jobs.fail(again, RuntimeError("plain")) == "dead"
    dead = await _record(env, job_id)
    assert (dead.state, dead.last_code, dead.attempts_left) == ("dead", "MAX_ATTEMPTS", 0)
    assert _outcomes(dead) == [("failed", "SMTP_DOWN"), ("failed", "HANDLER_ERROR")]
    assert dead.finished_at is not None


async def test_an_invalid_code_attribute_is_ignored(env: Env) -> None:
    class Odd(Exception):
        code = "not a code\n"

    job_id = await env.jobs.enqueue("emails", {"to": "a"})
    [job] = await env.jobs.claim("emails", lease=60)
    await env.jobs.fail(job, Odd("x"))
    assert (await _record(env, job_id)).last_code == "HANDLER_ERROR"


async def test_a_worker_killed_mid_job_leaves_an_expired_attempt(env: Env) -> None:
    jobs = env.jobs
    job_id = await jobs.enqueue("emails", {"to": "a"}, max_attempts=2)
    [first] = await jobs.claim("emails", lease=0.2)  # this worker dies: it never settles
    await env.pass_time(0.3)
    lapsed = await _record(env, job_id)  # read before any claim swept it
    assert (lapsed.state, lapsed.last_code) == ("retry_wait", "LEASE_EXPIRED")
    assert _outcomes(lapsed) == [("expired", "LEASE_EXPIRED")]
    [second] = await jobs.claim("emails", lease=0.2)  # takes it over
    assert second.attempts == 2
    taken = await _record(env, job_id)
    assert taken.state == "leased"
    assert _outcomes(taken) == [("expired", "LEASE_EXPIRED"), ("running", None)]
    assert taken.history[0].started_at is not None and taken.history[0].ended_at is not None
    assert await jobs.complete(first) is False  # the dead worker's late word changes nothing
    await env.pass_time(0.3)
    assert (await _record(env, job_id)).state == "dead"  # its last lease ran out: dead at once
    assert await jobs.claim("emails") == []  # the sweep
    swept = await _record(env, job_id)
    assert (swept.state, swept.last_code) == ("dead", "MAX_ATTEMPTS")
    assert _outcomes(swept) == [("expired", "LEASE_EXPIRED"), ("expired", "LEASE_EXPIRED")]
    assert [dead.id for dead in await jobs.list_dead("emails")] == [job_id]


# -- cancel -------------------------------------------------------------------------------


async def test_cancel_a_waiting_job_it_never_runs(env: Env) -> None:
    jobs = env.jobs
    queued = await jobs.enqueue("emails", {"to": "a"})
    assert await jobs.cancel("emails", queued) is True
    assert await jobs.cancel("emails", queued) is False  # terminal already
    record = await _record(env, queued)
    assert (record.state, record.last_code, record.history) == ("cancelled", "CANCELLED", ())
    retried = await jobs.enqueue("emails", {"to": "b"})
    [job] = await jobs.claim("emails", lease=60)
    await jobs.fail(job, "x", retry_in=0)
    assert await jobs.cancel("emails", retried) is True
    assert await jobs.claim("emails") == []
    assert (await jobs.stats(["emails"]))["emails"].cancelled == 2
    with pytest.raises(DrainpipeError) as unknown:
        await jobs.cancel("emails", 987654)
    assert unknown.value.kind == "not_found"


async def test_cancel_a_leased_job_fences_its_holder(env: Env) -> None:
    jobs = env.jobs
    job_id = await jobs.enqueue("emails", {"to": "a"})
    [job] = await jobs.claim("emails", lease=60)
    assert await jobs.cancel("emails", job_id) is True
    assert await jobs.extend(job, 60) is False
    assert await jobs.fail(job, "late failure") is None
    record = await _record(env, job_id)
    assert (record.state, record.last_code) == ("cancelled", "CANCELLED")
    [attempt] = record.history
    assert (attempt.outcome, attempt.code, attempt.late_outcome) == (
        "cancelled",
        "CANCELLED",
        "failed",
    )
    assert await jobs.complete(job) is False  # the first late word stays
    assert (await _record(env, job_id)).history[0].late_outcome == "failed"


async def test_a_completion_after_the_cancel_is_kept_as_late_outcome(env: Env) -> None:
    job_id = await env.jobs.enqueue("emails", {"to": "a"})
    [job] = await env.jobs.claim("emails", lease=60)
    assert await env.jobs.cancel("emails", job_id) is True
    assert await env.jobs.complete(job) is False
    record = await _record(env, job_id)
    assert record.state == "cancelled" and record.history[0].late_outcome == "succeeded"


async def test_cancel_racing_completion_exactly_one_wins(env: Env) -> None:
    if env.url is None:
        pytest.skip("real connections race on the SQL backends")
    ids = [await env.jobs.enqueue("emails", {"to": str(i)}) for i in range(12)]
    claimed = await env.jobs.claim("emails", batch=12, lease=60)
    canceller = await connect(env.url)
    completer = await connect(env.url)
    try:
        cancels = Jobs(canceller, QUEUES)
        completes = Jobs(completer, QUEUES)
        for job in claimed:
            cancelled, completed = await asyncio.gather(
                cancels.cancel("emails", job.id), completes.complete(job)
            )
            assert cancelled != completed, (job.id, cancelled, completed)  # exactly one won
            record = await _record(env, job.id)
            assert record.state == ("cancelled" if cancelled else "succeeded")
            if cancelled:
                assert record.history[-1].late_outcome == "succeeded"  # the loser was told False
    finally:
        await canceller.close()
        await completer.close()
    assert sorted(job.id for job in claimed) == ids


async def test_a_running_handler_is_cancelled_within_two_heartbeats(env: Env) -> None:
    if env.clock is not None:
        pytest.skip("heartbeats run on the real clock")
    jobs = env.jobs
    job_id = await jobs.enqueue("emails", {"to": "a"})
    started = asyncio.Event()
    stopped: list[float] = []
    errors: list[BaseException] = []
    beat = 0.15
    loop = asyncio.get_running_loop()

    async def handler(payload: Any, job: Any) -> None:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            stopped.append(loop.time())
            raise

    async def operator() -> None:
        await started.wait()
        assert await env.other().cancel("emails", job_id) is True
        cancelled_at.append(loop.time())  # from the moment the cancel is committed

    cancelled_at: list[float] = []
    stop = asyncio.Event()
    work = asyncio.create_task(
        jobs.work(
            "emails",
            handler,
            lease=5,
            heartbeat_every=beat,
            stop=stop,
            on_error=lambda e, j: errors.append(e),
        )
    )
    await asyncio.wait_for(operator(), 5)
    for _ in range(100):
        if stopped:
            break
        await asyncio.sleep(0.02)
    stop.set()
    report = await asyncio.wait_for(work, 5)
    # within two heartbeats (plus a round trip's slack on a loaded machine)
    assert stopped and stopped[0] - cancelled_at[0] <= 2 * beat + 0.2
    assert [getattr(e, "code", None) for e in errors] == ["CANCELLED"]
    assert (report.succeeded, report.failed) == (0, 0)
    assert (await _record(env, job_id)).state == "cancelled"


# -- codes from handlers ------------------------------------------------------------------


async def test_handler_codes_skip_discard_retry(env: Env) -> None:
    class Throttled(Exception):
        code = "THROTTLED"

    jobs = env.jobs
    plan = {
        "skip": Skip("NO_RECIPIENT"),
        "discard": Discard("BAD_ADDRESS"),
        "retry": Retry(after=60, code="RATE_LIMITED"),
        "retry_plain": Retry(after=60),
        "coded": Throttled("slow down"),
    }
    ids = {name: await jobs.enqueue("emails", {"to": name}) for name in plan}
    errors: list[BaseException] = []

    async def handler(payload: Any, job: Any) -> None:
        raise plan[payload["to"]]

    report = await jobs.drain("emails", handler, on_error=lambda e, j: errors.append(e))
    assert (report.succeeded, report.failed) == (1, 4)
    skipped = await _record(env, ids["skip"])
    assert (skipped.state, skipped.last_code) == ("succeeded", "NO_RECIPIENT")
    assert _outcomes(skipped) == [("skipped", "NO_RECIPIENT")]
    discarded = await _record(env, ids["discard"])
    assert (discarded.state, discarded.last_code, discarded.attempts_left) == (
        "dead",
        "BAD_ADDRESS",
        0,
    )
    assert _outcomes(discarded) == [("discarded", "BAD_ADDRESS")]
    assert (await _record(env, ids["retry"])).last_code == "RATE_LIMITED"
    assert (await _record(env, ids["retry_plain"])).last_code == "RETRY"
    coded = await _record(env, ids["coded"])
    assert (coded.state, coded.last_code) == ("retry_wait", "THROTTLED")
    assert [type(e).__name__ for e in errors] == ["Throttled"]  # Skip/Discard/Retry are no errors


async def test_a_bad_code_is_the_handlers_bug(env: Env) -> None:
    jobs = env.jobs
    job_id = await jobs.enqueue("emails", {"to": "a"})
    errors: list[BaseException] = []

    async def handler(payload: Any, job: Any) -> None:
        raise Skip("lower case")

    await jobs.drain("emails", handler, on_error=lambda e, j: errors.append(e))
    record = await _record(env, job_id)
    assert (record.state, record.last_code) == ("retry_wait", "HANDLER_ERROR")
    assert len(errors) == 1 and isinstance(errors[0], ValueError)


async def test_a_payload_that_fails_its_schema_in_the_worker_is_payload_invalid(env: Env) -> None:
    from pydantic import BaseModel

    class Strict(BaseModel):
        n: int

    job_id = await env.jobs.enqueue("emails", {"n": "not a number"})  # stored as dict[str, Any]
    worker = Jobs(env.jobs.backend, {"emails": Strict})  # a later release: a stricter schema
    errors: list[BaseException] = []
    await worker.drain("emails", lambda payload, job: None, on_error=lambda e, j: errors.append(e))
    record = await _record(env, job_id)
    assert (record.state, record.last_code) == ("retry_wait", "PAYLOAD_INVALID")
    assert [getattr(e, "kind", None) for e in errors] == ["validation"]


def test_valid_code() -> None:
    assert valid_code("A") and valid_code("SMTP_5XX") and valid_code("A" * 64)
    for bad in ("", "a", "1A", "A" * 65, "A\n", "A-B", None, 5):
        assert not valid_code(bad)
    with pytest.raises(ValueError, match="needs a code"):
        Discard("x")
    with pytest.raises(ValueError, match="needs a code"):
        Retry(code="bad")
    assert Retry(5, "kept message").args == ("kept message",)


# -- replay -------------------------------------------------------------------------------


async def _dead_job(env: Env, to: str = "a") -> int:
    job_id = await env.jobs.enqueue("emails", {"to": to}, max_attempts=1, dedupe_key=f"key-{to}")
    [job] = await env.jobs.claim("emails", lease=60)
    assert await env.jobs.fail(job, "boom") == "dead"
    return job_id


async def test_replay_makes_a_child_and_the_parent_stays_dead(env: Env) -> None:
    jobs = env.jobs
    parent = await _dead_job(env)
    other = await _dead_job(env, "b")
    assert (await jobs.stats(["emails"]))["emails"].dead == 2
    child = await jobs.replay("emails", parent)
    assert child is not None and child != parent
    assert await jobs.replay("emails", parent) is None  # replayed already
    old = await _record(env, parent)
    assert (old.state, old.replayed_by) == ("dead", child)
    assert _outcomes(old) == [("failed", "HANDLER_ERROR")]
    new = await _record(env, child)
    assert (new.state, new.parent_id, new.dedupe_key, new.max_attempts) == (
        "queued",
        parent,
        "key-a",
        1,
    )
    assert [dead.id for dead in await jobs.list_dead("emails")] == [other]
    assert (await jobs.stats(["emails"]))["emails"].dead == 1
    assert await jobs.retry_dead("emails") == 1  # only the one not replayed
    assert await jobs.retry_dead("emails") == 0
    assert await jobs.replay("emails", child) is None  # not dead


# -- listing ------------------------------------------------------------------------------


async def test_list_jobs_pages_newest_first_with_filters(env: Env) -> None:
    jobs = env.jobs
    ids = [
        await jobs.enqueue("emails", {"to": str(i)}, context={"tenant": "t1" if i % 2 else "t2"})
        for i in range(7)
    ]
    report_id = await jobs.enqueue("reports", {"r": 1})
    first = await jobs.list_jobs("emails", limit=3)
    assert [r.id for r in first.items] == ids[::-1][:3] and first.next_cursor
    assert all(r.history == () for r in first.items)
    second = await jobs.list_jobs("emails", limit=3, cursor=first.next_cursor)
    third = await jobs.list_jobs("emails", limit=3, cursor=second.next_cursor)
    assert [r.id for r in second.items + third.items] == ids[::-1][3:]
    assert third.next_cursor is None
    t1 = await jobs.list_jobs("emails", tenant="t1", limit=500)
    assert {r.id for r in t1.items} == set(ids[1::2]) and {r.tenant for r in t1.items} == {"t1"}
    everything = await jobs.list_jobs(limit=500)
    assert {(r.queue, r.id) for r in everything.items} == {("emails", i) for i in ids} | {
        ("reports", report_id)
    }
    [job] = await jobs.claim("emails", lease=60)
    await jobs.complete(job)
    assert [r.id for r in (await jobs.list_jobs("emails", state="succeeded")).items] == [job.id]
    queued = await jobs.list_jobs("emails", state="queued", limit=500)
    assert len(queued.items) == 6 and all(r.state == "queued" for r in queued.items)


async def test_list_limits_and_cursors_are_checked(env: Env) -> None:
    jobs = env.jobs
    for limit, code in ((0, "LIMIT_INVALID"), (-1, "LIMIT_INVALID"), (501, "LIMIT_TOO_LARGE")):
        with pytest.raises(DrainpipeError) as caught:
            await jobs.list_jobs(limit=limit)
        assert (caught.value.kind, caught.value.code) == ("invalid_request", code)
    for _ in range(3):
        await jobs.enqueue("emails", {"to": "a"})
    page = await jobs.list_jobs("emails", limit=1)
    assert page.next_cursor is not None
    cursor = page.next_cursor
    altered = cursor[:-2] + ("A" if cursor[-2] != "A" else "B") + cursor[-1]
    for bad, kwargs in (
        (altered, {"queue": "emails"}),
        ("garbage", {"queue": "emails"}),
        (cursor, {"queue": "emails", "state": "queued"}),  # made for other filters
        (cursor, {"queue": "reports"}),
    ):
        with pytest.raises(DrainpipeError) as caught:
            await jobs.list_jobs(cursor=bad, **kwargs)
        assert (caught.value.kind, caught.value.code) == ("invalid_request", "CURSOR_INVALID")
    with pytest.raises(DrainpipeError) as caught:
        await Jobs(jobs.backend, QUEUES, cursor_secret="another secret, long").list_jobs(
            "emails", cursor=cursor
        )
    assert caught.value.code == "CURSOR_INVALID"
    with pytest.raises(DrainpipeError):
        await jobs.list_jobs(state="sleeping")
    with pytest.raises(DrainpipeError):
        await jobs.list_jobs("nope")


async def test_list_records_positions_round_trip(env: Env) -> None:
    ids = [await env.jobs.enqueue("emails", {"to": str(i)}) for i in range(3)]
    records, after = await env.jobs.list_records("emails", limit=2)
    assert [r.id for r in records] == ids[::-1][:2] and after is not None
    again = Position.parse(str(after))
    assert again == after
    rest, end = await env.jobs.list_records("emails", limit=2, before=again)
    assert [r.id for r in rest] == ids[:1] and end is None
    for bad in ("", "1", "x.emails", "1.Emails", "01.emails", "1.emails\n"):
        with pytest.raises(ValueError, match="position"):
            Position.parse(bad)


async def test_paging_returns_every_job_exactly_once_under_concurrent_inserts(env: Env) -> None:
    jobs = env.jobs
    existing = set(await jobs.enqueue_many("emails", [{"to": str(i)} for i in range(60)]))
    inserting = True

    async def insert() -> None:
        while inserting:
            await env.other().enqueue("emails", {"to": "new"})
            await asyncio.sleep(0)

    inserter = asyncio.create_task(insert())
    seen: list[int] = []
    cursor = None
    try:
        while True:
            page = await jobs.list_jobs("emails", limit=7, cursor=cursor)
            seen += [record.id for record in page.items]
            await asyncio.sleep(0.005)
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
    finally:
        inserting = False
        await inserter
    assert len(seen) == len(set(seen))  # nothing twice
    assert existing <= set(seen)  # everything that was there, once


# -- metadata only ------------------------------------------------------------------------


async def test_no_record_carries_the_payload_or_the_error_text(env: Env) -> None:
    jobs = env.jobs
    ids = [
        await jobs.enqueue("emails", {"to": PAYLOAD_MARKER}, context={"tenant": "t"})
        for _ in range(3)
    ]
    [job, *_] = await jobs.claim("emails", lease=60)
    await jobs.fail(job, f"failed with {ERROR_MARKER}", retry_in=0)
    [job] = await jobs.claim("emails", lease=60)
    await jobs.fail(job, ERROR_MARKER)
    await jobs.cancel("emails", ids[2])
    records = [await _record(env, i) for i in ids]
    records += (await jobs.list_jobs(limit=500)).items
    for state in drainpipe.models.JOB_STATES:
        records += (await jobs.list_jobs("emails", state=state)).items
    assert len(records) > 6
    for record in records:
        text = repr(record)
        assert PAYLOAD_MARKER not in text and ERROR_MARKER not in text


async def test_purge_removes_finished_records(env: Env) -> None:
    jobs = env.jobs
    job_id = await jobs.enqueue("emails", {"to": "a"})
    live = await jobs.enqueue("emails", {"to": "b"})
    [job] = await jobs.claim("emails", lease=60)
    await jobs.complete(job)
    assert await jobs.purge_archive("emails", older_than=0) == 1
    assert await jobs.get("emails", job_id) is None
    assert (await _record(env, live)).state == "queued"


async def test_the_sql_functions_take_the_time_as_p_now(env: Env) -> None:
    if env.url is None:
        pytest.skip("the SQL functions")
    job_id = await env.jobs.enqueue("emails", {"to": "a"})
    [job] = await env.jobs.claim("emails", lease=60)
    async with await connect(env.url) as conn:
        later = "clock_timestamp() + interval '2 minutes'"
        row = await (
            await conn.execute(
                f"SELECT state, last_code, history FROM drainpipe.get_job_v1('emails', %s, {later})",
                (job_id,),
            )
        ).fetchone()
        assert row is not None and row[:2] == ("retry_wait", "LEASE_EXPIRED")
        assert [a["outcome"] for a in row[2]] == ["expired"]
        cancelled = await (
            await conn.execute(f"SELECT drainpipe.cancel_job_v1('emails', %s, {later})", (job_id,))
        ).fetchone()
        assert cancelled == ("cancelled",)
        unknown = await (
            await conn.execute("SELECT drainpipe.cancel_job_v1('emails', 424242)")
        ).fetchone()
        assert unknown == (None,)
    record = await _record(env, job_id)
    assert record.state == "cancelled"
    # the lease had run out (at p_now) before the cancel: that attempt expired
    assert _outcomes(record) == [("expired", "LEASE_EXPIRED")]
    assert await env.jobs.complete(job) is False
