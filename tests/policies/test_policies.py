"""Queue policies on real Postgres, both storage backends: each limit with its kind and
code, nothing stored when refused, the same refusals from the database for writers that
did not declare the policy (another Jobs, a SQL trigger), the pending cap under a 100-way
race, lease defaults and caps, retention."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from drainpipe import DrainpipeError, Job, Jobs, QueuePolicy
from drainpipe.testing import MemoryBackend
from tests.conftest import connect

QUEUES: dict[str, Any] = {"inbox": dict[str, Any], "free": dict[str, Any]}
SMALL = QueuePolicy(max_payload_bytes=200, max_pending=5, max_delay=3600, lease=5, max_lease=10)


def guarded(db: Any, policy: QueuePolicy = SMALL) -> Jobs:
    return Jobs(db, QUEUES, policies={"inbox": policy})


async def live_count(url: str, backend_name: str, queue: str = "inbox") -> int:
    async with await connect(url) as conn:
        if backend_name == "table":
            query = (
                "SELECT count(*) FROM drainpipe.job_messages"
                " WHERE queue = %s AND finished_at IS NULL"
            )
            row = await (await conn.execute(query, (queue,))).fetchone()
        else:
            exists = await (
                await conn.execute("SELECT to_regclass('pgmq.q_' || %s) IS NOT NULL", (queue,))
            ).fetchone()
            if not exists or not exists[0]:
                return 0
            row = await (await conn.execute(f"SELECT count(*) FROM pgmq.q_{queue}")).fetchone()
    assert row is not None
    return int(row[0])


def assert_refused(exc: pytest.ExceptionInfo[DrainpipeError], kind: str, code: str) -> None:
    assert (exc.value.kind, exc.value.code) == (kind, code), exc.value


# -- QueuePolicy itself -----------------------------------------------------------------


def test_defaults_are_the_job_inbox_limits_and_the_policy_is_frozen() -> None:
    policy = QueuePolicy()
    assert (policy.max_payload_bytes, policy.max_pending, policy.lease, policy.max_lease) == (
        65536,
        10000,
        30.0,
        60.0,
    )
    assert policy.max_delay == 7 * 86400 and policy.retention == 30 * 86400
    assert (policy.max_attempts, policy.attempt_window, policy.encrypt) == (5, None, False)
    with pytest.raises(AttributeError):
        policy.lease = 1  # type: ignore[misc]
    assert QueuePolicy(max_delay=timedelta(hours=1)).max_delay == 3600.0  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "options",
    [
        {"lease": 61},
        {"lease": 0},
        {"max_lease": -1},
        {"max_pending": 0},
        {"max_payload_bytes": 0},
        {"max_payload_bytes": 2 << 20},
        {"max_attempts": 0},
        {"max_attempts": True},
        {"attempt_window": 0},
        {"retention": float("inf")},
        {"max_delay": "7 days"},
        {"encrypt": "yes"},
    ],
)
def test_invalid_fields_are_value_errors(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="QueuePolicy"):
        QueuePolicy(**options)


def test_policies_must_name_declared_queues() -> None:
    with pytest.raises(ValueError, match="undeclared"):
        Jobs(MemoryBackend(), QUEUES, policies={"nope": QueuePolicy()})
    with pytest.raises(TypeError):
        Jobs(MemoryBackend(), QUEUES, policies={"inbox": {"lease": 5}})  # type: ignore[dict-item]


# -- the client's checks, before anything is sent -----------------------------------------


async def test_client_checks_each_limit_and_stores_nothing(
    jobs_db_url: str, backend_name: str
) -> None:
    jobs = guarded(jobs_db_url)
    with pytest.raises(DrainpipeError) as too_large:
        await jobs.enqueue("inbox", {"text": "x" * 300})
    assert_refused(too_large, "validation", "PAYLOAD_TOO_LARGE")
    with pytest.raises(DrainpipeError) as too_far:
        await jobs.enqueue("inbox", {"a": 1}, delay=3601)
    assert_refused(too_far, "validation", "SCHEDULE_TOO_FAR")
    with pytest.raises(DrainpipeError) as many_too_large:
        await jobs.enqueue_many("inbox", [{"a": 1}, {"text": "x" * 300}])
    assert_refused(many_too_large, "validation", "PAYLOAD_TOO_LARGE")
    assert many_too_large.value.issues and many_too_large.value.issues[0]["path"][0] == 1
    assert await live_count(jobs_db_url, backend_name) == 0
    # the same payload goes to a queue without a policy
    await jobs.enqueue("free", {"text": "x" * 300}, delay=7200)
    await jobs.close()


async def test_lease_defaults_and_caps(jobs_db_url: str) -> None:
    jobs = guarded(jobs_db_url)
    await jobs.enqueue("inbox", {"a": 1})
    with pytest.raises(DrainpipeError) as too_long:
        await jobs.claim("inbox", lease=11)
    assert_refused(too_long, "invalid_request", "LEASE_TOO_LONG")
    (job,) = await jobs.claim("inbox")  # the policy's lease: 5 s
    held = (job.visible_until - job.enqueued_at).total_seconds()
    assert 4 <= held <= 6
    with pytest.raises(DrainpipeError) as extend_too_long:
        await jobs.extend(job, 60)
    assert_refused(extend_too_long, "invalid_request", "LEASE_TOO_LONG")
    assert await jobs.extend(job, 10)
    assert await jobs.complete(job)
    await jobs.close()


async def test_work_caps_its_lease_and_heartbeats_a_long_handler(db_url: str) -> None:
    # a job's heartbeat comes every half lease but at most once a second: the lease (capped
    # at 2 s) outlasts a beat by a second, so a loaded machine does not lose it between beats
    policy = QueuePolicy(lease=1.5, max_lease=2)
    jobs = guarded(db_url, policy)
    other = Jobs(db_url, QUEUES)
    await jobs.enqueue("inbox", {"a": 1})
    stolen: list[Any] = []

    async def slow(payload: Any, job: Job[Any]) -> None:
        assert (job.visible_until - job.enqueued_at).total_seconds() < 5  # capped, not 300
        await asyncio.sleep(4.5)  # far past max_lease: heartbeats keep the job ours
        stolen.extend(await other.claim("inbox", lease=1))

    report = await jobs.drain("inbox", slow, lease=300)
    assert (report.succeeded, report.failed, stolen) == (1, 0, [])
    await jobs.close()
    await other.close()


async def test_max_attempts_defaults_to_the_policy_and_is_capped(db_url: str) -> None:
    jobs = guarded(db_url, QueuePolicy(max_attempts=2))
    await jobs.enqueue("inbox", {"a": 1})
    await jobs.enqueue("inbox", {"a": 2}, max_attempts=9)
    claimed = await jobs.claim("inbox", batch=2, lease=5)
    assert [job.max_attempts for job in claimed] == [2, 2]
    await jobs.close()


# -- the database's checks, for every writer ----------------------------------------------


async def test_sql_refuses_writers_that_did_not_declare_the_policy(
    jobs_db_url: str, backend_name: str
) -> None:
    declared = guarded(jobs_db_url)
    assert await declared.ensure_policies() == 1
    assert await declared.ensure_policies() == 1  # idempotent
    undeclared = Jobs(jobs_db_url, QUEUES)  # another service without the policy
    with pytest.raises(DrainpipeError) as too_large:
        await undeclared.enqueue("inbox", {"text": "x" * 600})
    assert_refused(too_large, "validation", "PAYLOAD_TOO_LARGE")
    with pytest.raises(DrainpipeError) as too_far:
        await undeclared.enqueue("inbox", {"a": 1}, delay=7200)
    assert_refused(too_far, "validation", "SCHEDULE_TOO_FAR")
    await undeclared.enqueue_many("inbox", [{"n": i} for i in range(4)])
    with pytest.raises(DrainpipeError) as full_batch:
        await undeclared.enqueue_many("inbox", [{"n": 4}, {"n": 5}])  # would make 6 of 5
    assert_refused(full_batch, "rate_limited", "QUEUE_FULL")
    assert full_batch.value.status == 429
    assert await live_count(jobs_db_url, backend_name) == 4  # all or nothing
    await undeclared.enqueue("inbox", {"n": 4})
    with pytest.raises(DrainpipeError) as full:
        await undeclared.enqueue("inbox", {"n": 5})
    assert_refused(full, "rate_limited", "QUEUE_FULL")
    # a completed job frees its place; the queue without a policy is untouched
    (job,) = await undeclared.claim("inbox", lease=5)
    assert await undeclared.complete(job)
    await undeclared.enqueue("inbox", {"n": 5})
    await undeclared.enqueue_many("free", [{"n": i} for i in range(10)])
    assert await live_count(jobs_db_url, backend_name) == 5
    await declared.close()
    await undeclared.close()


async def test_a_sql_trigger_calling_the_enqueue_function_is_refused(jobs_db_url: str) -> None:
    jobs = guarded(jobs_db_url)
    await jobs.ensure_policies()
    async with await connect(jobs_db_url) as conn:
        await conn.execute(
            """CREATE TABLE public.signups (id serial PRIMARY KEY, note text);
               CREATE FUNCTION public.signup_job() RETURNS trigger LANGUAGE plpgsql AS $$
               BEGIN
                   PERFORM drainpipe.enqueue_job_v1('inbox', jsonb_build_object('note', NEW.note));
                   RETURN NEW;
               END $$;
               CREATE TRIGGER signup_job AFTER INSERT ON public.signups
                   FOR EACH ROW EXECUTE FUNCTION public.signup_job();"""
        )
        await conn.execute("INSERT INTO public.signups (note) VALUES ('short')")
        with pytest.raises(psycopg.Error, match="max_payload_bytes") as refused:
            await conn.execute("INSERT INTO public.signups (note) VALUES (%s)", ("x" * 600,))
        assert getattr(refused.value, "sqlstate", None) == "DPQ01"
        rows = await (await conn.execute("SELECT count(*) FROM public.signups")).fetchone()
        assert rows == (1,)  # the writer's own row went with it: nothing stored
    (job,) = await jobs.claim("inbox", lease=5)
    assert job.payload == {"note": "short"}
    await jobs.close()


async def test_hundred_concurrent_enqueues_never_overshoot_max_pending(
    jobs_db_url: str, backend_name: str
) -> None:
    cap = 37
    setup = guarded(jobs_db_url, QueuePolicy(max_pending=cap))
    await setup.ensure_policies()
    connections = [await connect(jobs_db_url) for _ in range(20)]
    writers = [Jobs(conn, QUEUES) for conn in connections]  # none declared the policy
    outcomes: list[str] = []

    async def one(index: int) -> None:
        try:
            await writers[index % len(writers)].enqueue("inbox", {"n": index})
            outcomes.append("stored")
        except DrainpipeError as exc:
            outcomes.append(f"{exc.kind}/{exc.code}")

    await asyncio.gather(*(one(i) for i in range(100)))
    assert outcomes.count("stored") == cap
    assert outcomes.count("rate_limited/QUEUE_FULL") == 100 - cap
    assert await live_count(jobs_db_url, backend_name) == cap
    for conn in connections:
        await conn.close()
    await setup.close()


async def test_counter_starts_from_the_jobs_already_there(
    jobs_db_url: str, backend_name: str
) -> None:
    plain = Jobs(jobs_db_url, QUEUES)
    await plain.enqueue_many("inbox", [{"n": i} for i in range(4)])
    await guarded(jobs_db_url).ensure_policies()  # max_pending 5
    await plain.enqueue("inbox", {"n": 4})
    with pytest.raises(DrainpipeError) as full:
        await plain.enqueue("inbox", {"n": 5})
    assert_refused(full, "rate_limited", "QUEUE_FULL")
    # dead letters leave the count too
    claimed = await plain.claim("inbox", batch=5, lease=5)
    for job in claimed:
        assert await plain.fail(job, "no", retry_in=0) in ("queued", "dead")
    assert await live_count(jobs_db_url, backend_name) == 5
    await plain.close()


async def test_retention_deletes_terminal_records_only(jobs_db_url: str, backend_name: str) -> None:
    jobs = guarded(jobs_db_url, QueuePolicy(retention=60))
    await jobs.ensure_policies()
    await jobs.enqueue("inbox", {"dies": True}, max_attempts=1)
    await jobs.enqueue("inbox", {"done": True})
    await jobs.enqueue("inbox", {"live": True}, delay=600)
    (dying,) = await jobs.claim("inbox", lease=5)
    assert await jobs.fail(dying, "boom") == "dead"
    (done,) = await jobs.claim("inbox", lease=5)
    assert await jobs.complete(done)
    assert await jobs.apply_retention() == 0  # nothing is 60 s old yet
    async with await connect(jobs_db_url) as conn:
        if backend_name == "table":
            await conn.execute(
                "UPDATE drainpipe.job_messages SET finished_at = finished_at - interval '2 minutes'"
            )
            # a live job's age does not matter
            await conn.execute(
                "UPDATE drainpipe.job_messages SET enqueued_at = enqueued_at - interval '1 year'"
            )
        else:
            await conn.execute(
                "UPDATE pgmq.a_inbox SET archived_at = archived_at - interval '2 minutes'"
            )
            await conn.execute(
                "UPDATE pgmq.q_inbox SET enqueued_at = enqueued_at - interval '1 year'"
            )
    deleted = await jobs.apply_retention()
    assert deleted == 2  # the dead job and the completed one
    assert await jobs.list_dead("inbox") == []
    assert await live_count(jobs_db_url, backend_name) == 1
    # at most once per interval when asked so (the drain route's way)
    assert await jobs.apply_retention_if_due(3600) is not None
    assert await jobs.apply_retention_if_due(3600) is None
    await jobs.close()


async def test_pgmq_public_writers_are_refused_with_the_same_codes(db_url: str) -> None:
    from drainpipe.backends.pgmq_public import PgmqPublicBackend
    from tests.jobs.test_pgmq_public import BASE, SERVICE_KEY, postgrest

    async with postgrest(db_url, ("inbox",)) as _:
        declared = guarded(db_url, QueuePolicy(max_payload_bytes=200, max_pending=2))
        await declared.ensure_policies()
        async with PgmqPublicBackend.from_url(BASE, SERVICE_KEY) as backend:
            over_https = Jobs(backend, QUEUES)  # no policy declared on this side
            with pytest.raises(DrainpipeError) as too_large:
                await over_https.enqueue("inbox", {"text": "x" * 600})
            assert_refused(too_large, "validation", "PAYLOAD_TOO_LARGE")
            await over_https.enqueue_many("inbox", [{"n": 1}, {"n": 2}])
            with pytest.raises(DrainpipeError) as full:
                await over_https.enqueue("inbox", {"n": 3})
            assert_refused(full, "rate_limited", "QUEUE_FULL")
        assert await live_count(db_url, "pgmq") == 2
        await declared.close()


# -- attempt budgets with a window ----------------------------------------------------------


@pytest.fixture
def table_url(fresh_database: Any) -> str:
    return str(fresh_database("table"))


async def test_window_ends_the_job_dead_when_the_retry_would_start_after_it(
    table_url: str,
) -> None:
    jobs = guarded(table_url, QueuePolicy(max_attempts=10, attempt_window=30))
    await jobs.enqueue("inbox", {"a": 1})
    (job,) = await jobs.claim("inbox")
    started = await jobs.get("inbox", job.id)
    assert started is not None and started.started_at is not None
    assert started.deadline == started.started_at + timedelta(seconds=30)
    assert await jobs.fail(job, "soon again", retry_in=0) == "queued"  # within the window
    (again,) = await jobs.claim("inbox")
    # a backoff ending after the 30 s window: dead now, nothing scheduled
    assert await jobs.fail(again, "later", retry_in=60) == "dead"
    record = await jobs.get("inbox", job.id)
    assert record is not None
    assert (record.state, record.last_code) == ("dead", "DEADLINE_PASSED")
    assert await jobs.claim("inbox") == []
    await jobs.close()


async def test_the_worker_obeys_the_window_and_max_attempts_comes_first(table_url: str) -> None:
    jobs = guarded(table_url, QueuePolicy(max_attempts=2, attempt_window=3600))
    await jobs.enqueue("inbox", {"a": 1})

    async def failing(payload: Any, job: Job[Any]) -> None:
        raise drainpipe_retry(0)

    await jobs.drain("inbox", failing)
    await jobs.drain("inbox", failing)
    (dead,) = await jobs.list_dead("inbox")
    record = await jobs.get("inbox", dead.id)
    assert record is not None and record.last_code == "MAX_ATTEMPTS"
    windowed = guarded(table_url, QueuePolicy(max_attempts=10, attempt_window=5))
    await windowed.enqueue("inbox", {"b": 1})

    async def slow_retry(payload: Any, job: Job[Any]) -> None:
        raise drainpipe_retry(30)  # asks for a retry after the 5 s window

    report = await windowed.drain("inbox", slow_retry)
    assert report.failed == 1
    codes = {r.last_code for r in (await windowed.list_jobs("inbox", state="dead")).items}
    assert "DEADLINE_PASSED" in codes
    await jobs.close()
    await windowed.close()


def drainpipe_retry(after: float) -> Exception:
    from drainpipe import Retry

    return Retry(after=after)


async def test_the_window_holds_on_pgmq_and_in_memory_too(db_url: str) -> None:
    for backend in (db_url, MemoryBackend()):
        jobs = guarded(backend, QueuePolicy(max_attempts=10, attempt_window=30))
        await jobs.enqueue("inbox", {"a": 1})
        (job,) = await jobs.claim("inbox")
        assert await jobs.fail(job, "soon", retry_in=0) == "queued"
        (again,) = await jobs.claim("inbox")
        assert await jobs.fail(again, "later", retry_in=60) == "dead"
        record = await jobs.get("inbox", job.id)
        assert record is not None
        assert (record.state, record.last_code) == ("dead", "DEADLINE_PASSED")
        await jobs.close()


async def test_memory_backend_enforces_the_pending_cap_and_retention() -> None:
    backend = MemoryBackend()
    jobs = guarded(backend, QueuePolicy(max_pending=3, retention=60))
    assert await jobs.ensure_policies() == 1
    undeclared = Jobs(backend, QUEUES)
    await undeclared.enqueue_many("inbox", [{"n": 1}, {"n": 2}])
    with pytest.raises(DrainpipeError) as full_batch:
        await undeclared.enqueue_many("inbox", [{"n": 3}, {"n": 4}])
    assert_refused(full_batch, "rate_limited", "QUEUE_FULL")
    first = await undeclared.enqueue("inbox", {"n": 3}, dedupe_key="k")
    assert await undeclared.enqueue("inbox", {"n": 3}, dedupe_key="k") == first  # not counted
    with pytest.raises(DrainpipeError) as full:
        await undeclared.enqueue("inbox", {"n": 4})
    assert_refused(full, "rate_limited", "QUEUE_FULL")
    for one in await jobs.claim("inbox", batch=3):
        assert await jobs.complete(one)
    await undeclared.enqueue("inbox", {"n": 5}, max_attempts=1)
    (dying,) = await jobs.claim("inbox")
    assert await jobs.fail(dying, "boom") == "dead"
    assert await jobs.apply_retention() == 0
    backend.advance_time(120)
    assert await jobs.apply_retention() == 4  # the 3 succeeded records and the dead one
    assert await jobs.apply_retention_if_due(3600) is not None
    assert await jobs.apply_retention_if_due(3600) is None


async def test_the_lease_bound_follows_a_changed_max_lease(
    jobs_db_url: str, backend_name: str
) -> None:
    """The lease bound (pgmq: a check constraint) follows the policy: a lowered max_lease is
    refused at once, a raised one allows longer leases, and on the table a queue with a
    larger max_lease than another's keeps its own (the bound only calls the function)."""
    undeclared = Jobs(jobs_db_url, QUEUES)
    await undeclared.enqueue_many("inbox", [{"n": n} for n in range(4)])
    await undeclared.enqueue_many("free", [{"n": n} for n in range(2)])
    async with guarded(jobs_db_url, QueuePolicy(lease=5, max_lease=30)) as jobs:
        await jobs.ensure_policies()
    assert len(await undeclared.claim("inbox", lease=25)) == 1
    async with guarded(jobs_db_url, QueuePolicy(lease=5, max_lease=10)) as jobs:
        await jobs.ensure_policies()
    with pytest.raises(DrainpipeError) as lowered:
        await undeclared.claim("inbox", lease=25)
    assert_refused(lowered, "invalid_request", "LEASE_TOO_LONG")
    assert len(await undeclared.claim("inbox", lease=8)) == 1
    # another queue with a larger max_lease: on the table the shared bound is the smaller
    free = Jobs(jobs_db_url, QUEUES, policies={"free": QueuePolicy(lease=5, max_lease=100)})
    async with free:
        await free.ensure_policies()
    assert len(await undeclared.claim("free", lease=90)) == 1
    with pytest.raises(DrainpipeError) as still:
        await undeclared.claim("inbox", lease=25)
    assert_refused(still, "invalid_request", "LEASE_TOO_LONG")
    async with guarded(jobs_db_url, QueuePolicy(lease=5, max_lease=60)) as jobs:
        await jobs.ensure_policies()
    assert len(await undeclared.claim("inbox", lease=50)) == 1
    await undeclared.close()


async def test_sql_refuses_leases_over_max_lease_from_undeclared_writers(
    jobs_db_url: str, backend_name: str
) -> None:
    declared = guarded(jobs_db_url)  # lease 5, max_lease 10
    await declared.ensure_policies()
    undeclared = Jobs(jobs_db_url, QUEUES)
    await undeclared.enqueue("inbox", {"a": 1})
    with pytest.raises(DrainpipeError) as too_long:
        await undeclared.claim("inbox")  # the section 2 default: 300 s
    assert_refused(too_long, "invalid_request", "LEASE_TOO_LONG")
    (job,) = await undeclared.claim("inbox", lease=8)  # nothing was claimed before
    assert job.attempts == 1
    with pytest.raises(DrainpipeError) as extend_too_long:
        await undeclared.extend(job, 60)
    assert_refused(extend_too_long, "invalid_request", "LEASE_TOO_LONG")
    assert await undeclared.extend(job, 9)
    # a failure's backoff is not a lease: a retry far past max_lease is scheduled
    assert await undeclared.fail(job, "later", retry_in=600) == "queued"
    await undeclared.enqueue_many("free", [{"n": 1}])
    assert len(await undeclared.claim("free")) == 1  # other queues keep their leases
    await declared.close()
    await undeclared.close()
