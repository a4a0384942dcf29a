"""One trace from the HTTP request that enqueues a job to the handler a drain runs it in,
on each storage backend, with the SDK's in-memory exporter; and what is stored when nothing
records."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.trace import SpanKind, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

import drainpipe
from drainpipe import telemetry
from drainpipe.jobs.drain_route import DrainRoute
from tests.observability.conftest import Sdk

SECRET = "drain-secret-0123456789abcdef0123456789abcdef"
PROPAGATOR = TraceContextTextMapPropagator()


class Email(BaseModel):
    to: str


def server_spans(app: ASGIApp, tracer: Tracer) -> ASGIApp:
    """What an ASGI instrumentation does: one SERVER span per request, continuing the
    caller's trace from its ``traceparent`` header (a new trace without one)."""

    async def traced(scope: Scope, receive: Receive, send: Send) -> None:
        headers = {
            key.decode("latin-1"): value.decode("latin-1") for key, value in scope["headers"]
        }
        parent = PROPAGATOR.extract(headers)
        name = f"{scope['method']} {scope['path']}"
        with tracer.start_as_current_span(name, context=parent, kind=SpanKind.SERVER):
            await app(scope, receive, send)

    return traced


def signup_app(jobs: drainpipe.Jobs, tracer: Tracer) -> ASGIApp:
    async def signup(request: Request) -> JSONResponse:
        body = await request.json()
        job_id = await jobs.enqueue("emails", {"to": body["email"]})
        return JSONResponse({"job": job_id}, status_code=202)

    return server_spans(Starlette(routes=[Route("/signup", signup, methods=["POST"])]), tracer)


@pytest.fixture
async def jobs(jobs_db_url: str) -> AsyncIterator[drainpipe.Jobs]:
    jobs = drainpipe.Jobs(jobs_db_url, {"emails": Email})
    yield jobs
    await jobs.close()


async def post(app: ASGIApp, path: str, **kwargs: Any) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
        return await client.post(path, **kwargs)


async def test_a_request_that_enqueues_and_the_drain_that_runs_the_job_form_one_trace(
    jobs: drainpipe.Jobs, sdk: Sdk
) -> None:
    tracer = sdk.tracer_provider.get_tracer("test")
    seen: list[drainpipe.Job[Any]] = []

    async def send_email(payload: Email, job: drainpipe.Job[Any]) -> None:
        seen.append(job)

    # the browser's (or an upstream service's) span, sent along as traceparent
    with tracer.start_as_current_span("client", kind=SpanKind.CLIENT) as client:
        headers: dict[str, str] = {}
        PROPAGATOR.inject(headers)
    answer = await post(
        signup_app(jobs, tracer), "/signup", json={"email": "a@x.io"}, headers=headers
    )
    assert answer.status_code == 202
    job_id = answer.json()["job"]

    # the cron caller hits the drain route later, in a trace of its own
    route = DrainRoute(jobs, secret=SECRET, handlers={"emails": send_email})
    drained = await post(
        server_spans(route, tracer), "/api/drain", headers={"Authorization": f"Bearer {SECRET}"}
    )
    assert drained.status_code == 200
    assert drained.json()["queues"] == {"emails": {"succeeded": 1, "failed": 0}}

    trace_id = client.get_span_context().trace_id
    (request,) = sdk.spans("POST /signup")
    (enqueue,) = sdk.spans("drainpipe.enqueue")
    (run,) = sdk.spans("drainpipe.job")
    (drain,) = sdk.spans("drainpipe.drain")
    (drain_request,) = sdk.spans("POST /api/drain")
    assert request.context.trace_id == enqueue.context.trace_id == run.context.trace_id == trace_id
    assert enqueue.parent is not None and enqueue.parent.span_id == request.context.span_id
    # the job's run is a child of the enqueue span, linked to the drain that ran it
    assert run.parent is not None and run.parent.span_id == enqueue.context.span_id
    assert drain.context.trace_id == drain_request.context.trace_id != trace_id
    assert [link.context.span_id for link in run.links] == [drain.context.span_id]

    assert enqueue.kind is SpanKind.PRODUCER and run.kind is SpanKind.CONSUMER
    assert dict(enqueue.attributes or {}) == {
        "messaging.system": "drainpipe",
        "messaging.destination.name": "emails",
        "messaging.operation.type": "send",
        "messaging.operation.name": "enqueue",
        "messaging.message.id": str(job_id),
    }
    assert dict(run.attributes or {}) == {
        "messaging.system": "drainpipe",
        "messaging.destination.name": "emails",
        "messaging.operation.type": "process",
        "messaging.message.id": str(job_id),
        "drainpipe.attempt": 1,
        "drainpipe.outcome": "succeeded",
    }
    assert run.status.status_code is StatusCode.UNSET
    # the claims and the settlement are children of the drain
    claims = sdk.spans("drainpipe.claim")
    assert [c.attributes["messaging.batch.message_count"] for c in claims][:1] == [1]  # type: ignore[index]
    assert {c.parent.span_id for c in claims if c.parent} == {drain.context.span_id}
    # the batch's completion went with the next (empty) claim: one call, one span
    assert sdk.spans("drainpipe.complete") == []
    (complete,) = sdk.spans("drainpipe.complete_and_claim")
    assert complete.parent is not None and complete.parent.span_id == drain.context.span_id
    assert complete.attributes is not None
    assert complete.attributes["messaging.operation.type"] == "settle"
    assert complete.attributes["messaging.batch.message_count"] == 1
    assert complete.attributes["drainpipe.refused"] == 0
    assert complete.attributes["drainpipe.claimed"] == 0

    # what the handler's job carried: the enqueue span's context
    assert seen[0].payload == Email(to="a@x.io")
    assert seen[0].context.trace is not None
    traceparent = seen[0].context.trace["traceparent"]
    assert traceparent.startswith(f"00-{trace_id:032x}-{enqueue.context.span_id:016x}-")

    # metrics carry the queue label
    (processed,) = sdk.points("drainpipe.jobs.processed")
    assert (dict(processed.attributes), processed.value) == ({"queue": "emails"}, 1)
    (enqueued,) = sdk.points("drainpipe.jobs.enqueued")
    assert (dict(enqueued.attributes), enqueued.value) == ({"queue": "emails"}, 1)
    (duration,) = sdk.points("drainpipe.handler.duration")
    assert dict(duration.attributes) == {"queue": "emails", "outcome": "succeeded"}
    assert duration.count == 1 and 0 <= duration.sum < 5
    (budget,) = sdk.points("drainpipe.drain.budget_used")
    assert budget.count == 1 and 0 < budget.sum < 1
    assert sdk.points("drainpipe.jobs.failed") == []


