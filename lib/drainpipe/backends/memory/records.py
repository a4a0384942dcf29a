"""Job records on the in-memory backend: get, list, cancel (the SQL functions' rules)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from ...models import TERMINAL_STATES, JobRecord, Position
from .clock import _round_trip
from .store import LEASE_RAN_OUT, AttemptRow, Finished, Live, QueueState, history, read_state


def _tenant(stored: str) -> str | None:
    value = json.loads(stored)
    if isinstance(value, dict) and value.get("$dp") == 1:
        context = value.get("context")
        if isinstance(context, dict) and isinstance(context.get("tenant"), str):
            return str(context["tenant"])
    return None


class MemoryRecords:
    """Mixed into :class:`~drainpipe.backends.memory.MemoryBackend`."""

    _queues: dict[str, QueueState]
    now: Callable[[], datetime]

    def _finish(
        self,
        state: QueueState,
        job: Live,
        outcome: str,
        *,
        at: datetime,
        code: str | None,
        error: str | None = None,
    ) -> Finished:
        """Move a live job to its terminal record (``_remove`` comes from the backend)."""
        self._remove(state, job)  # type: ignore[attr-defined]
        done = Finished(
            id=job.id,
            payload=job.payload,
            attempts=job.attempts,
            max_attempts=job.max_attempts,
            dedupe_key=job.dedupe_key,
            last_error=job.last_error if error is None else error,
            enqueued_at=job.enqueued_at,
            started_at=job.started_at,
            finished_at=at,
            lease_end=job.visible_at,
            state=outcome,
            last_code=code,
            parent_id=job.parent_id,
        )
        state.finished[job.id] = done
        return done

    def _sweep_lapsed(self, state: QueueState, job: Live, now: datetime) -> bool:
        """A lease that ran out: its attempt expired; dead when it was the last one.
        True when the job is dead now."""
        if job.state != "leased" or job.visible_at > now:
            return False
        state.record_attempt(
            job.id,
            job.attempts,
            AttemptRow(job.started_at, job.visible_at, "expired", "LEASE_EXPIRED"),
        )
        if job.attempts >= job.max_attempts:
            self._finish(
                state, job, "dead", at=job.visible_at, code="MAX_ATTEMPTS", error=LEASE_RAN_OUT
            )
            return True
        return False

    def _record(
        self, queue: str, state: QueueState, job_id: int, now: datetime, full: bool
    ) -> JobRecord | None:
        live = state.live.get(job_id)
        if live is not None:
            stored, lease_end, finished_at = live.state, live.visible_at, None
            attempts, max_attempts, code = live.attempts, live.max_attempts, live.last_code
            started_at, parent, replayed, dedupe, payload = (
                live.started_at,
                live.parent_id,
                None,
                live.dedupe_key,
                live.payload,
            )
            enqueued_at = live.enqueued_at
        else:
            done = state.finished.get(job_id)
            if done is None:
                return None
            stored, lease_end, finished_at = done.state, done.lease_end, done.finished_at
            attempts, max_attempts, code = done.attempts, done.max_attempts, done.last_code
            started_at, parent, replayed, dedupe, payload = (
                done.started_at,
                done.parent_id,
                done.replayed_by,
                done.dedupe_key,
                done.payload,
            )
            enqueued_at = done.enqueued_at
        shown = read_state(stored, lease_end, attempts, max_attempts, now)
        if shown != stored:
            code = "MAX_ATTEMPTS" if shown == "dead" else "LEASE_EXPIRED"
            if shown == "dead":
                finished_at = lease_end
        steps = (
            history(
                state.attempts.get(job_id, {}),
                attempts=attempts,
                state=stored,
                started_at=started_at,
                finished_at=finished_at,
                lease_end=lease_end,
                last_code=code if stored == shown else None,
                now=now,
            )
            if full
            else ()
        )
        return JobRecord(
            id=job_id,
            queue=queue,
            state=shown,  # type: ignore[arg-type]
            attempts=attempts,
            max_attempts=max_attempts,
            attempts_left=0 if shown in TERMINAL_STATES else max(max_attempts - attempts, 0),
            deadline=None,
            tenant=_tenant(payload),
            dedupe_key=dedupe,
            enqueued_at=enqueued_at,
            eligible_at=lease_end if shown in ("queued", "retry_wait") else None,
            started_at=started_at,
            finished_at=finished_at,
            last_code=code,
            parent_id=parent,
            replayed_by=replayed,
            history=steps,
        )

    async def get_record(self, queue: str, job_id: int) -> JobRecord | None:
        await _round_trip()
        state = self._queues.get(queue)
        return None if state is None else self._record(queue, state, job_id, self.now(), True)

    async def list_records(
        self,
        queue: str | None,
        *,
        state: str | None,
        tenant: str | None,
        limit: int,
        before: Position | None,
    ) -> tuple[list[JobRecord], Position | None]:
        await _round_trip()
        now = self.now()
        # newest first by (enqueued_at, id, queue), as the SQL storages: a small store, so
        # every record is read and sorted
        everything = [
            record
            for name, stored in self._queues.items()
            if queue is None or name == queue
            for job_id in (*stored.live, *stored.finished)
            if (record := self._record(name, stored, job_id, now, False)) is not None
        ]
        everything.sort(key=lambda r: (r.enqueued_at, r.id, r.queue), reverse=True)
        if before is not None and before.enqueued_at is not None:
            mark = (before.enqueued_at, before.id, before.queue)
            everything = [r for r in everything if (r.enqueued_at, r.id, r.queue) < mark]
        records: list[JobRecord] = []
        for record in everything:
            if (state is None or record.state == state) and (
                tenant is None or record.tenant == tenant
            ):
                records.append(record)
                if len(records) > limit:
                    break
        if len(records) <= limit:
            return records, None
        records = records[:limit]
        last = records[-1]
        return records, Position(last.id, last.queue, last.enqueued_at)

    async def cancel(self, queue: str, job_id: int) -> str | None:
        await _round_trip()
        state = self._queues.get(queue)
        if state is None:
            return None
        if job_id in state.finished:
            return "terminal"
        job = state.live.get(job_id)
        if job is None:
            return None
        now = self.now()
        if self._sweep_lapsed(state, job, now):
            return "terminal"
        if job.state == "leased" and job.visible_at > now:
            state.record_attempt(
                job.id, job.attempts, AttemptRow(job.started_at, now, "cancelled", "CANCELLED")
            )
        self._finish(state, job, "cancelled", at=now, code="CANCELLED")
        return "cancelled"

    def _late(self, queue: str, job: Any, outcome: str) -> None:
        state = self._queues.get(queue)
        if state is not None:
            state.late_outcome(job.id, job.attempts, outcome)
