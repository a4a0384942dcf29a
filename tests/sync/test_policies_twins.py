"""Queue policies and the keyring on both twins, on both storages (real Postgres): the
same policy refuses the same input with the same error, and a payload sealed by one twin
opens in the other (docs/policies.md; the sync calls are generated from the async ones)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

import drainpipe
from drainpipe import DrainpipeError, Keyring, QueuePolicy, Retry, sync
from tests.policies.test_encryption import text_columns_holding
from tests.sync.conftest import InThread, Twin

MARKER = "SYNC-MARKER-51c2e8"
K1 = Keyring.new_entry("k1")
K2 = Keyring.new_entry("k2")


class Email(BaseModel):
    to: str
    subject: str = ""


QUEUES: dict[str, Any] = {"emails": Email, "capped": dict}
POLICIES = {
    "emails": QueuePolicy(encrypt=True),
    "capped": QueuePolicy(max_payload_bytes=64, max_delay=60, max_attempts=2, max_lease=60),
}


def both(url: str, keys: str = K1) -> tuple[Any, Any]:
    """An async and a sync Jobs (the sync one driven in a thread) with the same policies."""
    options: dict[str, Any] = {"policies": POLICIES, "keyring": Keyring.parse(keys)}
    return drainpipe.Jobs(url, QUEUES, **options), InThread(sync.Jobs(url, QUEUES, **options))


async def _refusal(call: Any) -> tuple[str, str | None]:
    with pytest.raises(DrainpipeError) as caught:
        await call
    return caught.value.kind, caught.value.code


async def test_a_policy_refuses_the_same_input_with_the_same_error(
    twin: Twin, jobs_db_url: str
) -> None:
    jobs = twin.jobs(jobs_db_url, QUEUES, policies=POLICIES, keyring=Keyring.parse(K1))
    assert jobs.policies == POLICIES
    big = {"blob": "x" * 100}
    assert await _refusal(jobs.enqueue("capped", big)) == ("validation", "PAYLOAD_TOO_LARGE")
    assert await _refusal(jobs.enqueue_many("capped", [{}, big])) == (
        "validation",
        "PAYLOAD_TOO_LARGE",
    )
    assert await _refusal(jobs.enqueue("capped", {}, delay=3600)) == (
        "validation",
        "SCHEDULE_TOO_FAR",
    )
    assert (await jobs.stats())["capped"].ready == 0  # all or nothing: nothing was stored
    job_id = await jobs.enqueue("capped", {"n": 1}, max_attempts=9)  # capped at the policy's
    assert await _refusal(jobs.claim("capped", lease=600)) == ("invalid_request", "LEASE_TOO_LONG")
    [job] = await jobs.claim("capped")
    assert (job.id, job.max_attempts) == (job_id, 2)
    assert await _refusal(jobs.extend(job, 600)) == ("invalid_request", "LEASE_TOO_LONG")
    assert await jobs.extend(job, 30) is True
    assert await jobs.complete(job) is True


async def test_ensure_policies_makes_the_database_refuse_a_writer_without_them(
    twin: Twin, jobs_db_url: str
) -> None:
    jobs = twin.jobs(jobs_db_url, QUEUES, policies=POLICIES, keyring=Keyring.parse(K1))
    assert await jobs.ensure_policies() == 2
    assert await jobs.ensure_policies() == 2  # idempotent
    bare = twin.jobs(jobs_db_url, QUEUES)  # declares nothing: the stored policy holds
    assert await _refusal(bare.enqueue("capped", {"blob": "x" * 100})) == (
        "validation",
        "PAYLOAD_TOO_LARGE",
    )
    assert isinstance(await jobs.apply_retention_if_due(3600), int)
    assert await jobs.apply_retention_if_due(3600) is None  # ran less than an hour ago
    assert await jobs.apply_retention() == 0  # nothing terminal is older than 30 days


async def test_a_payload_sealed_by_one_twin_opens_in_the_other(jobs_db_url: str) -> None:
    async_jobs, sync_jobs = both(jobs_db_url)
    try:
        from_sync = await sync_jobs.enqueue("emails", {"to": MARKER}, dedupe_key=MARKER)
        from_async = await async_jobs.enqueue("emails", {"to": MARKER, "subject": "a"})
        assert await text_columns_holding(jobs_db_url, MARKER) == []  # sealed, key hashed
        assert await sync_jobs.enqueue("emails", {"to": "x"}, dedupe_key=MARKER) == from_sync
        [job] = await async_jobs.claim("emails")
        assert (job.id, job.payload) == (from_sync, {"to": MARKER, "subject": ""})
        [job] = await sync_jobs.claim("emails")
        assert (job.id, job.payload) == (from_async, {"to": MARKER, "subject": "a"})
        assert isinstance(job, sync.Job)
        assert await sync_jobs.fail(job, "boom") == "queued"
    finally:
        await async_jobs.close()
        await sync_jobs.close()


async def test_sync_drain_opens_sealed_payloads_and_reencrypt_rotates_them(
    jobs_db_url: str,
) -> None:
    async_jobs, sync_jobs = both(jobs_db_url)  # under k1
    rotated = InThread(
        sync.Jobs(jobs_db_url, QUEUES, policies=POLICIES, keyring=Keyring.parse(f"{K2},{K1}"))
    )
    only_new = InThread(
        sync.Jobs(jobs_db_url, QUEUES, policies=POLICIES, keyring=Keyring.parse(K2))
    )
    try:
        ids = await async_jobs.enqueue_many("emails", [{"to": f"{MARKER}-{n}"} for n in range(3)])
        assert await rotated.reencrypt("emails") == 3
        assert await rotated.reencrypt("emails") == 0  # all under the first key already
        assert await _refusal(rotated.reencrypt("capped")) == ("invalid_request", None)
        seen: list[tuple[int, str]] = []
        report = await only_new.drain(
            "emails", lambda email, job: seen.append((job.id, email.to)), budget=20
        )
        assert report.succeeded == 3
        assert sorted(seen) == [(i, f"{MARKER}-{n}") for n, i in enumerate(ids)]
        # a job sealed under a key the sync drain lacks ends dead, never handed out
        lost = await sync_jobs.enqueue("emails", {"to": MARKER})
        report = await only_new.drain("emails", lambda email, job: None, budget=20)
        assert report.succeeded == 0
        record = await async_jobs.get("emails", lost)
        assert record is not None and record.state == "dead"
        assert record.history[-1].code == "PAYLOAD_UNREADABLE"
    finally:
        for jobs in (async_jobs, sync_jobs, rotated, only_new):
            result = jobs.close()
            if asyncio.iscoroutine(result):
                await result


async def test_a_drain_ends_a_job_whose_retry_would_start_after_its_attempt_window(
    twin: Twin, jobs_db_url: str
) -> None:
    windowed = {"capped": QueuePolicy(attempt_window=5)}
    jobs = twin.jobs(jobs_db_url, QUEUES, policies=windowed)
    job_id = await jobs.enqueue("capped", {"n": 1})

    def slow_retry(payload: Any, job: Any) -> None:
        raise Retry(after=30)  # asks for a retry after the 5 s window

    report = await jobs.drain("capped", twin.handler(slow_retry), budget=20)
    assert report.failed == 1
    record = await jobs.get("capped", job_id)
    assert record is not None and (record.state, record.last_code) == ("dead", "DEADLINE_PASSED")
