"""Leases and idempotency keys on a clock the test moves (``now=``, sent as ``p_now``):
expiries and takeovers without waiting them out."""

from __future__ import annotations

from datetime import UTC, datetime

import drainpipe
from drainpipe.testing import Clock

START = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


async def test_a_lease_expires_when_the_clock_passes_its_length(db_url: str) -> None:
    clock = Clock(START)
    async with drainpipe.lease(db_url, "report", seconds=60, now=clock) as first:
        assert first is not None
        async with drainpipe.lease(db_url, "report", seconds=60, now=clock) as blocked:
            assert blocked is None  # held, 0 s later
        clock.advance(59)
        assert await first.extend()  # another 60 s from START + 59
        clock.advance(61)
        async with drainpipe.lease(db_url, "report", seconds=60, now=clock) as second:
            assert second is not None  # the first holder's lease ran out: taken over
            assert not await first.extend()  # and the first holder hears of it


async def test_with_lease_takes_the_callers_clock(db_url: str) -> None:
    clock = Clock(START)

    async def inner(_: drainpipe.Lease) -> str:
        clock.advance(3600)  # the outer lease of 60 s is long over by now
        outcome = await drainpipe.with_lease(db_url, "job", noop, seconds=60, now=clock)
        return "taken over" if outcome.acquired else "still held"

    async def noop(_: drainpipe.Lease) -> None:
        return None

    outcome = await drainpipe.with_lease(db_url, "job", inner, seconds=60, now=clock)
    assert outcome.value == "taken over"


async def test_an_idempotency_lock_is_taken_over_once_the_clock_passes_it(db_url: str) -> None:
    clock = Clock(START)
    idem = drainpipe.Idempotency(db_url, lock=30, ttl=3600, now=clock)
    try:
        first = await idem.begin("k", "fp")
        assert first.state == "started"
        assert (await idem.begin("k", "fp")).state == "running"
        clock.advance(31)  # the first holder's lock ran out
        second = await idem.begin("k", "fp")
        assert second.state == "started" and second.holder != first.holder
        assert not await idem.complete("k", first.holder or "", 201, b"late")
        assert await idem.complete("k", second.holder or "", 201, b"done")
        assert (await idem.begin("k", "fp")).state == "replay"
        clock.advance(3600)  # the key expired: a new request runs again
        assert (await idem.begin("k", "fp")).state == "started"
    finally:
        await idem.db.close()
