"""OpenTelemetry traces and metrics for drainpipe, all in one module (``docs/observability.md``).

Nothing here imports ``opentelemetry`` until a hook asks for it, and :func:`active` answers
``None`` (so every hook is skipped by one ``if``) when the API is not installed, when
telemetry was switched off with :func:`configure`, or when neither a tracer provider nor a
meter provider was set (the API alone records nothing). Workers ask once per ``work`` /
``drain`` call and wrap their source in :class:`TracedSource` only when the answer is not
``None``, so the per-job path without an SDK is the plain one.

The trace context travels inside the stored job (the ``trace`` member of the payload
envelope, :mod:`drainpipe.context`): the span that runs a job is a *child* of the
``drainpipe.enqueue`` span of the request that enqueued it (one trace from the HTTP request
to the handler), and carries a *link* to the claim/drain that picked it up.
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import logging
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from .codes import Suspend
from .errors import Retry
from .validation import error_text

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import Span, TracerProvider

    from .jobs import Jobs

__all__ = [
    "QueueObserver",
    "Telemetry",
    "TracedSource",
    "active",
    "active_telemetry",
    "configure",
    "observe_queues",
]

SYSTEM = "drainpipe"
INSTRUMENTATION_NAME = "drainpipe"

log = logging.getLogger("drainpipe.telemetry")

_installed: bool | None = None  # is opentelemetry importable? found out on first use, once
_enabled = True
_tracer_provider: Any = None  # set by configure(); None: the API's global provider
_meter_provider: Any = None
_cached: tuple[Any, Any, Telemetry] | None = None


def configure(
    *,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
    enabled: bool = True,
) -> None:
    """Use these providers instead of the API's global ones (None: the global one), or
    switch drainpipe's telemetry off entirely (``enabled=False``). Running workers keep
    what they chose when they started."""
    global _enabled, _tracer_provider, _meter_provider, _cached
    _enabled = enabled
    _tracer_provider = tracer_provider
    _meter_provider = meter_provider
    _cached = None


def active() -> Telemetry | None:
    """The telemetry to record with, or None when there is nothing to record to."""
    global _installed, _cached
    if not _enabled:
        return None
    if "opentelemetry.trace" not in sys.modules and "opentelemetry.metrics" not in sys.modules:
        # the application never loaded OpenTelemetry, so no provider can be set: nothing to
        # record, and the first enqueue of a function does not import the API for nothing
        return None
    if _installed is None:
        _installed = importlib.util.find_spec("opentelemetry") is not None and _api_importable()
    if not _installed:
        return None
    tracer_provider, meter_provider = _providers()
    if tracer_provider is None and meter_provider is None:
        return None
    cached = _cached
    if cached is not None and cached[0] is tracer_provider and cached[1] is meter_provider:
        return cached[2]
    telemetry = Telemetry(tracer_provider, meter_provider)
    _cached = (tracer_provider, meter_provider, telemetry)
    return telemetry


active_telemetry = active  # the name modules import it by


def _api_importable() -> bool:
    try:
        import opentelemetry.metrics
        import opentelemetry.trace  # noqa: F401
    except ImportError:
        return False
    return True


_api: tuple[Any, Any, Any] | None = (
    None  # (trace, metrics, the provider classes that record nothing)
)


def _providers() -> tuple[Any, Any]:
    """The configured or global providers; None for one that records nothing. Called per
    enqueue: the API's modules and classes are looked up once, not imported each time."""
    global _api
    if _api is None:
        from opentelemetry import metrics, trace

        _api = (trace, metrics, (trace.ProxyTracerProvider, trace.NoOpTracerProvider))
    trace, metrics, silent_tracers = _api
    tracer_provider = _tracer_provider or trace.get_tracer_provider()
    if isinstance(tracer_provider, silent_tracers):
        tracer_provider = None
    meter_provider = _meter_provider or metrics.get_meter_provider()
    # until an SDK sets one, the global meter provider is the API's private proxy
    if isinstance(meter_provider, metrics.NoOpMeterProvider) or type(
        meter_provider
    ).__name__.startswith("_Proxy"):
        meter_provider = None
    return tracer_provider, meter_provider


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
        from .context import add_trace

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
        from .context import add_trace

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
        return TracedSource(source, self)


