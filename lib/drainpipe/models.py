"""The values drainpipe hands back: jobs, dead letters, stats, schedules and work reports."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import Any, Generic, Literal, TypeVar

T = TypeVar("T")

FailOutcome = Literal["queued", "dead"]
JobState = Literal["queued", "leased", "retry_wait", "waiting", "succeeded", "dead", "cancelled"]
AttemptOutcome = Literal[
    "running", "succeeded", "skipped", "failed", "expired", "cancelled", "discarded"
]
JOB_STATES: tuple[str, ...] = (
    "queued",
    "leased",
    "retry_wait",
    "waiting",
    "succeeded",
    "dead",
    "cancelled",
)
TERMINAL_STATES: frozenset[str] = frozenset({"succeeded", "dead", "cancelled"})
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

    # -- durable steps (docs/steps.md): only while a worker, drain or route runs the job --

    async def step(self, name: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Call ``fn(*args, **kwargs)`` (plain or async) once over every run of this job and
        keep its result (a JSON value or a pydantic model, dumped); a later run gets the
        kept value back without calling ``fn``. Steps are known by order and name."""
        return await _workflow(self).step(self, name, fn, args, kwargs)

    async def sleep(self, delay_or_until: float | timedelta | datetime) -> None:
        """Suspend the job until then (seconds, a timedelta or an aware datetime): the run
        ends here (:class:`drainpipe.Suspend`) and any worker or drain resumes it."""
        await _workflow(self).sleep(self, delay_or_until)

    async def wait_for(
        self,
        event: str,
        *,
        key: str,
        timeout: float | timedelta | None = None,  # noqa: ASYNC109 - a stored deadline
    ) -> Any:
        """The data of the oldest event ``event`` with ``key`` emitted since this job was
        enqueued that it has not taken yet, suspending until one comes; None after
        ``timeout``."""
        return await _workflow(self).wait_for(self, event, key, timeout)

    async def spawn(self, queue: str, payload: Any, **enqueue_options: Any) -> int:
        """Enqueue a child job (``parent_id`` = this job) once over every run: a step.
        Options: ``delay``, ``run_at``, ``max_attempts``, ``context``."""
        ids: list[int] = await _workflow(self).spawn_many(self, queue, [payload], enqueue_options)
        return ids[0]

    async def spawn_many(self, queue: str, payloads: Any, **enqueue_options: Any) -> list[int]:
        """Enqueue several children at once (one step, one round trip); their ids."""
        ids: list[int] = await _workflow(self).spawn_many(self, queue, payloads, enqueue_options)
        return ids

    async def join(self, ids: Any, *, queue: str | None = None) -> list[ChildOutcome]:
        """Suspend until every child in ``ids`` finished; their outcomes in that order.
        ``queue`` defaults to the one queue this run spawned into."""
        outcomes: list[ChildOutcome] = await _workflow(self).join(self, ids, queue)
        return outcomes


def _workflow(job: Job[Any]) -> Any:
    workflow = job.__dict__.get("_workflow")
    if workflow is None:
        from .errors import DrainpipeError

        raise DrainpipeError(
            "invalid_request",
            "Steps run only under work, drain or the drain route (a claimed job has none)",
            code="STEPS_UNAVAILABLE",
        )
    return workflow


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


