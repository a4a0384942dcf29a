"""Time for the memory backend: a clock tests move by hand, and the retry backoff."""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta


def _real_now() -> datetime:
    return datetime.now(UTC)


async def _round_trip() -> None:
    """Yield to the event loop once, where a database call would: other tasks then run
    between two operations, as they do against Postgres (never inside one)."""
    await asyncio.sleep(0)


class Clock:
    """A UTC clock that moves only when told to: ``clock()`` is the current instant.

    Pass the same clock to the backend and to ``Jobs`` (``run_at`` and schedules use the
    latter)::

        clock = Clock()
        jobs = Jobs(MemoryBackend(now=clock), {"emails": Email}, now=clock)
        clock.advance(60)  # a 60 s delay, lease or backoff is over
    """

    def __init__(self, start: datetime | None = None) -> None:
        if start is None:
            start = datetime.now(UTC)
        elif start.tzinfo is None:
            raise ValueError("Clock(start=...) needs a timezone-aware datetime")
        self._now = start.astimezone(UTC)

    def __call__(self) -> datetime:
        return self._now

    def advance(self, seconds: float | timedelta) -> datetime:
        """Move the clock forward by ``seconds`` (a number or a timedelta); returns the new
        instant. Time never goes back: a negative step is a ``ValueError``."""
        step = seconds if isinstance(seconds, timedelta) else timedelta(seconds=seconds)
        if step < timedelta(0):
            raise ValueError(f"Clock.advance needs a step >= 0, not {seconds!r}")
        self._now += step
        return self._now

    def __repr__(self) -> str:
        return f"Clock({self._now.isoformat()})"


def retry_delay(attempt: int, uniform: Callable[[], float] = random.random) -> float:
    """The backoff after failed attempt ``attempt`` (1-based) when ``fail`` gets no
    ``retry_in``: whole seconds uniform in ``[1, min(3600, 10 * 2**(attempt-1))]`` (full
    jitter), the formula of ``drainpipe.job_retry_delay`` in SQL."""
    ceiling = min(3600, 10 * 2 ** min(max(attempt, 1) - 1, 20))
    return float(1 + math.floor(uniform() * ceiling))
