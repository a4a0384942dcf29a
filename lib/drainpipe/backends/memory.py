"""An in-memory :class:`~drainpipe.QueueBackend`: drainpipe's job semantics without Postgres.

For tests of handlers and of code that enqueues. It follows the SQL functions of
``sql/jobs_table.sql`` and ``sql/schedules_drain.sql`` rule for rule: ``attempts`` is the
fencing token, a lease hides a job until it ends, a failure waits out ``retry_in`` or the
jittered backoff, ``fail`` on the last attempt makes a dead letter, a job whose lease ran
out on its last attempt is archived dead by the next claim, dedupe ``always``/``waiting``,
delays, stats, dead letters newest first, replay. Like the table backend, a completed job
is gone (``purge_archive`` only purges dead letters).

Time comes from ``now`` (default: the real UTC clock); pass a :class:`Clock` and move it
with ``clock.advance(seconds)`` instead of sleeping through delays, leases and backoffs.

State lives in this object, in this process: no cross-process workers, no SQL triggers,
nothing survives the object. Safe for any number of asyncio tasks of one event loop: no
operation awaits inside its critical section (each yields to the loop once before it, as
a database round trip would, so tasks interleave between operations as they do against
Postgres). Not thread-safe.
"""

from __future__ import annotations

import asyncio
import heapq
import json
import math
import random
import re
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

from ..context import unwrap_payload
from ..errors import DrainpipeError
from ..models import DeadJob, DedupeMode, FailOutcome, Job, QueueStats, claimed_job

__all__ = ["Clock", "MemoryBackend", "retry_delay"]

_QUEUE_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,46}$")
_MAX_ERROR = 4000
_MAX_SCHEDULE_NAME = 200
LEASE_RAN_OUT = "The lease ran out on the last attempt"


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


def _invalid_input(message: str) -> DrainpipeError:
    # what the SQL functions raise (SQLSTATE 22xxx) for the same argument
    return DrainpipeError("invalid_input", message)


def _check_queue(queue: Any) -> str:
    if not isinstance(queue, str) or not _QUEUE_NAME.match(queue):
        raise _invalid_input(
            f'Invalid queue name "{queue}": lowercase letters, digits and underscores, at most 47'
        )
    return queue


def _check_max_attempts(max_attempts: Any) -> int:
    if (
        not isinstance(max_attempts, int)
        or isinstance(max_attempts, bool)
        or not 1 <= max_attempts < 2**31
    ):
        raise _invalid_input(f"max_attempts must be at least 1, not {max_attempts}")
    return max_attempts


