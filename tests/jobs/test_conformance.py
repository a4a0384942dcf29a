"""The conformance kit passes on every real backend and reports precisely on broken ones."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, ClassVar

import pytest

from drainpipe.backends.memory import Clock, MemoryBackend
from drainpipe.backends.pgmq_public import PgmqPublicBackend
from drainpipe.backends.postgrest import PostgrestBackend
from drainpipe.backends.sql import SqlQueueBackend
from drainpipe.models import FailOutcome, Job
from drainpipe.testing import ConformanceError, ConformanceReport, check_queue_backend
from tests.jobs.postgrest_emulation import postgrest_emulation
from tests.jobs.test_pgmq_public import BASE, SERVICE_KEY, postgrest

ALL_CHECKS = [
    "name",
    "api_version",
    "round_trip",
    "lease_hides_message",
    "stale_completion",
    "fail_then_dead",
    "dedupe",
]
RECORD_CHECKS = ["records_states", "records_cancel", "records_replay", "records_list"]


def _names(report: ConformanceReport) -> list[str]:
    return [check.name for check in report.checks]


async def test_sql_backend_conforms(jobs_db_url: str) -> None:
    backend = SqlQueueBackend(jobs_db_url)
    try:
        report = await check_queue_backend(backend, queue="conformance")
    finally:
        await backend.db.close()
    assert report.ok and _names(report) == [*ALL_CHECKS, *RECORD_CHECKS]
    assert not any(check.skipped for check in report.checks)
    assert report.subject == 'QueueBackend "sql"'


async def test_pgmq_public_backend_conforms(db_url: str) -> None:
    async with (
        postgrest(db_url, queues=("conformance",)) as (server, _),
        PgmqPublicBackend.from_url(BASE, SERVICE_KEY) as backend,
    ):
        report = await check_queue_backend(backend, queue="conformance")
    assert report.ok and _names(report) == [*ALL_CHECKS, "records"]
    skipped = {check.name for check in report.checks if check.skipped}
    assert skipped == {
        "stale_completion",
        "dedupe",
        "records",
    }  # no leases to fence, no dedupe keys
    assert {fn for fn, _ in server.calls()} == {"send", "read", "archive"}


async def test_postgrest_backend_conforms_with_every_check(jobs_db_url: str) -> None:
    # drainpipe's own functions over PostgREST: fenced, deduped, nothing skipped
    async with (
        postgrest_emulation(jobs_db_url) as (server, _),
        PostgrestBackend(BASE, SERVICE_KEY) as backend,
    ):
        report = await check_queue_backend(backend, queue="conformance")
    assert report.ok and _names(report) == [*ALL_CHECKS, *RECORD_CHECKS]
    assert not any(check.skipped for check in report.checks)
    assert report.subject == 'QueueBackend "postgrest"'
    called = {fn for fn, _ in server.calls()}
    # drainpipe_api's fenced functions for the jobs, its records functions for the records
    assert {"enqueue_v1", "claim_v1", "complete_v1", "fail_v1", "extend_v1"} <= called
    assert called <= {
        "enqueue_v1", "claim_v1", "complete_v1", "fail_v1", "extend_v1",
        "get_job_v1", "list_jobs_v2", "cancel_v1", "replay_v3",
    }  # fmt: skip


async def test_memory_backend_conforms_and_gets_the_moved_time_checks() -> None:
    clock = Clock()
    report = await check_queue_backend(MemoryBackend(now=clock), queue="conformance")
    assert report.ok and _names(report) == [*ALL_CHECKS, "lease_expiry", "delay", *RECORD_CHECKS]
    assert not any(check.skipped for check in report.checks)
    assert report.subject == 'QueueBackend "memory"'


class LeaseForever(MemoryBackend):
    """Leases never run out and delays are ignored: what a stuck clock would look like."""

    name = "stuck"

    async def send(self, queue: str, payload: Any, **options: Any) -> int:
        return await super().send(queue, payload, **{**options, "delay": 0})

    def advance_time(self, seconds: float | timedelta) -> datetime:
        return self.now()


async def test_the_moved_time_checks_catch_a_backend_whose_time_stands_still() -> None:
    with pytest.raises(ConformanceError) as caught:
        await check_queue_backend(LeaseForever(), queue="conformance")
    failures = {check.name: check.message for check in caught.value.failures}
    assert set(failures) == {"lease_expiry", "delay"}
    assert failures["lease_expiry"].startswith(
        "after the 30 s lease ran out a read returned ids []; expected ["
    )
    assert failures["delay"].startswith("a read before the 60 s delay ended returned ids [")


class UnfencedComplete(SqlQueueBackend):
    """Completes whatever attempt it is handed: pgmq's archive without the fence."""

    name = "unfenced"

    async def complete(self, job: Job[Any]) -> bool:
        return bool(
            await self.db.fetchval("SELECT pgmq.archive(%s, %s::bigint)", (job.queue, job.id))
        )