class TracedSource:
    """A :class:`~drainpipe.engine.runner.ClaimableSource` with spans and metrics around the
    inner source's calls. Built only when :func:`active` found something to record to."""

    def __init__(self, inner: Any, otel: Telemetry) -> None:
        self.inner = inner
        self.otel = otel
        self.leases = inner.leases
        self.heartbeat_floor = inner.heartbeat_floor
        self.complete_each = inner.complete_each
        self.async_handler = True  # start() always returns a coroutine
        self.log = inner.log
        self.name: str = inner.name
        # optional source calls (skips, why a lease was lost) pass straight through
        for optional in ("skip", "why_lost", "keep_result"):
            if hasattr(inner, optional):
                setattr(self, optional, getattr(inner, optional))
        if hasattr(inner, "complete_and_claim"):
            self.complete_and_claim = self._complete_and_claim
        jobs = inner.concept == "jobs"
        self.concept: str = inner.concept
        self._prefix = "drainpipe" if jobs else "drainpipe.webhook"
        self._run_name = "drainpipe.job" if jobs else "drainpipe.webhook.process"
        self._labels = {"queue": self.name} if jobs else {"source": self.name}
        self._processed = otel.processed if jobs else otel.webhooks_processed
        self._failed = otel.failed if jobs else otel.webhooks_failed
        self._dead = otel.dead if jobs else None
        self._base = {"messaging.system": SYSTEM, "messaging.destination.name": self.name}
        # built once: a new attribute dict per job is measurable on this path
        self._by_outcome = {
            outcome: {**self._labels, "outcome": outcome}
            for outcome in ("succeeded", "failed", "retry", "cancelled", "suspended")
        }

    def fields(self, item: Any) -> dict[str, Any]:
        return self.inner.fields(item)  # type: ignore[no-any-return]

    def describe(self, item: Any) -> str:
        return self.inner.describe(item)  # type: ignore[no-any-return]

    def extend(self, items: Sequence[Any], lease: float) -> Awaitable[set[int]]:
        return self.inner.extend(items, lease)  # type: ignore[no-any-return]

    async def claim(self, batch: int, lease: float) -> Sequence[Any]:
        attributes = {
            **self._base,
            "messaging.operation.type": "receive",
            "messaging.operation.name": "claim",
            "drainpipe.batch_size": batch,
        }
        with self.otel.span(f"{self._prefix}.claim", attributes, kind="CLIENT") as span:
            items: Sequence[Any] = await self.inner.claim(batch, lease)
            span.set_attribute("messaging.batch.message_count", len(items))
        return items

    async def complete(self, items: Sequence[Any]) -> Sequence[Any]:
        attributes = {
            **self._base,
            "messaging.operation.type": "settle",
            "messaging.operation.name": "complete",
            "messaging.batch.message_count": len(items),
        }
        with self.otel.span(f"{self._prefix}.complete", attributes, kind="CLIENT") as span:
            refused: Sequence[Any] = await self.inner.complete(items)
            span.set_attribute("drainpipe.refused", len(refused))
        self._processed.add(len(items) - len(refused), self._labels)
        return refused

    async def _complete_and_claim(
        self, items: Sequence[Any], batch: int, lease: float
    ) -> tuple[Sequence[Any], Sequence[Any]]:
        """One span for the fused call: what it settled, what it refused, what it claimed."""
        attributes = {
            **self._base,
            "messaging.operation.type": "settle",
            "messaging.operation.name": "complete_and_claim",
            "messaging.batch.message_count": len(items),
            "drainpipe.batch_size": batch,
        }
        with self.otel.span(
            f"{self._prefix}.complete_and_claim", attributes, kind="CLIENT"
        ) as span:
            refused, claimed = await self.inner.complete_and_claim(items, batch, lease)
            span.set_attribute("drainpipe.refused", len(refused))
            span.set_attribute("drainpipe.claimed", len(claimed))
        self._processed.add(len(items) - len(refused), self._labels)
        return refused, claimed

    async def fail(
        self,
        item: Any,
        error: str,
        retry_in: float | None,
        code: str | None = None,
        discard: bool = False,
    ) -> Any:
        attributes = {
            **self._base,
            "messaging.operation.type": "settle",
            "messaging.operation.name": "fail",
            "messaging.message.id": str(item.id),
        }
        with self.otel.span(f"{self._prefix}.fail", attributes, kind="CLIENT") as span:
            outcome = await self.inner.fail(item, error, retry_in, code, discard)
            if isinstance(outcome, str):
                span.set_attribute("drainpipe.fail.outcome", outcome)
        self._failed.add(1, self._labels)
        if outcome == "dead" and self._dead is not None:
            self._dead.add(1, self._labels)
        return outcome

    def start(self, item: Any) -> Awaitable[Any]:
        return self._run(item)

    async def _run(self, item: Any) -> Any:
        otel = self.otel
        parent, links = otel.job_parent(self.inner.trace_of(item))
        attributes = {
            **self._base,
            "messaging.operation.type": "process",
            "messaging.message.id": str(item.id),
            "drainpipe.attempt": item.attempts,
        }
        if self.concept != "jobs":
            attributes["drainpipe.webhook.message_id"] = item.message_id
        outcome = "failed"
        started = time.perf_counter()
        with otel.tracer.start_as_current_span(
            self._run_name,
            context=parent,
            kind=otel._trace.SpanKind.CONSUMER,
            links=links,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                result = self.inner.start(item)
                if inspect.isawaitable(result):
                    result = await result
                outcome = "succeeded"
                return result
            except Retry:
                outcome = "retry"  # asked for, not an error
                raise
            except Suspend:
                outcome = "suspended"  # a sleep, a wait or the budget: not an error
                raise
            except asyncio.CancelledError:
                outcome = "cancelled"  # the lease was lost, or the run is being stopped
                raise
            except Exception as exc:
                span.record_exception(exc)
                span.set_status(otel._trace.Status(otel._trace.StatusCode.ERROR, error_text(exc)))
                raise
            finally:
                span.set_attribute("drainpipe.outcome", outcome)
                otel.handler_duration.record(
                    time.perf_counter() - started, self._by_outcome[outcome]
                )


# -- queue depth and age, from stats -------------------------------------------------------


class QueueObserver:
    """Observable gauges ``drainpipe.queue.depth`` (per queue and state) and
    ``drainpipe.queue.oldest_age`` fed from ``jobs.stats``. Metric readers call gauges from
    their own thread, so the stats are read here on the event loop, every ``interval``
    seconds (and by :meth:`refresh`), and the gauges report the last reading."""

    def __init__(self, jobs: Jobs, queues: Sequence[str] | None, interval: float) -> None:
        self._jobs = jobs
        self._queues = list(queues) if queues is not None else None
        self.interval = interval
        self.snapshot: dict[str, Any] = {}
        self._task: asyncio.Task[None] | None = None

    async def refresh(self) -> None:
        """Read ``stats`` once now (one round trip); a failure is logged, the last
        reading stays."""
        try:
            self.snapshot = dict(await self._jobs.stats(self._queues))
        except Exception:
            log.warning("drainpipe: could not read queue stats for the gauges", exc_info=True)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._poll())

    async def _poll(self) -> None:
        while True:
            await self.refresh()
            await asyncio.sleep(self.interval)

    async def close(self) -> None:
        """Stop refreshing (the gauges report nothing after this)."""
        task, self._task = self._task, None
        self.snapshot = {}
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def depth(self, _options: Any) -> list[Any]:
        from opentelemetry.metrics import Observation

        return [
            Observation(getattr(stat, state), {"queue": queue, "state": state})
            for queue, stat in self.snapshot.items()
            for state in ("ready", "in_flight", "delayed", "dead")
        ]

    def oldest_age(self, _options: Any) -> list[Any]:
        from opentelemetry.metrics import Observation

        return [
            Observation(stat.oldest_age_seconds, {"queue": queue})
            for queue, stat in self.snapshot.items()
            if stat.oldest_age_seconds is not None
        ]


async def observe_queues(
    jobs: Jobs, queues: Sequence[str] | None = None, *, interval: float = 15.0
) -> QueueObserver | None:
    """Register the queue gauges (depth per state, oldest age) for ``queues`` (None: every
    queue) and start refreshing them from ``stats`` every ``interval`` seconds on the running
    loop. Returns the observer (``await observer.close()`` stops it), or None when there is
    no meter to register with. Call it once per process."""
    otel = active()
    if otel is None:
        return None
    observer = QueueObserver(jobs, queues, interval)
    await observer.refresh()
    meter = otel._meter
    meter.create_observable_gauge(
        "drainpipe.queue.depth",
        [observer.depth],
        unit="{job}",
        description="Jobs per queue and state (ready, in_flight, delayed, dead), from stats",
    )
    meter.create_observable_gauge(
        "drainpipe.queue.oldest_age",
        [observer.oldest_age],
        unit="s",
        description="Age of the oldest live job per queue, from stats",
    )
    observer.start()
    return observer


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("drainpipe")
    except PackageNotFoundError:
        return "0"
