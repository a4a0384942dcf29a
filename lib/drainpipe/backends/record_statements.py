"""Job records: get, list, cancel, replay. The coded settlements (skip, fail with a code)
sit beside the claim they settle, in :mod:`drainpipe.backends.sql_leases`.

The record statements select metadata only (the SQL functions never return the payload or
the error text), so nothing here can leak either. See :mod:`drainpipe.statements` for the shape.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal

from ..db.statement_shapes import Params, Row
from ..models import TERMINAL_STATES, Attempt, JobRecord, Position

CancelResult = Literal["cancelled", "terminal"]

# -- get and list -------------------------------------------------------------------------

GET = "SELECT * FROM drainpipe.get_job_v1(%s, %s)"


def get_params(queue: str, job_id: int) -> Params:
    return (queue, job_id)


def _time(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value))


def parse_history(value: Any) -> tuple[Attempt, ...]:
    """The ``history`` jsonb array of ``job_history_v1`` → attempts, oldest first."""
    if not isinstance(value, list):
        return ()
    return tuple(
        Attempt(
            number=int(item["number"]),
            started_at=_time(item.get("started_at")),
            ended_at=_time(item.get("ended_at")),
            outcome=item["outcome"],
            code=item.get("code"),
            late_outcome=item.get("late_outcome"),
        )
        for item in value
        if isinstance(item, dict)
    )


def parse_record(row: Row) -> JobRecord:
    """A ``job_record_v1`` row → JobRecord."""
    (
        job_id,
        queue,
        state,
        attempts,
        max_attempts,
        deadline,
        tenant,
        dedupe_key,
        enqueued_at,
        eligible_at,
        started_at,
        finished_at,
        last_code,
        parent_id,
        replayed_by,
        history,
    ) = row
    attempts, max_attempts = int(attempts), int(max_attempts)
    return JobRecord(
        id=int(job_id),
        queue=queue,
        state=state,
        attempts=attempts,
        max_attempts=max_attempts,
        attempts_left=0 if state in TERMINAL_STATES else max(max_attempts - attempts, 0),
        deadline=deadline,
        tenant=tenant,
        dedupe_key=dedupe_key,
        enqueued_at=enqueued_at,
        eligible_at=eligible_at,
        started_at=started_at,
        finished_at=finished_at,
        last_code=last_code,
        parent_id=None if parent_id is None else int(parent_id),
        replayed_by=None if replayed_by is None else int(replayed_by),
        history=parse_history(history),
    )


def parse_get(rows: list[Row]) -> JobRecord | None:
    return parse_record(rows[0]) if rows else None


#: newest first by enqueued_at, then id, then queue (v1 sorted by id)
LIST = "SELECT * FROM drainpipe.list_jobs_v2(%s, %s, %s, %s, %s, %s, %s)"


def list_params(
    queue: str | None, state: str | None, tenant: str | None, limit: int, before: Position | None
) -> Params:
    """``limit + 1`` rows are asked for: the extra one says whether a next page exists."""
    return (
        queue,
        state,
        tenant,
        limit + 1,
        None if before is None else before.enqueued_at,
        None if before is None else before.id,
        None if before is None else before.queue,
    )


def parse_list(rows: list[Row], limit: int) -> tuple[list[JobRecord], Position | None]:
    """The page (newest first) and the position after its last record, None on the last."""
    records = [parse_record(row) for row in rows[:limit]]
    if len(rows) <= limit or not records:
        return records, None
    last = records[-1]
    return records, Position(last.id, last.queue, last.enqueued_at)


# -- cancel and replay --------------------------------------------------------------------

CANCEL = "SELECT drainpipe.cancel_job_v1(%s, %s)"


def cancel_params(queue: str, job_id: int) -> Params:
    return (queue, job_id)


def parse_cancel(rows: list[Row]) -> CancelResult | None:
    """``"cancelled"``, ``"terminal"`` (finished already) or None (no such job)."""
    value: CancelResult | None = rows[0][0] if rows else None
    return value


# replay under the replay rules: the caller's declared (window, replayable) on top of the
# stored policy's; a row with the new id, or None and why not (docs/policies.md)
REPLAY_RULED = "SELECT new_job_id, code FROM drainpipe.replay_dead_job_v3(%s, %s, %s, %s)"


def replay_ruled_params(queue: str, job_id: int, window: float | None, replayable: bool) -> Params:
    return (queue, job_id, window, replayable)


def parse_replay_ruled(rows: list[Row]) -> tuple[int | None, str | None]:
    """(the child's id, None), or (None, why not: a code)."""
    if not rows:
        return None, "JOB_NOT_FOUND"
    new_id, code = rows[0]
    return (None if new_id is None else int(new_id)), (None if code is None else str(code))


RETRY_DEAD_RULED = (
    "SELECT job_id, new_job_id, code FROM drainpipe.retry_dead_jobs_v2(%s, %s, %s, %s, %s)"
)


def retry_dead_ruled_params(
    queue: str, ids: Sequence[int] | None, limit: int, window: float | None, replayable: bool
) -> Params:
    return (queue, None if ids is None else list(ids), limit, window, replayable)


def parse_retry_dead_ruled(rows: list[Row]) -> list[tuple[int, int | None, str | None]]:
    """One (dead job id, child id or None, code or None) per job tried."""
    return [
        (int(job_id), None if new_id is None else int(new_id), None if code is None else str(code))
        for job_id, new_id, code in rows
    ]
