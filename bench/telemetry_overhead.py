"""What drainpipe's OpenTelemetry hooks cost per job (not part of bench.run).

    .venv/bin/python -m bench.telemetry_overhead [JOBS] [ROUNDS]

Drains JOBS no-op jobs (claim batch 100) from the in-memory backend, so the number is the
client-side work per job, in three setups, each in a fresh process, rounds interleaved:

* ``absent``: opentelemetry cannot be imported (as without the ``otel`` extra),
* ``api``: the API is installed, no SDK is configured (the hooks are skipped),
* ``sdk``: an SDK records every span and metric (for scale: what tracing each job costs).
"""

from __future__ import annotations

import statistics
import subprocess
import sys

CHILD = """
import sys
setup = sys.argv[1]
if setup == "absent":
    sys.modules["opentelemetry"] = None
import asyncio, time
import drainpipe
from drainpipe.testing import MemoryBackend
if setup == "sdk":
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from drainpipe import telemetry
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    telemetry.configure(tracer_provider=tracer_provider, meter_provider=meter_provider)

async def main(count):
    jobs = drainpipe.Jobs(MemoryBackend(), {"q": dict})
    await jobs.enqueue_many("q", [{"n": n} for n in range(count)])
    async def handler(payload, job):
        return None
    started = time.perf_counter()
    report = await jobs.drain("q", handler, batch=100)
    elapsed = time.perf_counter() - started
    assert report.succeeded == count, report
    print(count / elapsed)

asyncio.run(main(int(sys.argv[2])))
"""


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    rates: dict[str, list[float]] = {"absent": [], "api": [], "sdk": []}
    for _ in range(rounds):
        for setup, found in rates.items():
            done = subprocess.run(  # noqa: S603
                [sys.executable, "-c", CHILD, setup, str(count)],
                capture_output=True,
                text=True,
                check=True,
            )
            found.append(float(done.stdout))
    for setup, found in rates.items():
        print(
            f"{setup:>7}: median {statistics.median(found):>9,.0f} jobs/s"
            f"  (min {min(found):,.0f}, max {max(found):,.0f}, {rounds} rounds of {count:,})"
        )


if __name__ == "__main__":
    main()
