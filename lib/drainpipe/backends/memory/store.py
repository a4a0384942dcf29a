"""What the in-memory backend keeps per queue: live jobs, finished records, attempt rows.

The same shape as the table backend's rows: a live job has a stored ``state`` (queued,
leased, retry_wait) read at the current time by :func:`read_state`; a finished one keeps
its terminal state until ``purge_archive``; an attempt that ended other than in success is
an :class:`AttemptRow` (a success is described by the record itself).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ...models import Attempt

LEASE_RAN_OUT = "The lease ran out on the last attempt"


@dataclass(slots=True)
class Live:
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
    state: str = "queued"
    started_at: datetime | None = None
    last_code: str | None = None
    parent_id: int | None = None


@dataclass(slots=True)
class Finished:
    """A job that reached a terminal state: succeeded, dead or cancelled."""

    id: int
    payload: str
    attempts: int
    max_attempts: int
    dedupe_key: str | None
    last_error: str | None
    enqueued_at: datetime
    started_at: datetime | None
    finished_at: datetime
    lease_end: datetime
    state: str
    last_code: str | None
    parent_id: int | None
    replayed_by: int | None = None


@dataclass(slots=True)
class AttemptRow:
    started_at: datetime | None
    ended_at: datetime | None
    outcome: str
    code: str | None
    late_outcome: str | None = None


@dataclass(slots=True)
class QueueState:
    live: dict[int, Live] = field(default_factory=dict)
    # (visible_at, id, version) of every live job that still has attempts left: the claim
    # takes the oldest visible first, as the SQL claim walks its (visible_at, id) index
    ready: list[tuple[datetime, int, int]] = field(default_factory=list)
    # live jobs running their last attempt: swept dead once their lease ends
    last_attempt: set[int] = field(default_factory=set)
    by_key: dict[str, set[int]] = field(default_factory=dict)
    finished: dict[int, Finished] = field(default_factory=dict)
    # job id -> attempt number -> the attempt, for attempts that ended other than in success
    attempts: dict[int, dict[int, AttemptRow]] = field(default_factory=dict)

    def record_attempt(self, job_id: int, number: int, row: AttemptRow) -> None:
        self.attempts.setdefault(job_id, {}).setdefault(number, row)

    def late_outcome(self, job_id: int, number: int, outcome: str) -> None:
        """What a holder reported after its attempt was cancelled (the first word stays)."""
        row = self.attempts.get(job_id, {}).get(number)
        if row is not None and row.outcome == "cancelled" and row.late_outcome is None:
            row.late_outcome = outcome

    def unreplayed_dead(self) -> list[int]:
        return [
            job_id
            for job_id, done in self.finished.items()
            if done.state == "dead" and done.replayed_by is None
        ]


def read_state(
    state: str, lease_end: datetime, attempts: int, max_attempts: int, now: datetime
) -> str:
    """The state at ``now`` (``job_state_at`` in SQL): a lapsed lease reads retry_wait, or
    dead when it was the last attempt."""
    if state == "leased" and lease_end <= now:
        return "dead" if attempts >= max_attempts else "retry_wait"
    return state


def history(
    rows: dict[int, AttemptRow],
    *,
    attempts: int,
    state: str,
    started_at: datetime | None,
    finished_at: datetime | None,
    lease_end: datetime,
    last_code: str | None,
    now: datetime,
) -> tuple[Attempt, ...]:
    """Every attempt (``job_history_v1`` in SQL): the stored rows, and the ones the record
    describes itself."""
    out = []
    for number in range(1, attempts + 1):
        row = rows.get(number)
        if row is not None:
            stored: Any = row.outcome
            out.append(
                Attempt(number, row.started_at, row.ended_at, stored, row.code, row.late_outcome)
            )
            continue
        outcome: Any
        if number < attempts:
            out.append(Attempt(number, None, None, "expired", "LEASE_EXPIRED"))
        elif state == "succeeded":
            outcome = "skipped" if last_code is not None else "succeeded"
            out.append(Attempt(number, started_at, finished_at, outcome, last_code))
        elif state == "leased" and lease_end > now:
            out.append(Attempt(number, started_at, None, "running", None))
        else:
            out.append(Attempt(number, started_at, lease_end, "expired", "LEASE_EXPIRED"))
    return tuple(out)
