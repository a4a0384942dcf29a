"""An in-memory :class:`~drainpipe.QueueBackend`: drainpipe's job semantics without Postgres.

For tests of handlers and of code that enqueues. It follows the SQL functions of
``sql/jobs_table.sql`` and ``sql/schedules_drain.sql`` rule for rule: ``attempts`` is the
fencing token, a lease hides a job until it ends, a failure waits out ``retry_in`` or the
jittered backoff, ``fail`` on the last attempt makes a dead letter, a job whose lease ran
out on its last attempt is archived dead by the next claim, dedupe ``always``/``waiting``,
delays, stats, dead letters newest first, replay with lineage, and the job records (states,
attempt history, codes, cancel: :mod:`.records`). Like the table backend, a finished job
stays as a record until ``purge_archive``.

Time comes from ``now`` (default: the real UTC clock); pass a :class:`Clock` and move it
with ``clock.advance(seconds)`` instead of sleeping through delays, leases and backoffs.

State lives in this object, in this process: no cross-process workers, no SQL triggers,
nothing survives the object. Safe for any number of asyncio tasks of one event loop: no
operation awaits inside its critical section (each yields to the loop once before it, as
a database round trip would, so tasks interleave between operations as they do against
Postgres). Not thread-safe.
"""

from __future__ import annotations

import heapq
import json
import random
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, ClassVar

from ...codes import valid_code
from ...context import unwrap_payload
from ...models import DedupeMode, FailOutcome, Job, QueueStats, claimed_job, held_counts
from .clock import Clock, _real_now, _round_trip, retry_delay
from .policies import MemoryPolicies
from .records import MemoryRecords
from .replays import MemoryReplays
from .schedules import MemorySchedules, _Schedule
from .store import AttemptRow
from .store import Live as _Live
from .store import QueueState as _Queue
from .values import (
    _check_max_attempts,
    _check_queue,
    _later,
    _to_json,
)

_MAX_ERROR = 4000


