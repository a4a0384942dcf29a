"""Job operations beyond a job's own path: stats, dead letters, replay, purge.

Each is one call of a ``drainpipe.*`` function (the same for the pgmq and the table
storage), one round trip. See :mod:`drainpipe.statements` for the shape. A job's own path
has its statements beside the calls that run them: enqueue in
:mod:`drainpipe.backends.sql_enqueue`, claim, extend and settle in
:mod:`drainpipe.backends.sql_leases`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from ..context import unwrap_payload
from ..db.statement_shapes import Params, Row
from ..errors import check_replay_rules
from ..models import DeadJob, QueueStats, held_counts


def _count(rows: list[Row]) -> int:
    return int(rows[0][0] or 0) if rows else 0


# the counts, whether each queue is paused and the held counts
STATS = "SELECT * FROM drainpipe.job_queue_stats_v4(%s)"


def stats_params(queues: Sequence[str]) -> Params:
    return (list(queues),)


def parse_stats(rows: list[Row]) -> dict[str, QueueStats]:
    """Rows ``(queue, ready, in_flight, delayed, dead, succeeded, cancelled,
    oldest_age_seconds, paused, held)`` by queue."""
    return {
        row[0]: QueueStats(
            ready=int(row[1]),
            in_flight=int(row[2]),
            delayed=int(row[3]),
            dead=int(row[4]),
            oldest_age_seconds=None if row[7] is None else float(row[7]),
            succeeded=int(row[5]),
            cancelled=int(row[6]),
            paused=bool(row[8]) if len(row) > 8 else False,
            held=held_counts(row[9]) if len(row) > 9 else held_counts(None),
        )
        for row in rows
    }


LIST_DEAD = "SELECT * FROM drainpipe.list_dead_jobs_v1(%s, %s, %s)"


def list_dead_params(queue: str, limit: int, before: int | None) -> Params:
    return (queue, limit, before)


def parse_dead(queue: str, row: Row) -> DeadJob:
    """A ``list_dead_jobs`` row ``(id, attempts, enqueued_at, died_at, message)`` → DeadJob."""
    job_id, attempts, enqueued_at, died_at, message = row
    message = message if isinstance(message, dict) else {}
    payload, context = unwrap_payload(message.get("payload"))
    return DeadJob(
        id=int(job_id),
        queue=queue,
        payload=payload,
        context=context,
        attempts=int(attempts),
        max_attempts=int(message.get("max_attempts") or 5),
        last_error=message.get("last_error"),
        enqueued_at=enqueued_at,
        died_at=died_at,
    )


def parse_list_dead(queue: str, rows: list[Row]) -> list[DeadJob]:
    """Dead letters newest first; payloads as stored, not validated."""
    return [parse_dead(queue, row) for row in rows]


# how many went back: the replays that made a child (no rules refused them)
RETRY_DEAD = (
    "SELECT count(*)::integer FROM drainpipe.retry_dead_jobs_v2(%s, %s, %s) AS r"
    " WHERE r.new_job_id IS NOT NULL AND r.code IS NULL"
)


def retry_dead_params(queue: str, ids: Sequence[int] | None, limit: int) -> Params:
    return (queue, None if ids is None else list(ids), limit)


parse_retry_dead = _count
"""How many dead letters went back."""

# under the stored replay rules only (no declared ones: the caller has none)
REPLAY = "SELECT new_job_id, code FROM drainpipe.replay_dead_job_v3(%s, %s, NULL, true)"


def replay_params(queue: str, job_id: int) -> Params:
    return (queue, job_id)


def parse_replay(queue: str, job_id: int, rows: list[Row]) -> int | None:
    """The child's id, or None unless the id is a dead job of the queue not replayed yet;
    a refusal by the queue's replay rules raises (:func:`check_replay_rules`)."""
    new_id, code = rows[0] if rows else (None, None)
    check_replay_rules(queue, job_id, code)
    return None if new_id is None else int(new_id)


PURGE_ARCHIVE = "SELECT drainpipe.purge_job_archive_v1(%s, %s, %s, %s)"


def purge_archive_params(
    queue: str, older_than: timedelta, dead_older_than: timedelta, batch: int
) -> Params:
    return (queue, older_than, batch, dead_older_than)


parse_purge_archive = _count
"""How many finished jobs were deleted."""