def _to_json(value: Any) -> str:
    """The stored form of a payload: JSON text, so every read hands out a fresh copy and a
    value Postgres' jsonb would refuse is refused here too."""
    try:
        text = json.dumps(value, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise _invalid_input(f"The payload is not a JSON value: {exc}") from exc
    if "\\u0000" in text:
        raise _invalid_input("The payload contains a NUL character, which jsonb cannot hold")
    return text


def _later(moment: datetime, seconds: float | None) -> datetime:
    """``moment`` plus ``seconds`` (None and negative count as 0, as in SQL)."""
    try:
        return moment + timedelta(seconds=max(float(seconds or 0), 0.0))
    except (OverflowError, ValueError) as exc:
        raise _invalid_input(f"{seconds!r} seconds is out of range") from exc


def _floor_ms(moment: datetime) -> datetime:
    # schedules are stored and compared at millisecond precision, as in SQL
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


def _floor_ms_or_none(moment: datetime | None) -> datetime | None:
    return None if moment is None else _floor_ms(moment)


@dataclass(slots=True)
class _Live:
    id: int
    payload: str
    max_attempts: int
    dedupe_key: str | None
    enqueued_at: datetime
    visible_at: datetime
    attempts: int = 0
    last_error: str | None = None
    # bumped whenever visible_at or attempts change: older heap entries are then stale
    version: int = 0


@dataclass(slots=True)
class _Dead:
    id: int
    payload: str
    attempts: int
    max_attempts: int
    dedupe_key: str | None
    last_error: str | None
    enqueued_at: datetime
    died_at: datetime


@dataclass(slots=True)
class _Queue:
    live: dict[int, _Live] = field(default_factory=dict)
    # (visible_at, id, version) of every live job that still has attempts left: the claim
    # takes the oldest visible first, as the SQL claim walks its (visible_at, id) index
    ready: list[tuple[datetime, int, int]] = field(default_factory=list)
    # live jobs running their last attempt: swept into the dead letters once their lease ends
    last_attempt: set[int] = field(default_factory=set)
    by_key: dict[str, set[int]] = field(default_factory=dict)
    dead: dict[int, _Dead] = field(default_factory=dict)


@dataclass(slots=True)
class _Schedule:
    name: str
    cron: str
    time_zone: str
    queue: str
    payload: str
    tenant: str | None
    next_run: datetime | None
    first_after: datetime | None
    created_at: datetime
    last_run: datetime | None = None
    locked_until: datetime | None = None
    claim_token: uuid.UUID | None = None


class MemoryBackend:
    """Jobs and schedules in this process's memory, with the SQL backends' semantics.

    ``now`` is the clock (default: real UTC time; a :class:`Clock` lets a test move time).
    ``rng`` draws the retry backoff's jitter (pass ``random.Random(seed)`` for repeatable
    delays). ``Jobs(MemoryBackend(), queues)`` takes it like any backend.
    """

    api_version: ClassVar[int] = 1
    name = "memory"
    leases = True

    def __init__(
        self,
        *,
        now: Callable[[], datetime] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self._clock: Callable[[], datetime] = now or _real_now
        # how far advance_time moved this backend ahead of a clock it cannot move itself
        self._ahead = timedelta(0)
        # jitter for the retry backoff, not a secret
        self._uniform = (rng or random.Random()).random  # noqa: S311
        self._queues: dict[str, _Queue] = {}
        self._schedules: dict[str, _Schedule] = {}
        self._next_id = 0

    def now(self) -> datetime:
        """This backend's current instant: its clock, plus what :meth:`advance_time` added
        when that clock is not a :class:`Clock`."""
        return self._clock() + self._ahead if self._ahead else self._clock()

    def advance_time(self, seconds: float | timedelta) -> datetime:
        """Move this backend's time forward (the optional hook the conformance kit uses to
        let leases and delays end without waiting); returns the new instant. A
        :class:`Clock` given as ``now`` is advanced itself, so a ``Jobs`` sharing it moves
        too; any other clock keeps running and this backend runs ``seconds`` ahead of it."""
        if isinstance(self._clock, Clock):
            return self._clock.advance(seconds)
        step = seconds if isinstance(seconds, timedelta) else timedelta(seconds=seconds)
        if step < timedelta(0):
            raise ValueError(f"advance_time needs a step >= 0, not {seconds!r}")
        self._ahead += step
        return self.now()

    # -- internals (no awaits: each runs to completion before another task runs) --------

    def _queue(self, queue: str) -> _Queue:
        state = self._queues.get(queue)
        if state is None:
            state = self._queues[queue] = _Queue()
        return state

    def _reindex(self, state: _Queue, job: _Live) -> None:
        """Record that ``job``'s visibility or attempts changed: claimable again at
        ``visible_at``, or swept dead then when it runs its last attempt."""
        job.version += 1
        if job.attempts >= job.max_attempts:
            state.last_attempt.add(job.id)
            return
        heapq.heappush(state.ready, (job.visible_at, job.id, job.version))
        if len(state.ready) > 64 and len(state.ready) > 4 * len(state.live):
            # heartbeats push an entry per extend: drop the stale ones now and then
            state.ready = [
                entry
                for entry in state.ready
                if (held := state.live.get(entry[1])) is not None and held.version == entry[2]
            ]
            heapq.heapify(state.ready)

    def _remove(self, state: _Queue, job: _Live) -> None:
        del state.live[job.id]
        state.last_attempt.discard(job.id)
        if job.dedupe_key is not None:
            keyed = state.by_key[job.dedupe_key]
            keyed.discard(job.id)
            if not keyed:
                del state.by_key[job.dedupe_key]

    def _bury(self, state: _Queue, job: _Live, error: str | None, now: datetime) -> None:
        self._remove(state, job)
        state.dead[job.id] = _Dead(
            id=job.id,
            payload=job.payload,
            attempts=job.attempts,
            max_attempts=job.max_attempts,
            dedupe_key=job.dedupe_key,
            last_error=error,
            enqueued_at=job.enqueued_at,
            died_at=now,
        )

    def _held(self, job: Job[Any], queue: str | None = None) -> tuple[_Queue, _Live] | None:
        """The stored job while its attempt still equals ``job.attempts`` (the fence)."""
        state = self._queues.get(job.queue if queue is None else queue)
        if state is None:
            return None
        stored = state.live.get(job.id)
        if stored is None or stored.attempts != job.attempts:
            return None
        return state, stored

    def _insert(
        self,
        queue: str,
        payload: str,
        *,
        delay: float,
        max_attempts: int,
        dedupe_key: str | None,
        dedupe_running: bool,
        now: datetime,
    ) -> int:
        state = self._queue(queue)
        if dedupe_key is not None:
            for job_id in sorted(state.by_key.get(dedupe_key, ())):
                held = state.live[job_id]
                # a job whose last lease ran out is dead already, whatever the sweep says
                gone = held.attempts >= held.max_attempts and held.visible_at <= now
                if (dedupe_running or held.attempts == 0) and not gone:
                    return held.id
        self._next_id += 1
        job = _Live(
            id=self._next_id,
            payload=payload,
            max_attempts=max_attempts,
            dedupe_key=dedupe_key,
            enqueued_at=now,
            visible_at=_later(now, delay),
        )
        state.live[job.id] = job
        if dedupe_key is not None:
            state.by_key.setdefault(dedupe_key, set()).add(job.id)
        self._reindex(state, job)
        return job.id

    # -- the QueueBackend protocol --------------------------------------------------------

    async def send(
        self,
        queue: str,
        payload: Any,
        *,
        delay: float = 0,
        max_attempts: int = 5,
        dedupe_key: str | None = None,
        dedupe: DedupeMode = "always",
    ) -> int:
        await _round_trip()
        stored = _to_json(payload)
        return self._insert(
            _check_queue(queue),
            stored,
            delay=delay,
            max_attempts=_check_max_attempts(max_attempts),
            dedupe_key=dedupe_key,
            dedupe_running=dedupe != "waiting",
            now=self.now(),
        )

    async def send_many(
        self, queue: str, payloads: Sequence[Any], *, delay: float = 0, max_attempts: int = 5
    ) -> list[int]:
        """All or nothing: every payload is checked before the first is stored."""
        await _round_trip()
        _check_queue(queue)
        _check_max_attempts(max_attempts)
        stored = [_to_json(payload) for payload in payloads]
        now = self.now()
        return [
            self._insert(
                queue,
                one,
                delay=delay,
                max_attempts=max_attempts,
                dedupe_key=None,
                dedupe_running=True,
                now=now,
            )
            for one in stored
        ]

    async def read(self, queue: str, *, lease: float, batch: int) -> list[Job[Any]]:
        await _round_trip()
        state = self._queues.get(queue)
        if state is None:
            return []
        now = self.now()
        until = _later(now, lease)
        for job_id in list(state.last_attempt):
            exhausted = state.live[job_id]
            if exhausted.visible_at <= now:
                self._bury(state, exhausted, LEASE_RAN_OUT, now)
        claimed: list[Job[Any]] = []
        ready = state.ready
        while ready and len(claimed) < max(batch, 1):
            visible_at, job_id, version = ready[0]
            job = state.live.get(job_id)
            if job is None or job.version != version:
                heapq.heappop(ready)
                continue
            if visible_at > now:
                break
            heapq.heappop(ready)
            job.attempts += 1
            job.visible_at = until
            self._reindex(state, job)
            payload, context = unwrap_payload(json.loads(job.payload))
            claimed.append(
                claimed_job(
                    job.id,
                    queue,
                    payload,
                    context,
                    job.attempts,
                    job.max_attempts,
                    job.enqueued_at,
                    until,
                    job.last_error,
                )
            )
        return claimed

    async def complete(self, job: Job[Any]) -> bool:
        await _round_trip()
        held = self._held(job)
        if held is None:
            return False
        self._remove(*held)
        return True

    async def complete_many(self, jobs: Sequence[Job[Any]]) -> list[bool]:
        """Complete several jobs of one queue (the first job's, as in SQL); each fenced."""
        await _round_trip()
        if not jobs:
            return []
        queue = jobs[0].queue
        done = []
        for job in jobs:
            held = self._held(job, queue)
            if held is not None:
                self._remove(*held)
            done.append(held is not None)
        return done

    async def fail(
        self, job: Job[Any], error: str, retry_in: float | None = None
    ) -> FailOutcome | None:
        await _round_trip()
        held = self._held(job)
        if held is None:
            return None
        state, stored = held
        text = ("null" if error is None else str(error))[:_MAX_ERROR]
        now = self.now()
        if stored.attempts >= stored.max_attempts:
            self._bury(state, stored, text, now)
            return "dead"
        wait = retry_delay(stored.attempts, self._uniform) if retry_in is None else retry_in
        stored.last_error = text
        stored.visible_at = _later(now, wait)
        self._reindex(state, stored)
        return "queued"

    async def extend(self, job: Job[Any], lease: float) -> bool:
        await _round_trip()
        held = self._held(job)
        if held is None:
            return False
        state, stored = held
        stored.visible_at = _later(self.now(), lease)
        self._reindex(state, stored)
        return True

    async def extend_many(self, jobs: Sequence[Job[Any]], lease: float) -> set[int]:
        """Extend the leases of several jobs of one queue; returns the ids still held."""
        await _round_trip()
        if not jobs:
            return set()
        queue = jobs[0].queue
        until = _later(self.now(), lease)
        extended = set()
        for job in jobs:
            held = self._held(job, queue)
            if held is not None:
                state, stored = held
                stored.visible_at = until
                self._reindex(state, stored)
                extended.add(stored.id)
        return extended

    # -- dead letters, stats, archive ------------------------------------------------------

    async def replay(self, queue: str, job_id: int) -> int | None:
        await _round_trip()
        return self._replay(queue, job_id, self.now())

    def _replay(self, queue: str, job_id: int, now: datetime) -> int | None:
        state = self._queues.get(queue)
        dead = None if state is None else state.dead.pop(job_id, None)
        if dead is None:
            return None
        # through the dedupe rules, like the SQL: a live job with the key takes the replay
        return self._insert(
            queue,
            dead.payload,
            delay=0,
            max_attempts=dead.max_attempts,
            dedupe_key=dead.dedupe_key,
            dedupe_running=True,
            now=now,
        )

    async def retry_dead(self, queue: str, *, ids: Sequence[int] | None, limit: int) -> int:
        await _round_trip()
        state = self._queues.get(queue)
        if state is None:
            return 0
        wanted = None if ids is None else set(ids)
        chosen = sorted(
            (job_id for job_id in state.dead if wanted is None or job_id in wanted), reverse=True
        )[: max(limit, 1)]
        now = self.now()
        return sum(self._replay(queue, job_id, now) is not None for job_id in chosen)

    async def list_dead(self, queue: str, *, limit: int, before: int | None) -> list[DeadJob]:
        await _round_trip()
        state = self._queues.get(queue)
        if state is None:
            return []
        newest_first = sorted(
            (job_id for job_id in state.dead if before is None or job_id < before), reverse=True
        )[: min(max(limit, 1), 1000)]
        letters = []
        for job_id in newest_first:
            dead = state.dead[job_id]
            payload, context = unwrap_payload(json.loads(dead.payload))
            letters.append(
                DeadJob(
                    id=dead.id,
                    queue=queue,
                    payload=payload,
                    context=context,
                    attempts=dead.attempts,
                    max_attempts=dead.max_attempts,
                    last_error=dead.last_error,
                    enqueued_at=dead.enqueued_at,
                    died_at=dead.died_at,
                )
            )
        return letters

    async def stats(self, queues: Sequence[str]) -> dict[str, QueueStats]:
        await _round_trip()
        now = self.now()
        result = {}
        for queue in queues:
            ready = in_flight = delayed = exhausted = 0
            oldest: datetime | None = None
            state = self._queues.get(queue) or _Queue()
            for job in state.live.values():
                visible = job.visible_at <= now
                if visible and job.attempts >= job.max_attempts:
                    exhausted += 1  # dead already: the next claim archives it
                    continue
                if visible:
                    ready += 1
                elif job.attempts > 0:
                    in_flight += 1
                else:
                    delayed += 1
                if oldest is None or job.enqueued_at < oldest:
                    oldest = job.enqueued_at
            result[queue] = QueueStats(
                ready=ready,
                in_flight=in_flight,
                delayed=delayed,
                dead=exhausted + len(state.dead),
                oldest_age_seconds=None if oldest is None else (now - oldest).total_seconds(),
            )
        return result

    async def purge_archive(
        self, queue: str, *, older_than: timedelta, dead_older_than: timedelta, batch: int
    ) -> int:
        """Delete up to ``batch`` dead letters that died before ``dead_older_than`` ago.
        Completed jobs are not kept (as on the table backend): ``older_than`` has nothing
        to purge and is accepted for the shared signature."""
        await _round_trip()
        _check_queue(queue)
        state = self._queues.get(queue)
        if state is None:
            return 0
        cutoff = self.now() - dead_older_than
        gone = sorted(job_id for job_id, dead in state.dead.items() if dead.died_at < cutoff)
        gone = gone[: max(batch, 1)]
        for job_id in gone:
            del state.dead[job_id]
        return len(gone)

    # -- schedules (the drain scheduler's rows and leases) --------------------------------

    async def schedule(
        self,
        name: str,
        cron: str,
        queue: str,
        payload: Any,
        *,
        time_zone: str,
        next_run: datetime | None,
        tenant: str | None,
    ) -> None:
        await _round_trip()
        from ..cron import parse_cron, zone

        if not isinstance(name, str) or not 1 <= len(name) <= _MAX_SCHEDULE_NAME:
            raise _invalid_input(f"Invalid schedule name {name}: 1 to 200 characters")
        try:
            parse_cron(cron)
            zone(time_zone)
        except ValueError as exc:
            raise _invalid_input(str(exc)) from exc
        _check_queue(queue)
        stored = _to_json(payload)
        now = _floor_ms(self.now())
        text = cron.strip()
        first_after = now if next_run is None else None
        existing = self._schedules.get(name)
        if existing is None:
            self._schedules[name] = _Schedule(
                name=name,
                cron=text,
                time_zone=time_zone,
                queue=queue,
                payload=stored,
                tenant=tenant,
                next_run=_floor_ms_or_none(next_run),
                first_after=first_after,
                created_at=now,
            )
            return
        existing.queue, existing.payload, existing.tenant = queue, stored, tenant
        if existing.cron != text or existing.time_zone != time_zone:
            # a new cron or zone frees the schedule: a drain holding the old version cannot
            # advance it. The same cron and zone keep the next run and a drain's claim.
            existing.cron, existing.time_zone = text, time_zone
            existing.next_run, existing.first_after = _floor_ms_or_none(next_run), first_after
            existing.locked_until = existing.claim_token = None

    async def unschedule(self, name: str) -> bool:
        await _round_trip()
        return self._schedules.pop(name, None) is not None

    async def list_schedules(
        self, *, prefix: str | None, tenant: str | None
    ) -> list[tuple[Any, ...]]:
        """Rows ``(name, cron, time_zone, queue, tenant, next_run, last_run, leased_until,
        created_at)`` by name."""
        await _round_trip()
        return [
            (
                one.name,
                one.cron,
                one.time_zone,
                one.queue,
                one.tenant,
                one.next_run,
                one.last_run,
                one.locked_until,
                one.created_at,
            )
            for one in sorted(self._schedules.values(), key=lambda one: one.name)
            if (prefix is None or one.name.startswith(prefix))
            and (tenant is None or one.tenant == tenant)
        ]

    async def unschedule_tenant(self, tenant: str) -> int:
        await _round_trip()
        names = [one.name for one in self._schedules.values() if one.tenant == tenant]
        for name in names:
            del self._schedules[name]
        return len(names)

    async def due_schedules(self, *, lease: float, batch: int) -> list[tuple[Any, ...]]:
        """Lease the due schedules (and those without a next run yet) for ``lease`` seconds;
        rows ``(name, cron, time_zone, queue, payload, next_run, first_after, claim_token)``."""
        await _round_trip()
        now = self.now()
        free = [
            one
            for one in self._schedules.values()
            if (one.next_run is None or one.next_run <= now)
            and (one.locked_until is None or one.locked_until <= now)
        ]
        # not computed yet first, then by due time and name (the SQL's due_at order)
        free.sort(key=lambda one: (one.next_run is not None, one.next_run or now, one.name))
        rows = []
        until = _later(now, max(lease, 1))
        for one in free[: max(batch, 1)]:
            one.locked_until = until
            # a fresh token per claim: a drain whose lease ran out cannot advance a later one
            one.claim_token = uuid.uuid4()
            rows.append(
                (
                    one.name,
                    one.cron,
                    one.time_zone,
                    one.queue,
                    json.loads(one.payload),
                    one.next_run,
                    one.first_after,
                    one.claim_token,
                )
            )
        return rows

    async def advance_schedule(
        self, name: str, ran: datetime | None, next_run: datetime | None, claim_token: Any
    ) -> bool:
        """Move a schedule we claimed to its next run; False when our claim is gone."""
        await _round_trip()
        one = self._schedules.get(name)
        if one is None or one.claim_token is None or one.claim_token != claim_token:
            return False
        if one.next_run is None:
            if one.first_after is None:
                return False
        elif ran is None or _floor_ms(one.next_run) != _floor_ms(ran):
            return False
        one.next_run = _floor_ms_or_none(next_run)
        if ran is not None:
            one.last_run = _floor_ms(ran)
        one.first_after = one.locked_until = one.claim_token = None
        return True