class MemoryBackend(MemoryPolicies, MemoryRecords, MemoryReplays, MemorySchedules):
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
        self._paused: set[str] = set()
        self._init_policies()

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

    def _held(self, job: Job[Any], queue: str | None = None) -> tuple[_Queue, _Live] | None:
        """The stored job while its attempt still equals ``job.attempts`` (the fence)."""
        state = self._queues.get(job.queue if queue is None else queue)
        if state is None:
            return None
        stored = state.live.get(job.id)
        if stored is None or stored.attempts != job.attempts or stored.state != "leased":
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
        parent_id: int | None = None,
        counted: bool = False,
    ) -> int:
        state = self._queue(queue)
        if dedupe_key is not None:
            for job_id in sorted(state.by_key.get(dedupe_key, ())):
                held = state.live[job_id]
                # a job whose last lease ran out is dead already, whatever the sweep says
                gone = held.attempts >= held.max_attempts and held.visible_at <= now
                if (dedupe_running or held.attempts == 0) and not gone:
                    return held.id
        if not counted:  # (a dedupe hit above stores nothing and is not counted)
            self._check_pending(queue, 1)
        self._next_id += 1
        job = _Live(
            id=self._next_id,
            payload=payload,
            max_attempts=max_attempts,
            dedupe_key=dedupe_key,
            enqueued_at=now,
            visible_at=_later(now, delay),
            parent_id=parent_id,
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
        self._check_pending(queue, len(stored))  # a policy's cap: all or nothing
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
                counted=True,
            )
            for one in stored
        ]

    async def read(self, queue: str, *, lease: float, batch: int) -> list[Job[Any]]:
        await _round_trip()
        return self._claim(queue, lease, batch)

    async def complete_and_claim(
        self, queue: str, jobs: Sequence[Job[Any]], *, lease: float, batch: int
    ) -> tuple[list[Job[Any]], list[Job[Any]]]:
        """The completions, then the claim, with nothing in between (as one transaction)."""
        await _round_trip()
        refused = [job for job in jobs if not self._complete(job, queue)]
        return refused, self._claim(queue, lease, batch)

    def _claim(self, queue: str, lease: float, batch: int) -> list[Job[Any]]:
        state = self._queues.get(queue)
        if state is None or queue in self._paused:
            return []
        now = self.now()
        until = _later(now, lease)
        for job_id in list(state.last_attempt):
            self._sweep_lapsed(state, state.live[job_id], now)
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
            if job.state == "leased":  # its lease ran out: this claim takes it over
                state.record_attempt(
                    job.id,
                    job.attempts,
                    AttemptRow(job.started_at, job.visible_at, "expired", "LEASE_EXPIRED"),
                )
            job.attempts += 1
            job.visible_at = until
            job.state = "leased"
            job.started_at = now
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
        return self._complete(job, job.queue)

    def _complete(self, job: Job[Any], queue: str, code: str | None = None) -> bool:
        held = self._held(job, queue)
        if held is None:
            self._late(queue, job, "succeeded")
            return False
        self._finish(*held, "succeeded", at=self.now(), code=code)
        return True

    async def skip(self, job: Job[Any], code: str) -> bool:
        await _round_trip()
        return self._complete(job, job.queue, code)

    async def complete_many(self, jobs: Sequence[Job[Any]]) -> list[bool]:
        """Complete several jobs of one queue (the first job's, as in SQL); each fenced."""
        await _round_trip()
        if not jobs:
            return []
        queue = jobs[0].queue
        return [self._complete(job, queue) for job in jobs]

    async def fail(
        self, job: Job[Any], error: str, retry_in: float | None = None
    ) -> FailOutcome | None:
        return await self.fail_coded(job, error, retry_in, code="HANDLER_ERROR", discard=False)

    async def fail_coded(
        self, job: Job[Any], error: str, retry_in: float | None, *, code: str, discard: bool
    ) -> FailOutcome | None:
        await _round_trip()
        held = self._held(job)
        if held is None:
            self._late(job.queue, job, "failed")
            return None
        state, stored = held
        text = ("null" if error is None else str(error))[:_MAX_ERROR]
        code = code if valid_code(code) else "HANDLER_ERROR"
        now = self.now()
        outcome = "discarded" if discard else "failed"
        state.record_attempt(
            stored.id, stored.attempts, AttemptRow(stored.started_at, now, outcome, code)
        )
        if discard or stored.attempts >= stored.max_attempts:
            last = code if discard else "MAX_ATTEMPTS"
            self._finish(state, stored, "dead", at=now, code=last, error=text)
            return "dead"
        wait = retry_delay(stored.attempts, self._uniform) if retry_in is None else retry_in
        stored.last_error = text
        stored.last_code = code
        stored.state = "retry_wait"
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

    async def live_payloads(self, queue: str, *, after: int, limit: int) -> list[tuple[int, Any]]:
        await _round_trip()
        state = self._queues.get(queue)
        if state is None:
            return []
        ids = sorted(job_id for job_id in state.live if job_id > after)[: max(1, limit)]
        return [(job_id, json.loads(state.live[job_id].payload)) for job_id in ids]

    async def rewrite_payload(self, queue: str, job_id: int, old: Any, new: Any) -> bool:
        await _round_trip()
        state = self._queues.get(queue)
        job = None if state is None else state.live.get(job_id)
        if job is None or json.loads(job.payload) != old:
            return False
        job.payload = _to_json(new)
        return True

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
            ended = [done.state for done in state.finished.values()]
            result[queue] = QueueStats(
                ready=ready,
                in_flight=in_flight,
                delayed=delayed,
                dead=exhausted + len(state.unreplayed_dead()),
                oldest_age_seconds=None if oldest is None else (now - oldest).total_seconds(),
                succeeded=ended.count("succeeded"),
                cancelled=ended.count("cancelled"),
                paused=queue in self._paused,
                held=held_counts({"paused": ready} if queue in self._paused else None),
            )
        return result

    # -- pause (docs/policies.md#pause) ----------------------------------------------------

    async def pause(self, queue: str) -> bool:
        await _round_trip()
        _check_queue(queue)
        added = queue not in self._paused
        self._paused.add(queue)
        return added

    async def resume(self, queue: str) -> bool:
        await _round_trip()
        _check_queue(queue)
        removed = queue in self._paused
        self._paused.discard(queue)
        return removed

    async def paused(self, queues: Sequence[str]) -> set[str]:
        await _round_trip()
        return self._paused.intersection(queues)

    async def purge_archive(
        self, queue: str, *, older_than: timedelta, dead_older_than: timedelta, batch: int
    ) -> int:
        """Delete up to ``batch`` finished jobs: succeeded and cancelled ones that finished
        before ``older_than`` ago, dead ones before ``dead_older_than`` ago (oldest first)."""
        await _round_trip()
        _check_queue(queue)
        state = self._queues.get(queue)
        if state is None:
            return 0
        now = self.now()
        gone = sorted(
            (done.finished_at, job_id)
            for job_id, done in state.finished.items()
            # at or before the cutoff: a Clock that stands still still purges age 0
            if done.finished_at <= now - (dead_older_than if done.state == "dead" else older_than)
        )[: max(batch, 1)]
        for _, job_id in gone:
            del state.finished[job_id]
            state.attempts.pop(job_id, None)
        return len(gone)
