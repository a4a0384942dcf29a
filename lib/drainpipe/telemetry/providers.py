"""Whether drainpipe records telemetry, and to which providers: :func:`configure` and
:func:`active`. Nothing imports ``opentelemetry`` until the application loaded it."""

from __future__ import annotations

import importlib.util
import sys
from typing import TYPE_CHECKING, Any

from .instruments import Telemetry

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider

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