class ReplayReport(int):
    """What ``retry_dead`` did: an ``int``, how many dead jobs went back (as before), that
    also says, per job tried, what happened.

    ``replayed`` maps each replayed dead job's id to its child's id; ``refused`` maps each
    dead job that was not replayed to why (a code): ``EVENT_EXPIRED`` / ``REPLAY_BLOCKED``
    (its queue's replay rules), the code ``replay_check`` answered, ``JOB_ALREADY_REPLAYED``
    (a concurrent call replayed it first), or, for ids passed explicitly, ``JOB_NOT_DEAD`` /
    ``JOB_NOT_FOUND``. Both are read-only."""

    replayed: Mapping[int, int]
    refused: Mapping[int, str]

    def __new__(
        cls,
        replayed: Mapping[int, int],
        refused: Mapping[int, str],
        *,
        count: int | None = None,
    ) -> ReplayReport:
        # count: a backend that only counts (no per-job rows) leaves ``replayed`` empty
        report = super().__new__(cls, len(replayed) if count is None else count)
        report.replayed = MappingProxyType(dict(replayed))
        report.refused = MappingProxyType(dict(refused))
        return report

    def __reduce__(self) -> tuple[Any, ...]:
        # copy and pickle: rebuilt from plain dicts (a mappingproxy does not pickle)
        return _replay_report, (dict(self.replayed), dict(self.refused), int(self))

    def __str__(self) -> str:
        return str(int(self))  # prints as the count it always was

    def __repr__(self) -> str:
        return (
            f"ReplayReport({int(self)}, replayed={dict(self.replayed)!r},"
            f" refused={dict(self.refused)!r})"
        )


def _replay_report(replayed: dict[int, int], refused: dict[int, str], count: int) -> ReplayReport:
    return ReplayReport(replayed, refused, count=count)


#: the reasons ``QueueStats.held`` and ``JobRecord.held_by`` name (docs/flow-control.md)
HELD_REASONS = ("paused", "order", "concurrency", "rate")


def held_counts(raw: Any) -> dict[str, int]:
    """``QueueStats.held`` from what a storage answered (a mapping of reason to count, or
    JSON text of one; None for none), the zero counts left out. A reason outside
    :data:`HELD_REASONS` or a count that is not a whole number >= 0 raises ``ValueError``
    (a storage speaking another version)."""
    if raw is None:
        return {}
    if isinstance(raw, str | bytes):
        raw = json.loads(raw)
    if not isinstance(raw, Mapping):
        raise ValueError(f"held counts must be an object, not {raw!r}")
    counts: dict[str, int] = {}
    for reason, count in raw.items():
        if reason not in HELD_REASONS or isinstance(count, bool) or not isinstance(count, int):
            raise ValueError(f"held counts: unknown entry {reason!r}: {count!r}")
        if count < 0:
            raise ValueError(f"held counts: {reason!r} is negative")
        if count:
            counts[reason] = count
    return counts


@dataclass(frozen=True, slots=True)
class QueueStats:
    """``ready``: claimable now; ``in_flight``: held by a worker or waiting out a retry
    backoff; ``delayed``: never claimed, not yet visible; ``dead``: dead jobs not replayed
    yet; ``oldest_age_seconds``: age of the oldest live job (None when there is none);
    ``succeeded``/``cancelled``: finished records kept; ``paused``: no claimer takes the
    queue's jobs (``Jobs.pause``); ``held``: how many of the ``ready`` jobs a claim would
    not take now, by reason (``"paused"``: all of them while paused; else ``"order"``,
    ``"concurrency"``, ``"rate"``, from the queue's flow limits), empty when none are
    (docs/flow-control.md#what-held-means)."""

    ready: int
    in_flight: int
    delayed: int
    dead: int
    oldest_age_seconds: float | None
    #: finished jobs still kept as records (until ``purge_archive``)
    succeeded: int = 0
    cancelled: int = 0
    paused: bool = False
    #: a plain dict (JSON and ``asdict`` take it as it is), left out of the stats' hash
    held: dict[str, int] = field(default_factory=dict, hash=False)


@dataclass(slots=True)
class WorkReport:
    """What ``work``/``drain``/``process`` did. ``budget_exhausted`` is True when the call
    stopped because its budget ran out while the queue still gave work."""

    succeeded: int = 0
    failed: int = 0
    budget_exhausted: bool = field(default=False, compare=False)
    #: runs that suspended (sleep, wait_for, join, or a step under a spent budget)
    suspended: int = field(default=0, compare=False, repr=False)

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


