"""Durable steps under OpenTelemetry: one span per step that runs (replays run none), each
a child of its run's span, every run of the job in the trace its enqueue started; a
suspended run is an outcome of its own, not an error."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
from opentelemetry.trace import StatusCode

import drainpipe
from tests.conftest import connect
from tests.observability.conftest import Sdk


@pytest.fixture
async def jobs(jobs_db_url: str) -> AsyncIterator[drainpipe.Jobs]:
    jobs = drainpipe.Jobs(jobs_db_url, {"flows": dict[str, Any]})
    yield jobs
    await jobs.close()


async def test_one_span_per_step_and_one_trace_across_resumptions(
    jobs: drainpipe.Jobs, sdk: Sdk, jobs_db_url: str, backend_name: str
) -> None:
    tracer = sdk.tracer_provider.get_tracer("test")

    async def handler(payload: Any, job: drainpipe.Job[Any]) -> None:
        await job.step("first", lambda: 1)
        await job.sleep(timedelta(hours=1))
        await job.step("second", lambda: 2)

    with tracer.start_as_current_span("request"):
        job_id = await jobs.enqueue("flows", {})
    report = await jobs.drain("flows", handler)
    assert report.suspended == 1
    async with await connect(jobs_db_url) as conn:  # the hour passes for this job
        if backend_name == "pgmq":
            await conn.execute("UPDATE pgmq.q_flows SET vt = vt - interval '1 hour'")
        else:
            await conn.execute(
                "UPDATE drainpipe.job_messages SET visible_at = visible_at - interval '1 hour'"
                " WHERE id = %s",
                (job_id,),
            )
    assert (await jobs.drain("flows", handler)).succeeded == 1

    steps = sdk.spans("drainpipe.step")
    assert [(s.attributes or {}).get("drainpipe.step.name") for s in steps] == ["first", "second"]
    runs = sdk.spans("drainpipe.job")
    assert [(s.attributes or {}).get("drainpipe.outcome") for s in runs] == [
        "suspended",
        "succeeded",
    ]
    assert runs[0].status.status_code is StatusCode.UNSET  # a suspension is not an error
    (request,) = sdk.spans("request")
    trace_id = request.context.trace_id
    assert {s.context.trace_id for s in [*steps, *runs]} == {trace_id}
    assert steps[0].parent is not None and steps[0].parent.span_id == runs[0].context.span_id
    assert steps[1].parent is not None and steps[1].parent.span_id == runs[1].context.span_id
