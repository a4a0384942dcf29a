"""An OpenTelemetry SDK per test: spans to an in-memory exporter, metrics to an in-memory
reader, handed to drainpipe with ``telemetry.configure`` (the API's global providers can be
set only once per process)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from drainpipe import telemetry


@dataclass
class Sdk:
    tracer_provider: TracerProvider
    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        finished = list(self.exporter.get_finished_spans())
        return [span for span in finished if name is None or span.name == name]

    def points(self, metric: str) -> list[Any]:
        """Every data point of ``metric`` in a fresh collection."""
        data = self.reader.get_metrics_data()
        found = []
        for resource in data.resource_metrics if data else []:
            for scope in resource.scope_metrics:
                for recorded in scope.metrics:
                    if recorded.name == metric:
                        found += list(recorded.data.data_points)
        return found


@pytest.fixture
def sdk() -> Iterator[Sdk]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    telemetry.configure(tracer_provider=tracer_provider, meter_provider=meter_provider)
    try:
        yield Sdk(tracer_provider, exporter, reader)
    finally:
        telemetry.configure()
        meter_provider.shutdown()
        tracer_provider.shutdown()
