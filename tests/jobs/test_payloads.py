"""What a job's payload may hold, and that it comes back as it went in: envelopes,
aliases, validators, values Postgres cannot take, integers beyond 64 bits."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

import drainpipe
from drainpipe import DrainpipeError, Jobs
from drainpipe.backends.postgrest import PostgrestBackend
from tests.conftest import connect
from tests.jobs.postgrest_emulation import BASE, SERVICE_KEY, postgrest_emulation


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


@pytest.fixture(params=["sql", "postgrest"])
async def jobs(request: pytest.FixtureRequest, jobs_db_url: str) -> AsyncIterator[Jobs]:
    """Over a direct connection and over PostgREST (JSON both ways over HTTP)."""
    if request.param == "postgrest":
        async with (
            postgrest_emulation(jobs_db_url),
            PostgrestBackend(BASE, SERVICE_KEY) as backend,
        ):
            yield Jobs(backend, QUEUES)
        return
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
