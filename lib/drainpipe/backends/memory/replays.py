"""Dead letters in the memory backend: listing them, replaying them, and the replay rules
(docs/policies.md#replaying-safely): the stored rules ``ensure_policy`` keeps, combined with
the caller's declared ones, and the lineage's first enqueue, as
``drainpipe.replay_dead_job_v3`` applies them, so tests without Postgres see the same
refusals and per-job codes."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ...codes import EVENT_EXPIRED, REPLAY_BLOCKED
from ...context import unwrap_payload
from ...models import DeadJob
from .clock import _round_trip
from .store import QueueState

ReplayOutcome = tuple[int | None, str | None]


class MemoryReplays:
    """``list_dead``, ``replay``, ``retry_dead`` and their ruled forms of
    :class:`MemoryBackend`."""

    _queues: dict[str, QueueState]
    _replay_rules: dict[str, tuple[float | None, bool]]

    if TYPE_CHECKING:  # MemoryBackend's and MemoryRecords' own

        def now(self) -> datetime: ...
        def _sweep_lapsed(self, state: QueueState, job: Any, now: datetime) -> bool: ...
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
        ) -> int: ...

    async def replay(self, queue: str, job_id: int) -> int | None:
        await _round_trip()
        return self._replay(queue, job_id, self.now())

    def _replay(self, queue: str, job_id: int, now: datetime) -> int | None:
        state = self._queues.get(queue)
        if state is None:
            return None
        live = state.live.get(job_id)
        if live is not None:
            self._sweep_lapsed(state, live, now)  # a last lease that ran out: dead now
        dead = state.finished.get(job_id)
        if dead is None or dead.state != "dead" or dead.replayed_by is not None:
            return None
        # through the dedupe rules, like the SQL: a live job with the key takes the replay
        child = self._insert(
            queue,
            dead.payload,
            delay=0,
            max_attempts=dead.max_attempts,
            dedupe_key=dead.dedupe_key,
            dedupe_running=True,
            now=now,
            parent_id=job_id,
        )
        dead.replayed_by = child
        return child

    async def retry_dead(self, queue: str, *, ids: Sequence[int] | None, limit: int) -> int:
        await _round_trip()
        state = self._queues.get(queue)
        if state is None:
            return 0
        wanted = None if ids is None else set(ids)
        chosen = sorted(
            (job_id for job_id in state.unreplayed_dead() if wanted is None or job_id in wanted),
            reverse=True,
        )[: max(limit, 1)]
        now = self.now()
        return sum(self._replay(queue, job_id, now) is not None for job_id in chosen)

    async def list_dead(self, queue: str, *, limit: int, before: int | None) -> list[DeadJob]:
        await _round_trip()
        state = self._queues.get(queue)
        if state is None:
            return []
        newest_first = sorted(
            (job_id for job_id in state.unreplayed_dead() if before is None or job_id < before),
            reverse=True,
        )[: min(max(limit, 1), 1000)]
        letters = []
        for job_id in newest_first:
            dead = state.finished[job_id]
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
                    died_at=dead.finished_at,
                )
            )
        return letters

    def _rules_in_force(
        self, queue: str, window: float | None, replayable: bool
    ) -> tuple[float | None, bool]:
        stored_window, stored_replayable = self._replay_rules.get(queue, (None, True))
        windows = [w for w in (stored_window, window) if w is not None]
        return (min(windows) if windows else None), (stored_replayable and replayable)

    def _origin(self, state: QueueState, job_id: int) -> datetime | None:
        """The enqueue time of the first job of ``job_id``'s replay lineage still kept."""
        origin: datetime | None = None
        current: int | None = job_id
        for _ in range(1000):
            done = None if current is None else state.finished.get(current)
            if done is None:
                break
            origin = done.enqueued_at if origin is None else min(origin, done.enqueued_at)
            current = (
                done.parent_id if done.parent_id is not None and done.parent_id < done.id else None
            )
        return origin

    def _replay_under_rules(
        self, queue: str, job_id: int, window: float | None, replayable: bool, now: datetime
    ) -> ReplayOutcome:
        state = self._queues.get(queue)
        if state is None:
            return None, "JOB_NOT_FOUND"
        live = state.live.get(job_id)
        if live is not None and not self._sweep_lapsed(state, live, now):
            return None, "JOB_NOT_DEAD"
        done = state.finished.get(job_id)
        if done is None:
            return None, "JOB_NOT_FOUND"
        if done.replayed_by is not None:
            return None, "JOB_ALREADY_REPLAYED"
        if done.state != "dead":
            return None, "JOB_NOT_DEAD"
        window, replayable = self._rules_in_force(queue, window, replayable)
        if not replayable:
            return None, REPLAY_BLOCKED
        origin = self._origin(state, job_id)
        if window is not None and origin is not None and origin < now - timedelta(seconds=window):
            return None, EVENT_EXPIRED
        return self._replay(queue, job_id, now), None

    async def replay_ruled(
        self, queue: str, job_id: int, *, window: float | None, replayable: bool
    ) -> ReplayOutcome:
        return self._replay_under_rules(queue, job_id, window, replayable, self.now())

    async def retry_dead_ruled(
        self,
        queue: str,
        *,
        ids: Sequence[int] | None,
        limit: int,
        window: float | None,
        replayable: bool,
    ) -> list[tuple[int, int | None, str | None]]:
        state = self._queues.get(queue)
        if ids is None:
            candidates = [] if state is None else state.unreplayed_dead()
        else:
            candidates = list(ids)
        chosen = sorted(set(candidates), reverse=True)[: max(limit, 1)]
        now = self.now()
        return [
            (job_id, *self._replay_under_rules(queue, job_id, window, replayable, now))
            for job_id in chosen
        ]
