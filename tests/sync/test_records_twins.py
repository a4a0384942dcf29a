"""Job records (docs/reference.md section 8) on both twins: get, list_jobs with signed cursors,
cancel, the codes a handler picks under ``drain``, and a cancel while a job runs. The
records SQL exists on the table backend so far (as in tests/jobs/test_records.py)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

import drainpipe
from drainpipe import Discard, DrainpipeError, Retry, Skip, sync
from drainpipe.models import Job
from tests.sync.conftest import Twin
from tests.sync.test_jobs_twins import _async_error, _error

QUEUES: dict[str, Any] = {"raw": dict, "other": dict}


@pytest.fixture
def table_url(fresh_database: Any) -> str:
    return str(fresh_database("table"))


async def test_get_list_and_cancel(twin: Twin, table_url: str) -> None:
    jobs = twin.jobs(table_url, QUEUES)
    ids = [await jobs.enqueue("raw", {"n": n}, dedupe_key=f"k{n}") for n in range(3)]
    record = await jobs.get("raw", ids[0])
    assert (record.state, record.attempts, record.dedupe_key, record.history) == (
        "queued",
        0,
        "k0",
        (),
    )
    assert await jobs.get("raw", 10**12) is None
    first = await jobs.list_jobs("raw", limit=2)
    assert [item.id for item in first.items] == ids[:0:-1] and first.next_cursor
    second = await jobs.list_jobs("raw", limit=2, cursor=first.next_cursor)
    assert [item.id for item in second.items] == ids[:1] and second.next_cursor is None
    assert await jobs.cancel("raw", ids[1]) is True
    assert await jobs.cancel("raw", ids[1]) is False
    assert (await jobs.get("raw", ids[1])).last_code == "CANCELLED"
    assert [item.id for item in (await jobs.list_jobs(state="cancelled")).items] == [ids[1]]
    with pytest.raises(DrainpipeError) as caught:
        await jobs.cancel("raw", 10**12)
    assert (caught.value.kind, caught.value.code) == ("not_found", "JOB_NOT_FOUND")


async def test_both_twins_refuse_the_same_record_calls(table_url: str) -> None:
    async_jobs = drainpipe.Jobs(table_url, QUEUES, cursor_secret="a-secret-of-16-bytes")
    sync_jobs = sync.Jobs(table_url, QUEUES, cursor_secret="a-secret-of-16-bytes")
    mistakes: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
        ("get", ("nope", 1), {}),
        ("get", ("raw", -1), {}),
        ("list_jobs", (), {"limit": 0}),
        ("list_jobs", (), {"limit": 501}),
        ("list_jobs", (), {"state": "sleeping"}),
        ("list_jobs", (), {"tenant": ""}),
        ("list_jobs", (), {"cursor": "garbage"}),
        ("list_records", (), {"before": "x"}),
        ("cancel", ("raw", 10**12), {}),
        ("cancel", ("nope", 1), {}),
    ]
    try:
        for name, args, kwargs in mistakes:
            expected = await _async_error(
                lambda n=name, a=args, k=kwargs: getattr(async_jobs, n)(*a, **k)
            )
            got = await asyncio.to_thread(
                _error, lambda n=name, a=args, k=kwargs: getattr(sync_jobs, n)(*a, **k)
            )
            assert got == expected, (name, args, kwargs)
        # a cursor signed by one twin reads in the other (same secret, same filters)
        for n in range(3):
            sync_jobs.enqueue("raw", {"n": n})
        page = sync_jobs.list_jobs("raw", limit=1)
        assert page.next_cursor is not None
        rest = await async_jobs.list_jobs("raw", limit=5, cursor=page.next_cursor)
        assert len(rest.items) == 2
    finally:
        await async_jobs.close()
        sync_jobs.close()


class Coded(Exception):
    code = "UPSTREAM_DOWN"


async def test_handler_codes_under_drain(twin: Twin, table_url: str) -> None:
    jobs = twin.jobs(table_url, QUEUES)
    behaviours = ["skip", "discard", "coded", "retry", "ok"]
    ids = {b: await jobs.enqueue("raw", {"do": b}) for b in behaviours}
    errors: list[BaseException] = []

    def handle(payload: dict[str, str], job: Job[Any]) -> None:
        do = payload["do"]
        if do == "skip":
            raise Skip("NOTHING_TO_DO")
        if do == "discard":
            raise Discard("BAD_INPUT")
        if do == "coded":
            raise Coded("the upstream is down")
        if do == "retry":
            raise Retry(after=600, code="LATER")

    report = await jobs.drain(
        "raw", twin.handler(handle), batch=5, on_error=lambda e, j: errors.append(e)
    )
    assert (report.succeeded, report.failed) == (2, 3)
    assert [type(e) for e in errors] == [Coded]  # Skip, Discard and Retry are no errors
    seen = {}
    for name, job_id in ids.items():
        record = await jobs.get("raw", job_id)
        seen[name] = (record.state, record.last_code, [a.code for a in record.history])
    assert seen["skip"][:2] == ("succeeded", "NOTHING_TO_DO")
    assert seen["discard"][:2] == ("dead", "BAD_INPUT")
    assert seen["coded"][0] == "retry_wait" and seen["coded"][2] == ["UPSTREAM_DOWN"]
    assert seen["retry"][0] == "retry_wait" and seen["retry"][2] == ["LATER"]
    assert seen["ok"][:2] == ("succeeded", None)


async def test_a_job_cancelled_while_it_runs_is_dropped_and_reported(
    twin: Twin, table_url: str
) -> None:
    jobs = twin.jobs(table_url, QUEUES)
    operator = sync.Jobs(table_url, QUEUES)
    try:
        job_id = await jobs.enqueue("raw", {"n": 1})
        errors: list[BaseException] = []
        finished: list[bool] = []

        def handle(payload: Any, job: Job[Any]) -> None:
            assert operator.cancel("raw", job.id) is True
            time.sleep(0.6)  # the heartbeat (every 0.2 s) learns of the cancel meanwhile
            finished.append(True)

        report = await jobs.drain(
            "raw",
            twin.handler(handle),
            lease=30,
            heartbeat_every=0.2,
            on_error=lambda error, job: errors.append(error),
        )
        assert [getattr(e, "code", None) for e in errors] == ["CANCELLED"]
        assert report.succeeded == 0
        record = operator.get("raw", job_id)
        assert record is not None and record.state == "cancelled"
    finally:
        operator.close()