async def test_a_failing_job_marks_its_span_and_counts_failed_and_dead(
    jobs: drainpipe.Jobs, sdk: Sdk
) -> None:
    # ids are not consecutive: the table storage draws again when a draw was slow
    dies = await jobs.enqueue("emails", {"to": "a@x.io"}, max_attempts=1)
    retried = await jobs.enqueue("emails", {"to": "b@x.io"}, max_attempts=3)

    async def handler(payload: Email, job: drainpipe.Job[Any]) -> None:
        if job.id == retried:
            raise drainpipe.Retry(after=60)
        raise RuntimeError("smtp is down")

    report = await jobs.drain("emails", handler, on_error=lambda error, job: None)
    assert (report.succeeded, report.failed) == (0, 2)

    runs = {span.attributes["messaging.message.id"]: span for span in sdk.spans("drainpipe.job")}  # type: ignore[index]
    failed, retry = runs[str(dies)], runs[str(retried)]
    assert failed.attributes is not None and failed.attributes["drainpipe.outcome"] == "failed"
    assert failed.status.status_code is StatusCode.ERROR
    assert [event.name for event in failed.events] == ["exception"]
    assert retry.attributes is not None and retry.attributes["drainpipe.outcome"] == "retry"
    assert retry.status.status_code is StatusCode.UNSET  # asked for, not an error
    outcomes = sorted(
        str((s.attributes or {}).get("drainpipe.fail.outcome")) for s in sdk.spans("drainpipe.fail")
    )
    assert outcomes == ["dead", "queued"]

    (failures,) = sdk.points("drainpipe.jobs.failed")
    assert (dict(failures.attributes), failures.value) == ({"queue": "emails"}, 2)
    (dead,) = sdk.points("drainpipe.jobs.dead")
    assert (dict(dead.attributes), dead.value) == ({"queue": "emails"}, 1)
    durations = {p.attributes["outcome"]: p.count for p in sdk.points("drainpipe.handler.duration")}
    assert durations == {"failed": 1, "retry": 1}


async def test_nothing_is_recorded_or_stored_without_a_provider(jobs: drainpipe.Jobs) -> None:
    telemetry.configure()  # the API's global providers: none set in this process
    assert telemetry.active() is None
    await jobs.enqueue("emails", {"to": "a@x.io"})
    (job,) = await jobs.claim("emails")
    assert job.context.trace is None and job.payload == {"to": "a@x.io"}


async def test_metrics_alone_store_no_trace_context(jobs: drainpipe.Jobs) -> None:
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    telemetry.configure(meter_provider=meters)
    try:
        await jobs.enqueue("emails", {"to": "a@x.io"})
        (job,) = await jobs.claim("emails")
        assert job.context.trace is None  # the no-op tracer's span is not a context to carry
        data = reader.get_metrics_data()
        assert data is not None
        names = [m.name for r in data.resource_metrics for s in r.scope_metrics for m in s.metrics]
        assert names == ["drainpipe.jobs.enqueued"]
    finally:
        telemetry.configure()
        meters.shutdown()


async def test_a_batch_enqueue_gives_every_job_the_context_of_its_one_span(
    jobs: drainpipe.Jobs, sdk: Sdk
) -> None:
    ids = await jobs.enqueue_many("emails", [{"to": f"{n}@x.io"} for n in range(3)])
    (enqueue,) = sdk.spans("drainpipe.enqueue")
    assert enqueue.attributes is not None
    assert enqueue.attributes["messaging.batch.message_count"] == 3
    claimed = await jobs.claim("emails", batch=3)
    assert sorted(job.id for job in claimed) == ids
    parents = {
        job.context.trace["traceparent"].split("-")[2] for job in claimed if job.context.trace
    }
    assert parents == {f"{enqueue.context.span_id:016x}"}
    assert [job.payload for job in sorted(claimed, key=lambda job: job.id)] == [
        {"to": f"{n}@x.io"} for n in range(3)
    ]
    (enqueued,) = sdk.points("drainpipe.jobs.enqueued")
    assert enqueued.value == 3
