"""Spans of the webhook inbox and of idempotent requests; the queue gauges fed from stats;
and what drainpipe costs when OpenTelemetry is not installed."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from opentelemetry.trace import SpanKind, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from pydantic import BaseModel

import drainpipe
from drainpipe import WebhookInbox, telemetry
from tests.inbox.test_inbox import SECRET, signed
from tests.observability.conftest import Sdk


class Email(BaseModel):
    to: str


@pytest.fixture
async def jobs(jobs_db_url: str) -> AsyncIterator[drainpipe.Jobs]:
    jobs = drainpipe.Jobs(jobs_db_url, {"emails": Email})
    yield jobs
    await jobs.close()


async def test_a_webhook_is_received_and_processed_in_the_senders_trace(
    db_url: str, sdk: Sdk
) -> None:
    inbox = WebhookInbox(db_url, source="billing", secrets=SECRET, keep_headers=("traceparent",))
    tracer = sdk.tracer_provider.get_tracer("test")
    body = json.dumps({"type": "invoice.paid"})
    with tracer.start_as_current_span("sender") as sender:
        headers = signed(body, "msg_7")
        TraceContextTextMapPropagator().inject(headers)
    try:
        transport = httpx.ASGITransport(app=inbox)
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
            answer = await client.post("/", content=body, headers=headers)
            refused = await client.post("/", content=body, headers={"webhook-id": "x"})
        assert (answer.status_code, refused.status_code) == (202, 401)

        async def handler(message: Any) -> None:
            raise ValueError("no such invoice")

        report = await inbox.process(handler, on_error=lambda error, message: None)
        assert report.failed == 1
    finally:
        await inbox.close()

    received = sdk.spans("drainpipe.webhook.receive")
    assert [(s.kind, (s.attributes or {})["http.response.status_code"]) for s in received] == [
        (SpanKind.PRODUCER, 202),
        (SpanKind.PRODUCER, 401),
    ]
    (processed,) = sdk.spans("drainpipe.webhook.process")
    # the sender's traceparent was kept with the message: its run continues that trace
    assert processed.context.trace_id == sender.get_span_context().trace_id
    assert processed.attributes is not None
    assert processed.attributes["drainpipe.webhook.message_id"] == "msg_7"
    assert processed.attributes["messaging.destination.name"] == "billing"
    assert processed.status.status_code is StatusCode.ERROR
    (failed,) = sdk.points("drainpipe.webhooks.failed")
    assert (dict(failed.attributes), failed.value) == ({"source": "billing"}, 1)
    assert len(sdk.spans("drainpipe.webhook.fail")) == 1


async def test_an_idempotent_request_has_a_span(db_url: str, sdk: Sdk) -> None:
    idem = drainpipe.Idempotency(db_url, anonymous=True)
    calls = 0

    async def app(scope: Any, receive: Any, send: Any) -> None:
        async def run() -> Any:
            nonlocal calls
            calls += 1
            return drainpipe.http.json_response({"n": calls}, 201)

        request = drainpipe.http.Request.from_asgi(scope, receive)
        response = await idem.handle(request, run)
        await response(scope, receive, send)

    try:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
            for _ in range(2):
                answer = await client.post("/orders", json={}, headers={"Idempotency-Key": "k1"})
                assert (answer.status_code, answer.json()) == (201, {"n": 1})
    finally:
        await idem.db.close()
    assert len(sdk.spans("drainpipe.idempotency")) == 2


async def test_the_idempotency_middleware_has_a_span(db_url: str, sdk: Sdk) -> None:
    idem = drainpipe.Idempotency(db_url, anonymous=True)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await drainpipe.http.json_response({"ok": True}, 201)(scope, receive, send)

    try:
        transport = httpx.ASGITransport(app=idem.wrap(app))
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
            answer = await client.post("/orders", json={}, headers={"Idempotency-Key": "k2"})
            assert answer.status_code == 201
    finally:
        await idem.db.close()
    (span,) = sdk.spans("drainpipe.idempotency")
    assert span.attributes is not None
    assert span.attributes["drainpipe.idempotency.header"] == "Idempotency-Key"


async def test_queue_gauges_report_depth_and_oldest_age_per_queue(
    jobs: drainpipe.Jobs, sdk: Sdk
) -> None:
    await jobs.enqueue("emails", {"to": "a@x.io"})
    await jobs.enqueue("emails", {"to": "b@x.io"}, delay=600)
    observer = await telemetry.observe_queues(jobs, ["emails"], interval=3600)
    assert observer is not None
    try:
        depth = {p.attributes["state"]: p.value for p in sdk.points("drainpipe.queue.depth")}
        assert depth == {"ready": 1, "in_flight": 0, "delayed": 1, "dead": 0}
        assert {p.attributes["queue"] for p in sdk.points("drainpipe.queue.depth")} == {"emails"}
        (age,) = sdk.points("drainpipe.queue.oldest_age")
        assert dict(age.attributes) == {"queue": "emails"} and 0 <= age.value < 60
        (await jobs.claim("emails"),)
        await observer.refresh()
        depth = {p.attributes["state"]: p.value for p in sdk.points("drainpipe.queue.depth")}
        assert (depth["ready"], depth["in_flight"]) == (0, 1)
    finally:
        await observer.close()
    assert sdk.points("drainpipe.queue.depth") == []


def run_python(code: str) -> str:
    done = subprocess.run(  # noqa: S603
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_importing_drainpipe_imports_no_opentelemetry() -> None:
    out = run_python(
        "import sys, drainpipe, drainpipe.telemetry, drainpipe.jobs.drain_route\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    )
    assert out == "[]"


def test_without_opentelemetry_installed_jobs_run_and_nothing_is_traced() -> None:
    out = run_python(
        "import sys\n"
        "sys.modules['opentelemetry'] = None  # as if the extra were not installed\n"
        "import asyncio, drainpipe\n"
        "from drainpipe import telemetry\n"
        "from drainpipe.testing import MemoryBackend\n"
        "async def main():\n"
        "    jobs = drainpipe.Jobs(MemoryBackend(), {'emails': dict})\n"
        "    await jobs.enqueue('emails', {'to': 'a'})\n"
        "    seen = []\n"
        "    report = await jobs.drain('emails', lambda p, j: seen.append(j.context.trace))\n"
        "    print(telemetry.active(), report.succeeded, seen)\n"
        "asyncio.run(main())"
    )
    assert out == "None 1 [None]"
