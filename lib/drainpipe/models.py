"""The values drainpipe hands back: jobs, dead letters, stats, schedules and work reports."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, Literal, TypeVar

T = TypeVar("T")

FailOutcome = Literal["queued", "dead"]
DedupeMode = Literal["always", "waiting"]
BeginState = Literal["started", "replay", "running", "mismatch"]
ActorKind = Literal["user", "service", "anon"]


@dataclass(frozen=True, slots=True)
class Actor:
    """Who enqueued a job: ``id`` and ``kind`` (``user``, ``service`` or ``anon``)."""

    id: str
    kind: ActorKind = "user"


@dataclass(frozen=True, slots=True)
class JobContext:
    """Who asked for a job and for which tenant, recorded next to its payload.

    ``all_tenants`` is set for a job that recorded no tenant when the worker runs with
    ``all_tenants=True`` (a maintenance job meant for every tenant). ``trace`` is the W3C
    trace context (``traceparent``/``tracestate``) of the span that enqueued the job, stored
    only while OpenTelemetry records (:mod:`drainpipe.telemetry`); not part of equality.
    """

    actor: Actor | None = None
    tenant: str | None = None
    all_tenants: bool = False
    trace: dict[str, str] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Job(Generic[T]):
    """A claimed job. ``attempts`` is 1 on the first claim and is the fencing token.

    Not slotted: backends build claimed jobs with :func:`claimed_job`, which fills the
    instance dict in one step.
    """

    id: int
    queue: str
    payload: T
    context: JobContext
    attempts: int
    max_attempts: int
    enqueued_at: datetime
    visible_until: datetime
    last_error: str | None = None


_new_object = object.__new__
_set_attribute = object.__setattr__


def claimed_job(
    id: int,
    queue: str,
    payload: Any,
    context: JobContext,
    attempts: int,
    max_attempts: int,
    enqueued_at: datetime,
    visible_until: datetime,
    last_error: str | None,
) -> Job[Any]:
    """A :class:`Job`, built for the claim hot path: the dataclass ``__init__`` of a frozen
    class sets its nine fields one ``object.__setattr__`` call at a time, which costs more
    than the rest of a no-op job's client-side work."""
    job: Job[Any] = _new_object(Job)
    _set_attribute(
        job,
        "__dict__",
        {
            "id": id,
            "queue": queue,
            "payload": payload,
            "context": context,
            "attempts": attempts,
            "max_attempts": max_attempts,
            "enqueued_at": enqueued_at,
            "visible_until": visible_until,
            "last_error": last_error,
        },
    )
    return job


@dataclass(frozen=True, slots=True)
class DeadJob:
    """A dead letter; its payload is returned as stored, not re-validated."""

    id: int
    queue: str
    payload: Any
    context: JobContext
    attempts: int
    max_attempts: int
    last_error: str | None
    enqueued_at: datetime
    died_at: datetime | None


@dataclass(frozen=True, slots=True)
class QueueStats:
    """``ready``: claimable now; ``in_flight``: held by a worker or waiting out a retry
    backoff; ``delayed``: never claimed, not yet visible; ``dead``: stored dead letters;
    ``oldest_age_seconds``: age of the oldest live job (None when there is none)."""

    ready: int
    in_flight: int
    delayed: int
    dead: int
    oldest_age_seconds: float | None


@dataclass(slots=True)
class WorkReport:
    """What ``work``/``drain``/``process`` did. ``budget_exhausted`` is True when the call
    stopped because its budget ran out while the queue still gave work."""

    succeeded: int = 0
    failed: int = 0
    budget_exhausted: bool = field(default=False, compare=False)

    def __iter__(self) -> Any:
        return iter((self.succeeded, self.failed))


@dataclass(frozen=True, slots=True)
class ScheduleInfo:
    """A stored schedule. Under pg_cron ``queue`` is read back from the command, ``tenant``,
    ``next_run``, ``leased_until`` and ``created_at`` are ``None``, and ``time_zone`` is UTC.

    ``next_run`` is ``None`` until a drain computes it (a schedule written from SQL, or one
    whose cron or zone changed); ``leased_until`` is set while a drain holds it.
    """

    name: str
    cron: str
    time_zone: str
    queue: str | None
    tenant: str | None
    next_run: datetime | None
    last_run: datetime | None
    leased_until: datetime | None
    created_at: datetime | None


@dataclass(frozen=True, slots=True)
class DueSchedule:
    """A schedule a drain has leased because its run is due (``due_schedules``).

    ``next_run`` is None for a schedule written from SQL (or whose cron or zone changed):
    the first run is computed after ``first_after`` (None: now). ``claim_token`` fences
    ``advance_schedule``: only the claim that leased the row may move it on.
    """

    name: str
    cron: str
    time_zone: str
    queue: str
    payload: Any
    next_run: datetime | None
    first_after: datetime | None
    claim_token: Any


@dataclass(frozen=True, slots=True)
class Begin:
    """What ``Idempotency.begin`` decided. ``holder`` is set for ``started`` only (pass it
    to ``complete``/``release``); ``status``, ``body`` and ``content_type`` for ``replay``
    only. ``body`` is what ``complete`` stored: bytes (a ``str`` was stored as UTF-8), or
    the JSON value itself (a dict, list, number, bool) when one was given."""

    state: BeginState
    status: int | None = None
    body: Any = None
    holder: str | None = None
    content_type: str | None = None
