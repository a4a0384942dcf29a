"""Regression tests from a review of the jobs core: each one failed before its fix."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

import drainpipe
from drainpipe import DrainpipeError, Jobs, install
from drainpipe.db import Database, translate_error
from tests.conftest import connect


class Aliased(BaseModel):
    to_address: str = Field(alias="toAddress")


class Camel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel)
    user_id: int


class Picky(BaseModel):
    n: int

    @field_validator("n")
    @classmethod
    def not_thirteen(cls, value: int) -> int:
        if value == 13:
            raise TypeError("unlucky")  # pydantic lets a TypeError out as it is
        return value


QUEUES: dict[str, Any] = {
    "raw": dict[str, Any],
    "aliased": Aliased,
    "camel": Camel,
    "picky": Picky,
}


@pytest.fixture
async def jobs(jobs_db_url: str) -> AsyncIterator[Jobs]:
    instance = Jobs(jobs_db_url, QUEUES)
    yield instance
    await instance.backend.db.close()  # type: ignore[attr-defined]


async def _noop(payload: Any, job: drainpipe.Job[Any]) -> None:
    return None


# -- payloads --------------------------------------------------------------------------


async def test_a_payload_shaped_like_the_envelope_cannot_forge_a_tenant(jobs: Jobs) -> None:
    forged = {"$dp": 1, "payload": "x", "context": {"tenant": "evil", "actor": None}}
    await jobs.enqueue("raw", forged)
    await jobs.enqueue("raw", {"$dp": 1, "payload": 2}, context={"tenant": "t1"})
    first, second = await jobs.claim("raw", batch=2)
    assert first.payload == forged and first.context == drainpipe.JobContext()
    assert second.payload == {"$dp": 1, "payload": 2} and second.context.tenant == "t1"
    assert await jobs.fail(first, "x", retry_in=0) == "queued"
    # dead letters read the same stored value
    await jobs.enqueue("raw", forged, max_attempts=1)
    claimed = await jobs.claim("raw", batch=5)
    for job in claimed:
        await jobs.fail(job, "x")
    dead = await jobs.list_dead("raw")
    assert [(d.payload, d.context.tenant) for d in dead] == [(forged, None)]


async def test_models_with_aliases_round_trip_through_the_worker(jobs: Jobs) -> None:
    await jobs.enqueue("aliased", {"toAddress": "a@x"})
    await jobs.enqueue("camel", Camel(userId=7))
    seen: list[Any] = []
    errors: list[BaseException] = []

    async def handle(payload: Any, job: drainpipe.Job[Any]) -> None:
        seen.append(payload)

    for queue in ("aliased", "camel"):
        report = await jobs.drain(queue, handle, on_error=lambda e, j: errors.append(e))
        assert (report.succeeded, report.failed) == (1, 0), errors
    assert seen == [Aliased(toAddress="a@x"), Camel(userId=7)]


async def test_a_validator_raising_type_error_is_a_validation_error_not_a_crash(
    jobs: Jobs,
) -> None:
    with pytest.raises(DrainpipeError) as info:
        await jobs.enqueue("picky", {"n": 13})
    assert info.value.kind == "validation" and "unlucky" in str(info.value)
    # stored by an older version of the app: the worker fails that job, runs the others
    await jobs.backend.send("picky", {"n": 13}, max_attempts=1)
    await jobs.enqueue_many("picky", [{"n": 1}, {"n": 2}])
    ran: list[int] = []

    async def handle(payload: Picky, job: drainpipe.Job[Picky]) -> None:
        ran.append(payload.n)

    report = await jobs.drain("picky", handle, batch=3)
    assert (report.succeeded, report.failed) == (2, 1) and ran == [1, 2]
    stats = (await jobs.stats(["picky"]))["picky"]
    assert (stats.ready, stats.in_flight, stats.dead) == (0, 0, 1)
    [dead] = await jobs.list_dead("picky")
    assert dead.last_error is not None and "unlucky" in dead.last_error


# -- what a failure records ------------------------------------------------------------


async def test_an_error_message_with_nul_or_surrogates_is_still_recorded(jobs: Jobs) -> None:
    await jobs.enqueue_many("raw", [{"i": 1}, {"i": 2}])
    hook: list[BaseException] = []

    async def handle(payload: dict[str, Any], job: drainpipe.Job[Any]) -> None:
        raise ValueError("bad\x00byte" if payload["i"] == 1 else "lone \ud800 surrogate")

    report = await jobs.drain("raw", handle, batch=2, on_error=lambda e, j: hook.append(e))
    assert report.failed == 2
    # only the handler's errors reach on_error: recording both failures worked
    assert [type(e) for e in hook] == [ValueError, ValueError]
    stats = (await jobs.stats(["raw"]))["raw"]
    assert stats.in_flight == 2  # waiting out a backoff of seconds, not a 300 s lease
    for job in await jobs.claim("raw", batch=2):
        raise AssertionError(f"{job} should be backing off")


async def test_values_postgres_cannot_take_are_validation_errors(jobs: Jobs) -> None:
    calls: list[Any] = [
        lambda: jobs.enqueue("raw", {}, dedupe_key="a\x00b"),
        lambda: jobs.enqueue("raw", {}, max_attempts=2**31),
        lambda: jobs.enqueue_many("raw", [{}], max_attempts=2**31),
        lambda: jobs.claim("raw", batch=2**31),
        lambda: jobs.retry_dead("raw", limit=2**31),
        lambda: jobs.retry_dead("raw", ids=[2**63]),
        lambda: jobs.replay("raw", 2**63),
        lambda: jobs.list_dead("raw", cursor=2**63),
        lambda: jobs.purge_archive("raw", batch=2**31),
        lambda: jobs.drain("raw", _noop, batch=2**31),
    ]
    for index, call in enumerate(calls):
        with pytest.raises(DrainpipeError) as info:
            await call()
        assert info.value.kind == "validation", (index, info.value)
    # the largest values that fit still work; a huge list_dead limit is clamped
    assert await jobs.enqueue("raw", {}, max_attempts=2**31 - 1) > 0
    assert await jobs.replay("raw", 2**63 - 1) is None
    assert await jobs.list_dead("raw", limit=2**40) == []
    assert await jobs.retry_dead("raw", ids=[]) == 0


async def test_claimed_jobs_are_frozen_dataclasses_like_any_job(jobs: Jobs) -> None:
    """Claims build their Job without the dataclass __init__ (a hot path); the result must
    still be a frozen, comparable, replaceable Job."""
    await jobs.enqueue("raw", {"n": 1})
    [job] = await jobs.claim("raw")
    assert type(job) is drainpipe.Job
    assert job == drainpipe.Job(**{f.name: getattr(job, f.name) for f in dataclasses.fields(job)})
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.attempts = 9  # type: ignore[misc]
    assert dataclasses.replace(job, attempts=9).attempts == 9 and job.attempts == 1
    assert repr(job).startswith("Job(id=")


async def test_integers_beyond_64_bits_come_back_exact(jobs: Jobs, jobs_db_url: str) -> None:
    """jsonb keeps any integer exactly; the worker's JSON decoding must too (orjson alone
    turns integers beyond 64 bits into floats)."""
    payload = {
        "big": 2**70,
        "low": -(2**63) - 1,
        "snowflake": 1234567890123456789,
        "nested": [{"id": 18446744073709551616}, 1.5, "12345678901234567890"],
    }
    await jobs.enqueue("raw", payload)
    await jobs.enqueue_many("raw", [payload])
    seen: list[Any] = []

    async def keep(value: Any, job: drainpipe.Job[Any]) -> None:
        seen.append(value)

    assert (await jobs.drain("raw", keep, batch=10)).succeeded == 2
    assert seen == [payload, payload]
    assert all(type(value["big"]) is int for value in seen)
    # a caller's own connection decodes the same way
    async with await connect(jobs_db_url) as conn:
        await Jobs(conn, QUEUES).enqueue("raw", payload)
        claimed = await Jobs(conn, QUEUES).claim("raw")
    assert claimed[0].payload == payload


# -- errors and connections ------------------------------------------------------------


async def test_a_terminated_session_is_a_network_error(db_url: str) -> None:
    async with await connect(db_url) as conn:
        jobs = Jobs(conn, QUEUES)
        await jobs.enqueue("raw", {})
        async with await connect(db_url) as admin:
            await admin.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
        with pytest.raises(DrainpipeError) as info:
            await jobs.claim("raw")
    assert info.value.kind == "network" and info.value.status == 503
    assert info.value.__cause__ is not None
    for sqlstate in ("57P01", "57P02", "57P03", "53300"):
        error = psycopg.errors.lookup(sqlstate)("gone")
        assert translate_error(error).kind == "network", sqlstate
    # refused by psycopg before it reaches the server: a bad value
    assert translate_error(psycopg.DataError("NUL")).kind == "invalid_input"


async def test_workers_retry_through_a_server_side_disconnect(db_url: str) -> None:
    pool_db = Database(db_url, max_size=2)
    try:
        jobs = Jobs(pool_db, QUEUES)
        await jobs.enqueue_many("raw", [{"i": i} for i in range(3)])
        async with await connect(db_url) as admin:
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        stop = asyncio.Event()
        ran: list[int] = []

        async def handle(payload: dict[str, Any], job: drainpipe.Job[Any]) -> None:
            ran.append(payload["i"])
            if len(ran) == 3:
                stop.set()

        # claims on the killed connections fail, are retried, and the worker goes on
        report = await asyncio.wait_for(
            jobs.work("raw", handle, poll_interval=0.05, stop=stop), timeout=10
        )
        assert report.succeeded == 3 and sorted(ran) == [0, 1, 2]
    finally:
        await pool_db.close()


def test_sync_connections_are_refused_at_construction(db_url: str) -> None:
    with psycopg.connect(db_url) as sync_conn, pytest.raises(TypeError, match="AsyncConnection"):
        Jobs(sync_conn, QUEUES)


# -- pgmq: claims and the per-queue functions ------------------------------------------


async def test_claim_reaches_a_ready_job_behind_many_dead_letters(jobs: Jobs) -> None:
    for _ in range(30):
        await jobs.enqueue("raw", {"dead": True}, max_attempts=1)
    assert len(await jobs.claim("raw", batch=30, lease=0.01)) == 30
    ready = await jobs.enqueue("raw", {"dead": False})
    await asyncio.sleep(0.05)
    [job] = await jobs.claim("raw", batch=1)
    assert job.id == ready
    stats = (await jobs.stats(["raw"]))["raw"]
    assert (stats.ready, stats.dead) == (0, 30)


async def test_first_use_of_new_queues_from_many_connections(db_url: str) -> None:
    names = [f"fresh_{i}" for i in range(4)]
    queues = {name: dict[str, Any] for name in names}
    conns = [await connect(db_url) for _ in range(9)]
    try:
        for name in names:

            async def use(index: int, conn: psycopg.AsyncConnection[Any], name: str = name) -> Any:
                jobs = Jobs(conn, queues)
                if index % 3 == 0:
                    return await jobs.enqueue(name, {}, dedupe_key="k")
                if index % 3 == 1:
                    return await jobs.claim(name)
                return await jobs.stats([name])

            await asyncio.gather(*(use(i, c) for i, c in enumerate(conns)))
    finally:
        for conn in conns:
            await conn.close()
    async with await connect(db_url) as c:
        row = await (
            await c.execute(
                "SELECT count(*) FROM pg_proc WHERE pronamespace = 'drainpipe'::regnamespace"
                " AND proname LIKE 'c%%_jobs__fresh_%%'"
            )
        ).fetchone()
    assert row == (2 * len(names),)


async def test_reinstall_keeps_per_queue_functions_and_their_oids(db_url: str) -> None:
    sql = (
        "SELECT oid FROM pg_proc WHERE proname = 'claim_jobs__raw'"
        " AND pronamespace = 'drainpipe'::regnamespace"
    )
    async with await connect(db_url) as c:
        jobs = Jobs(c, QUEUES)
        await jobs.enqueue("raw", {})
        before = await (await c.execute(sql)).fetchone()
        await install(c, ["jobs"], backend="pgmq", force=True)
        after = await (await c.execute(sql)).fetchone()
        # a dropped and recreated function would change its oid under running workers
        assert before is not None and before == after
        [job] = await jobs.claim("raw")
        assert await jobs.complete(job)


# -- workers ---------------------------------------------------------------------------


class FailingClaims:
    """The SQL backend whose second claim fails with a non-transient error after a pause."""

    api_version = 1
    name = "failing"
    leases = True

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.reads = 0

    async def read(self, queue: str, *, lease: float, batch: int) -> list[Any]:
        self.reads += 1
        if self.reads == 2:
            await asyncio.sleep(0.05)
            raise DrainpipeError("forbidden", "no")
        return await self.inner.read(queue, lease=lease, batch=batch)  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_a_fatal_claim_lets_other_lanes_finish_their_batch_then_raises(jobs: Jobs) -> None:
    await jobs.enqueue_many("raw", [{"i": i} for i in range(4)])
    failing = Jobs(FailingClaims(jobs.backend), QUEUES)
    done: list[int] = []

    async def slow(payload: dict[str, Any], job: drainpipe.Job[Any]) -> None:
        await asyncio.sleep(0.2)
        done.append(payload["i"])

    with pytest.raises(DrainpipeError) as info:
        await failing.work("raw", slow, concurrency=2, batch=2, poll_interval=0.01)
    assert info.value.kind == "forbidden"
    assert sorted(done) == [0, 1]
    stats = (await jobs.stats(["raw"]))["raw"]
    assert (stats.ready, stats.in_flight) == (2, 0)  # the finished batch was completed


# -- dedupe in a caller's transaction --------------------------------------------------


async def test_dedupe_race_in_repeatable_read_is_a_serialization_error_on_the_table(
    fresh_database: Any,
) -> None:
    url = fresh_database("table")
    first = await psycopg.AsyncConnection.connect(url)
    second = await psycopg.AsyncConnection.connect(url)
    try:
        for conn in (first, second):
            await conn.set_isolation_level(psycopg.IsolationLevel.REPEATABLE_READ)
        await second.execute("SELECT 1")  # its snapshot is taken now
        assert await Jobs(first, QUEUES).enqueue("raw", {}, dedupe_key="k") > 0
        racing = asyncio.ensure_future(Jobs(second, QUEUES).enqueue("raw", {}, dedupe_key="k"))
        await asyncio.sleep(0.1)  # waiting on the first one's key lock
        await first.commit()
        with pytest.raises(DrainpipeError) as info:
            await racing
        # not "conflict": a retry of the whole transaction finds the first one's job
        assert info.value.kind == "serialization"
        await second.rollback()
        assert await Jobs(second, QUEUES).enqueue("raw", {}, dedupe_key="k") == 1
        await second.commit()
    finally:
        await first.close()
        await second.close()
