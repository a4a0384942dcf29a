"""The tracer, the instruments and the trace-context propagation drainpipe records with."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from .traced_source import TracedSource

SYSTEM = "drainpipe"
INSTRUMENTATION_NAME = "drainpipe"


class Telemetry:
    """The tracer, the instruments and the trace-context propagation drainpipe uses.

    A provider given as None records nothing (the API's no-op tracer or meter)."""

    def __init__(self, tracer_provider: Any, meter_provider: Any) -> None:
        from opentelemetry import metrics, trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        __version__ = _version()

        self._trace = trace
        self.tracing = tracer_provider is not None
        self.tracer = (tracer_provider or trace.NoOpTracerProvider()).get_tracer(
            INSTRUMENTATION_NAME, __version__
        )
        meter = (meter_provider or metrics.NoOpMeterProvider()).get_meter(
            INSTRUMENTATION_NAME, __version__
        )
        # only traceparent/tracestate: baggage is the application's business, not the job's
        self.propagator = TraceContextTextMapPropagator()
        self.enqueued = meter.create_counter(
            "drainpipe.jobs.enqueued", unit="{job}", description="Jobs enqueued, per queue"
        )
        self.processed = meter.create_counter(
            "drainpipe.jobs.processed",
            unit="{job}",
            description="Jobs whose handler returned and whose completion was recorded",
        )
        self.failed = meter.create_counter(
            "drainpipe.jobs.failed",
            unit="{job}",
            description="Job attempts that failed (the handler raised or asked to retry)",
        )
        self.dead = meter.create_counter(
            "drainpipe.jobs.dead", unit="{job}", description="Jobs that failed their last attempt"
        )
        self.webhooks_processed = meter.create_counter(
            "drainpipe.webhooks.processed", unit="{message}", description="Webhook messages done"
        )
        self.webhooks_failed = meter.create_counter(
            "drainpipe.webhooks.failed",
            unit="{message}",
            description="Webhook message attempts that failed",
        )
        self.handler_duration = meter.create_histogram(
            "drainpipe.handler.duration",
            unit="s",
            description="How long a job or webhook handler ran, per queue (or source) and outcome",
        )
        self.drain_budget_used = meter.create_histogram(
            "drainpipe.drain.budget_used",
            unit="1",
            description="The share of its budget one drain-route call used (1.0: all of it)",
        )
        self._meter = meter

    # -- spans -----------------------------------------------------------------------------

    @contextmanager
    def span(
        self, name: str, attributes: Mapping[str, Any], *, kind: str = "INTERNAL"
    ) -> Iterator[Span]:
        """A span made current for the block; an exception marks it failed and propagates."""
        with self.tracer.start_as_current_span(
            name, kind=getattr(self._trace.SpanKind, kind), attributes=dict(attributes)
        ) as span:
            yield span

    def carrier(self) -> dict[str, str] | None:
        """The current trace context as ``{"traceparent", "tracestate"?}``; None when no
        recording span is current (then nothing is stored with the job)."""
        if not self._trace.get_current_span().get_span_context().is_valid:
            return None
        carrier: dict[str, str] = {}
        self.propagator.inject(carrier)
        return carrier or None

    async def enqueue(self, queue: str, value: Any, send: Callable[[Any], Awaitable[int]]) -> int:
        """Store one job under a ``drainpipe.enqueue`` span whose context goes with the job."""
        from ..context import add_trace

        attributes = {
            "messaging.system": SYSTEM,
            "messaging.destination.name": queue,
            "messaging.operation.type": "send",
            "messaging.operation.name": "enqueue",
        }
        with self.span("drainpipe.enqueue", attributes, kind="PRODUCER") as span:
            carrier = self.carrier()
            job_id = await send(value if carrier is None else add_trace(value, carrier))
            span.set_attribute("messaging.message.id", str(job_id))
        self.enqueued.add(1, {"queue": queue})
        return job_id

    async def enqueue_many(
        self, queue: str, values: list[Any], send: Callable[[list[Any]], Awaitable[list[int]]]
    ) -> list[int]:
        """Store a batch under one ``drainpipe.enqueue`` span; every job carries its context."""
        from ..context import add_trace

        attributes = {
            "messaging.system": SYSTEM,
            "messaging.destination.name": queue,
            "messaging.operation.type": "send",
            "messaging.operation.name": "enqueue_many",
            "messaging.batch.message_count": len(values),
        }
        with self.span("drainpipe.enqueue", attributes, kind="PRODUCER"):
            carrier = self.carrier()
            if carrier is not None:
                values = [add_trace(value, carrier) for value in values]
            ids = await send(values)
        self.enqueued.add(len(ids), {"queue": queue})
        return ids

    def job_parent(self, carrier: Mapping[str, str] | None) -> tuple[Any, Any]:
        """(parent context, links) for a job's run: the enqueuing request's context as the
        parent and a link to the span current now (the claim's drain), when there is one."""
        if not carrier:
            return None, None
        current = self._trace.get_current_span().get_span_context()
        links = [self._trace.Link(current)] if current.is_valid else None
        return self.propagator.extract(carrier), links

    # -- sources -----------------------------------------------------------------------

    def traced(self, source: Any) -> TracedSource:
        # imported when called: the traced source imports this module (SYSTEM, the type)
        from .traced_source import TracedSource

        return TracedSource(source, self)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("drainpipe")
    except PackageNotFoundError:
        return "0"