@dataclass(frozen=True, slots=True)
class Attempt:
    """One attempt of a job: when it started and ended, how (``outcome``) and why (``code``).
    ``late_outcome`` is what a holder reported after its attempt was cancelled
    (``"succeeded"`` or ``"failed"``): the work may have run."""

    number: int
    started_at: datetime | None
    ended_at: datetime | None
    outcome: AttemptOutcome
    code: str | None
    late_outcome: str | None = None


@dataclass(frozen=True, slots=True)
class Step:
    """One recorded step of a job (metadata only: never its result). ``state`` is
    ``"done"`` or ``"failed"``; ``code`` says why a failed one failed."""

    number: int
    name: str
    state: Literal["done", "failed"]
    started_at: datetime | None
    ended_at: datetime | None
    code: str | None = None


@dataclass(frozen=True, slots=True)
class ChildOutcome:
    """How a spawned child ended (``job.join``): its state, code and kept result."""

    id: int
    queue: str
    state: str
    last_code: str | None
    result: Any = None


@dataclass(frozen=True, slots=True)
class JobRecord:
    """A job as an operator sees it: metadata only, never the payload, error text or lease
    tokens. ``state`` is what holds at read time; ``history`` is filled by ``get`` (a
    listing leaves it empty). ``held_by`` says why a ``queued`` job that could run is not
    claimed: ``"paused"`` (its queue is paused), ``"concurrency"`` (its queue's or key's
    leased jobs are at a limit), ``"rate"`` (a rate window is full), ``"order"`` (an earlier
    job of its ordered key is live), else None."""

    id: int
    queue: str
    state: JobState
    attempts: int
    max_attempts: int
    attempts_left: int
    deadline: datetime | None
    tenant: str | None
    dedupe_key: str | None
    enqueued_at: datetime
    eligible_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    last_code: str | None
    parent_id: int | None
    replayed_by: int | None
    history: tuple[Attempt, ...] = ()
    held_by: str | None = None
    #: the recorded steps (``get`` fills them; a listing leaves them empty)
    steps: tuple[Step, ...] = ()
    #: ``"time"``, ``"event:<name>"``, ``"children"`` while ``waiting``, else None
    waiting_for: str | None = None


@dataclass(frozen=True, slots=True)
class JobPage:
    """One page of ``list_jobs``: newest first; ``next_cursor`` (opaque, signed) gives the
    next page, None on the last one."""

    items: list[JobRecord]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class Position:
    """Where a record listing stopped: the last record's enqueue time, id and queue (the
    order is ``enqueued_at`` descending, then id, then queue, so it is total across queues
    whose ids overlap). ``str()`` is a short text (the time as whole microseconds since
    the epoch), :meth:`parse` reads it back (ValueError when malformed). A position without
    ``enqueued_at`` (made by the previous release) starts the listing over."""

    id: int
    queue: str
    enqueued_at: datetime | None = None

    def __str__(self) -> str:
        if self.enqueued_at is None:
            return f"{self.id}.{self.queue}"
        return f"{self.id}.{self.queue}.{_micros(self.enqueued_at)}"

    @classmethod
    def parse(cls, text: str) -> Position:
        import re

        if not isinstance(text, str):
            raise ValueError("a position is a string")
        match = re.fullmatch(
            r"(0|[1-9][0-9]{0,18})\.([a-z_][a-z0-9_]{0,46})(?:\.(-?[0-9]{1,17}))?", text
        )
        if match is None or int(match[1]) > 9223372036854775807:
            raise ValueError(f"not a position: {text[:80]!r}")
        at = None if match[3] is None else _from_micros(int(match[3]))
        return cls(int(match[1]), match[2], at)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _micros(at: datetime) -> int:
    """Whole microseconds since the epoch: exact for Postgres' timestamptz."""
    return (at - _EPOCH) // timedelta(microseconds=1)


def _from_micros(micros: int) -> datetime:
    try:
        return _EPOCH + timedelta(microseconds=micros)
    except OverflowError:
        raise ValueError("a position's time is out of range") from None
