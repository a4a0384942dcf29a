"""OpenTelemetry traces and metrics for drainpipe (``docs/observability.md``).

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

* :mod:`.providers`: :func:`configure` and :func:`active`, the one switch.
* :mod:`.instruments`: :class:`Telemetry`, the tracer and the instruments.
* :mod:`.traced_source`: :class:`TracedSource`, spans and metrics around a claimed source.
* :mod:`.queue_gauges`: :func:`observe_queues`, the queue depth and age gauges.
"""

from __future__ import annotations

from .instruments import INSTRUMENTATION_NAME, SYSTEM, Telemetry
from .providers import active, active_telemetry, configure
from .queue_gauges import QueueObserver, observe_queues
from .traced_source import TracedSource

__all__ = [
    "INSTRUMENTATION_NAME",
    "SYSTEM",
    "QueueObserver",
    "Telemetry",
    "TracedSource",
    "active",
    "active_telemetry",
    "configure",
    "observe_queues",
]
