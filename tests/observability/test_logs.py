"""Structured logs: one logger per concept, a child of ``drainpipe``, with stable extras."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import BaseModel

import drainpipe
from drainpipe import WebhookInbox


class Email(BaseModel):
    to: str


@pytest.fixture
async def jobs(jobs_db_url: str) -> AsyncIterator[drainpipe.Jobs]:
    jobs = drainpipe.Jobs(jobs_db_url, {"emails": Email})
    yield jobs
    await jobs.close()


async def test_a_failed_job_is_logged_on_drainpipe_jobs_with_its_queue_id_and_attempt(
    jobs: drainpipe.Jobs, caplog: pytest.LogCaptureFixture
) -> None:
    job_id = await jobs.enqueue("emails", {"to": "a@x.io"})

    async def handler(payload: Email, job: drainpipe.Job[Any]) -> None:
        raise RuntimeError("smtp is down")

    with caplog.at_level(logging.ERROR, logger="drainpipe"):
        await jobs.drain("emails", handler)
    (record,) = [r for r in caplog.records if r.name.startswith("drainpipe")]
    assert record.name == "drainpipe.jobs"
    assert logging.getLogger("drainpipe.jobs").parent is logging.getLogger("drainpipe")
    fields = {name: getattr(record, name) for name in ("queue", "job_id", "attempt", "code")}
    assert fields == {"queue": "emails", "job_id": job_id, "attempt": 1, "code": None}
    assert "smtp is down" in record.getMessage()


async def test_a_lost_lease_is_logged_with_its_code(
    jobs: drainpipe.Jobs, caplog: pytest.LogCaptureFixture
) -> None:
    job_id = await jobs.enqueue("emails", {"to": "a@x.io"})

    async def handler(payload: Email, job: drainpipe.Job[Any]) -> None:
        # another worker takes the job over once this lease ran out
        await asyncio.sleep(0.4)
        (taken,) = await jobs.claim("emails", lease=30)
        assert taken.id == job.id
        await asyncio.sleep(0.4)  # the heartbeat finds the lease gone and cancels us

    with caplog.at_level(logging.WARNING, logger="drainpipe"):
        await jobs.drain("emails", handler, lease=0.3, heartbeat_every=0.5)
    records = [r for r in caplog.records if getattr(r, "code", None) == "LEASE_LOST"]
    assert [(r.name, r.levelno, r.queue, r.job_id, r.attempt) for r in records] == [  # type: ignore[attr-defined]
        ("drainpipe.jobs", logging.WARNING, "emails", job_id, 1)
    ]


async def test_a_failed_webhook_is_logged_on_drainpipe_inbox_with_source_and_message_id(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    inbox = WebhookInbox(
        db_url, source="billing", secrets="whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    )
    try:
        await inbox.store(id="msg_1", payload={"type": "invoice.paid"})

        async def handler(message: Any) -> None:
            raise ValueError("no such invoice")

        with caplog.at_level(logging.ERROR, logger="drainpipe"):
            await inbox.process(handler)
    finally:
        await inbox.close()
    (record,) = [r for r in caplog.records if r.name.startswith("drainpipe")]
    assert record.name == "drainpipe.inbox"
    fields = {name: getattr(record, name) for name in ("source", "message_id", "attempt", "code")}
    assert fields == {"source": "billing", "message_id": "msg_1", "attempt": 1, "code": None}


async def test_the_drain_route_logs_on_drainpipe_drain(caplog: pytest.LogCaptureFixture) -> None:
    jobs = drainpipe.Jobs(
        "postgresql://postgres@127.0.0.1:1/nowhere?connect_timeout=2", {"emails": Email}
    )
    route = drainpipe.DrainRoute(
        jobs, secret="s-0123456789abcdef0123456789abcdef", handlers={"emails": lambda p, j: None}
    )
    try:
        with caplog.at_level(logging.ERROR, logger="drainpipe"), pytest.raises(Exception):  # noqa: B017, PT011
            await route.run()
    finally:
        await jobs.close()
    assert {r.name for r in caplog.records if r.name.startswith("drainpipe")} == {"drainpipe.drain"}