async def test_a_missing_fence_is_reported_precisely(db_url: str) -> None:
    backend = UnfencedComplete(db_url)
    try:
        with pytest.raises(ConformanceError) as caught:
            await check_queue_backend(backend, queue="conformance")
    finally:
        await backend.db.close()
    error = caught.value
    # pgmq.archive moves whatever it is handed: no fence, and no late_outcome after a cancel
    assert [check.name for check in error.failures] == ["stale_completion", "records_cancel"]
    assert "late_outcome=None" in str(error.failures[1].message)
    assert error.failures[0].message == (
        "complete() with a stale attempt (2, held: 1) returned True; expected False; "
        "extend(job, 60) returned False; expected True; "
        "complete() with the held attempt returned False; expected True"
    )
    assert str(error).startswith('QueueBackend "unfenced" failed 2 of 11 conformance checks:\n')
    assert "- stale_completion: complete() with a stale attempt" in str(error)
    # every other check still ran and passed
    assert [c.name for c in error.report.checks if c.ok] == [
        n for n in [*ALL_CHECKS, *RECORD_CHECKS] if n not in ("stale_completion", "records_cancel")
    ]


class Careless(SqlQueueBackend):
    """Several faults at once: no name, the wrong api_version, a fail that never gives up."""

    name = ""
    api_version: ClassVar[int] = 2

    async def fail(
        self, job: Job[Any], error: str, retry_in: float | None = None
    ) -> FailOutcome | None:
        if job.attempts < job.max_attempts:
            return await super().fail(job, error, retry_in)
        return "queued"


class Exploding(SqlQueueBackend):
    name = "exploding"

    async def send(self, queue: str, payload: Any, **options: Any) -> int:
        if options.get("dedupe_key"):
            raise RuntimeError("no dedupe here")
        return await super().send(queue, payload, **options)


async def test_every_failure_is_listed(db_url: str) -> None:
    backend = Careless(db_url)
    try:
        with pytest.raises(ConformanceError) as caught:
            await check_queue_backend(backend, queue="conformance")
    finally:
        await backend.db.close()
    failures = {check.name: check.message for check in caught.value.failures}
    # (a fail that never gives up cannot make the dead job records_replay needs either)
    assert set(failures) == {"name", "api_version", "fail_then_dead", "records_replay"}
    assert failures["name"] == "name is ''; expected a non-empty string"
    assert failures["api_version"] == "api_version is 2; expected 1"
    assert failures["fail_then_dead"] == (
        "fail() on attempt 2 of 2 returned 'queued'; expected \"dead\""
    )


async def test_an_exception_fails_only_its_check(db_url: str) -> None:
    backend = Exploding(db_url)
    try:
        with pytest.raises(ConformanceError) as caught:
            await check_queue_backend(backend, queue="conformance")
    finally:
        await backend.db.close()
    [failure] = caught.value.failures
    assert (failure.name, failure.message) == ("dedupe", "raised RuntimeError: no dedupe here")


async def test_dedupe_can_be_skipped(db_url: str) -> None:
    backend = Exploding(db_url)
    try:
        report = await check_queue_backend(backend, queue="conformance", dedupe=False)
    finally:
        await backend.db.close()
    assert report.ok
    assert [c.name for c in report.checks if c.skipped] == ["dedupe"]
    assert "- dedupe: skipped" in str(report)
