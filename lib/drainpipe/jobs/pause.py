"""Pausing a queue (docs/policies.md#pause): ``Jobs.pause``/``resume`` and what a record
shows of it (``JobRecord.held_by``).

The pause lives in the database (``drainpipe.queue_pauses``) and every claim reads it, so it holds for every
claimer (workers, drains, the executor app, PostgREST, SQL); enqueues go on. The calls
mixed into ``Jobs`` are :mod:`drainpipe.jobs.pause_calls`; the rules here serve both twins.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING

from ..models import JobRecord

if TYPE_CHECKING:
    from ..backends.driver import Driver

log = logging.getLogger("drainpipe.drain")

#: ``JobRecord.held_by`` of a queued job whose queue is paused
HELD_BY_PAUSE = "paused"


#: the states of a job a claim could take once it is due (docs/flow-control.md#what-held-means)
_WAITING_STATES = ("queued", "retry_wait")


def is_due(record: JobRecord, now: datetime) -> bool:
    """A queued or retry_wait record whose eligibility (delay, retry wait) is over: a claim
    would take it now but for a hold. Jobs not due yet are not held (``held_by`` None)."""
    return (
        record.state in _WAITING_STATES
        and record.eligible_at is not None
        and record.eligible_at <= now
    )


def holdable(records: Iterable[JobRecord]) -> list[str]:
    """The queues of the records a hold could name (queued or retry_wait), each once."""
    return list(
        dict.fromkeys(record.queue for record in records if record.state in _WAITING_STATES)
    )


def with_holds(records: list[JobRecord], paused: set[str], now: datetime) -> list[JobRecord]:
    """``records`` with ``held_by="paused"`` on the due ones (:func:`is_due` at ``now``) of
    a paused queue: what ``QueueStats.held["paused"]`` counts."""
    if not paused:
        return records
    return [
        dataclasses.replace(record, held_by=HELD_BY_PAUSE)
        if record.queue in paused and is_due(record, now)
        else record
        for record in records
    ]


def flow_holdable(records: Iterable[JobRecord]) -> list[tuple[str, int]]:
    """``(queue, id)`` of the waiting records not held by a pause: a flow limit may hold
    them (the database answers for the due ones, by its clock)."""
    return [
        (record.queue, record.id)
        for record in records
        if record.state in _WAITING_STATES and record.held_by is None
    ]


def with_flow_holds(records: list[JobRecord], holds: dict[tuple[str, int], str]) -> list[JobRecord]:
    """``records`` with ``held_by`` set from :func:`flow_holdable`'s answer."""
    if not holds:
        return records
    return [
        dataclasses.replace(record, held_by=holds[(record.queue, record.id)])
        if (record.queue, record.id) in holds
        else record
        for record in records
    ]


async def idle_holds(
    driver: Driver, idle: list[str]
) -> tuple[list[str], dict[str, dict[str, int]]]:
    """The drain route's report on the queues that gave it no work: the paused ones and the
    held counts of those with held jobs (``QueueStats.held``), in one round trip, only when
    a queue gave none. A failure is logged and reported as nothing held: the report is
    about work done."""
    try:
        if idle:
            paused, held = await driver.queue_holds(idle)
            return sorted(paused), {queue: dict(n) for queue, n in sorted(held.items())}
    except Exception:
        log.warning("drainpipe: could not tell which queues are paused", exc_info=True)
    return [], {}
