"""Observable gauges of queue depth and age, fed from ``jobs.stats``."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .providers import active

if TYPE_CHECKING:
    from ..jobs import Jobs

log = logging.getLogger("drainpipe.telemetry")


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
