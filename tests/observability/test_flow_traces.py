"""Debounced and throttled enqueues (docs/flow-control.md) have the span a plain enqueue has,
on each storage backend: one ``drainpipe.enqueue`` PRODUCER span per call, naming the job it
returned, and the job runs as a child of the span of the enqueue whose payload it carries."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind

import drainpipe
from tests.observability.conftest import Sdk


@pytest.fixture
async def jobs(jobs_db_url: str) -> AsyncIterator[drainpipe.Jobs]:
    jobs = drainpipe.Jobs(jobs_db_url, {"digests": dict})
    yield jobs
    await jobs.close()


def parent_of(job: drainpipe.Job[dict[str, int]]) -> str:
    assert job.context.trace is not None
    return job.context.trace["traceparent"].split("-")[2]


def ids_of(spans: list[ReadableSpan]) -> list[str]:
    return [f"{span.context.span_id:016x}" for span in spans]


def check_send_span(span: ReadableSpan, job_id: int) -> None:
    assert span.kind is SpanKind.PRODUCER
    assert span.attributes is not None
    assert span.attributes["messaging.destination.name"] == "digests"
    assert span.attributes["messaging.operation.name"] == "enqueue"
    assert span.attributes["messaging.message.id"] == str(job_id)


async def test_a_debounced_enqueue_has_the_enqueue_span_and_the_job_the_last_ones_context(
    jobs: drainpipe.Jobs, sdk: Sdk
) -> None:
    first = await jobs.enqueue("digests", {"n": 1}, key="user-7", debounce=0.05)
    second = await jobs.enqueue("digests", {"n": 2}, key="user-7", debounce=0.05)
    assert second == first  # the queued job took the new payload
    spans = sdk.spans("drainpipe.enqueue")
    assert len(spans) == 2
    for span in spans:
        check_send_span(span, first)
    (enqueued,) = sdk.points("drainpipe.jobs.enqueued")
    assert enqueued.value == 2
    claimed: list[drainpipe.Job[dict[str, int]]] = []
    for _ in range(200):  # eligible 50 ms after the last enqueue
        claimed = await jobs.claim("digests")
        if claimed:
            break
        await asyncio.sleep(0.01)
    (job,) = claimed
    assert job.payload == {"n": 2}
    assert parent_of(job) == ids_of(spans)[1]  # the enqueue whose payload it runs


async def test_a_throttled_enqueue_has_the_enqueue_span_naming_the_accepted_job(
    jobs: drainpipe.Jobs, sdk: Sdk
) -> None:
    accepted = await jobs.enqueue("digests", {"n": 1}, key="user-7", throttle=3600)
    again = await jobs.enqueue("digests", {"n": 2}, key="user-7", throttle=3600)
    assert again == accepted
    spans = sdk.spans("drainpipe.enqueue")
    assert len(spans) == 2
    for span in spans:
        check_send_span(span, accepted)
    (job,) = await jobs.claim("digests", batch=5)
    assert job.payload == {"n": 1}
    assert parent_of(job) == ids_of(spans)[0]  # the later call stored nothing
