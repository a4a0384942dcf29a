"""Job operations: enqueue, claim, settle, extend, stats, dead letters, replay, purge.

Each is one call of a ``drainpipe.*`` function (the same for the pgmq and the table
storage), one round trip. See :mod:`drainpipe.statements` for the shape.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from ..context import ENVELOPE_KEY, unwrap_payload
from ..db import jsonb
from ..db.statement_shapes import Params, Row, int_array
from ..errors import check_replay_rules
from ..models import (
    DeadJob,
    DedupeMode,
    FailOutcome,
    Job,
    JobContext,
    QueueStats,
    claimed_job,
    held_counts,
)

NO_CONTEXT = JobContext()


def _flag(rows: list[Row]) -> bool:
    return bool(rows[0][0]) if rows else False


def _count(rows: list[Row]) -> int:
    return int(rows[0][0] or 0) if rows else 0


# -- enqueue ------------------------------------------------------------------------------

#: ``enqueue`` with the SQL defaults (no delay, 5 attempts, no dedupe key): two parameters
#: to send and for psycopg to dump instead of six.
ENQUEUE_DEFAULT = "SELECT drainpipe.enqueue_job_v1(%s, %s)"
ENQUEUE = "SELECT drainpipe.enqueue_job_v1(%s, %s, %s, %s, %s, %s)"


def enqueue_query(
    queue: str,
    payload: Any,
    delay: float,
    max_attempts: int,
    dedupe_key: str | None,
    dedupe: DedupeMode,
) -> tuple[str, Params]:
    """The statement and its parameters: :data:`ENQUEUE_DEFAULT` when the options are the
    SQL defaults, else :data:`ENQUEUE` (one call for both: this runs once per enqueue)."""
    if not delay and max_attempts == 5 and dedupe_key is None:
        return ENQUEUE_DEFAULT, (queue, jsonb(payload))
    # the last parameter: may a dedupe key coalesce onto a running job ("always")?
    return ENQUEUE, (
        queue,
        jsonb(payload),
        float(delay),
        max_attempts,
        dedupe_key,
        dedupe != "waiting",
    )


#: a debounced or throttled enqueue (docs/flow-control.md)
ENQUEUE_FLOW = "SELECT drainpipe.enqueue_flow_job_v1(%s, %s, %s, %s, %s, %s, %s, %s, %s)"


def enqueue_flow_params(
    queue: str,
    payload: Any,
    delay: float,
    max_attempts: int,
    dedupe_key: str | None,
    dedupe: DedupeMode,
    key: str,
    debounce: float | None,
    throttle: float | None,
) -> Params:
    return (
        queue,
        jsonb(payload),
        float(delay),
        max_attempts,
        dedupe_key,
        dedupe != "waiting",
        key,
        debounce,
        throttle,
    )


def parse_enqueue(rows: list[Row]) -> int:
    """The job id (the existing one on a dedupe hit)."""
    return int(rows[0][0])


ENQUEUE_MANY = "SELECT drainpipe.enqueue_jobs_v1(%s, %s, %s, %s)"


def enqueue_many_params(
    queue: str, payloads: Sequence[Any], delay: float, max_attempts: int
) -> Params:
    return (queue, jsonb(list(payloads)), float(delay), max_attempts)


def parse_enqueue_many(rows: list[Row]) -> list[int]:
    """The new ids, in the order of the payloads."""
    return [int(row[0]) for row in rows]


# -- claim --------------------------------------------------------------------------------

# The two timestamps come as epoch seconds: psycopg's timestamptz loader (text or binary)
# cost ~1 µs a value on the client, more than the rest of a no-op job's parsing, and
# ``datetime.fromtimestamp`` ~0.2 µs. A double holds every microsecond of these dates
# exactly, so the instants are the ones stored; they come back in UTC (the connection's
# time zone was used before: the same instants, another ``tzinfo``). ``date_part`` computes
# the double directly; ``extract`` went through numeric on the server (Postgres 14+).
CLAIM = (
    "SELECT c.id, c.attempts, date_part('epoch', c.enqueued_at),"
    " date_part('epoch', c.visible_until), c.payload, c.max_attempts, c.last_error"
    " FROM drainpipe.claim_jobs_v1(%s, %s, %s) c"
)


def claim_params(queue: str, lease: float, batch: int) -> Params:
    return (queue, float(lease), batch)


def parse_claimed(queue: str, row: Row) -> Job[Any]:
    """A :data:`CLAIM` row ``(id, attempts, enqueued_at, visible_until, payload,
    max_attempts, last_error)``, the two times as epoch seconds → Job."""
    return parse_claim(queue, (row,))[0]


def parse_claim(queue: str, rows: Sequence[Row]) -> list[Job[Any]]:
    """The leased jobs (rows of :data:`CLAIM`, or :data:`COMPLETE_AND_CLAIM`'s claimed
    rows); payloads are not validated yet.

    The loop runs once per claimed job, so the common case (no context envelope) stays on
    a fast path. The jobs of one claim share their lease end (the claim sets one
    ``visible_at``) and often their enqueue time (a batch enqueue), so a time equal to the
    previous row's reuses its ``datetime``: converting is the dearest step of a no-op job's
    parsing."""
    jobs: list[Job[Any]] = []
    append = jobs.append
    from_epoch = datetime.fromtimestamp
    last_enqueued = last_lease_end = None
    enqueued_at = lease_end = _EPOCH
    for row in rows:
        # the first seven columns (a turn's row has an eighth: refused, false here)
        job_id, attempts, enqueued_epoch, lease_end_epoch, stored, max_attempts, last_error = row[
            :7
        ]
        if enqueued_epoch != last_enqueued:
            last_enqueued, enqueued_at = enqueued_epoch, from_epoch(enqueued_epoch, UTC)
        if lease_end_epoch != last_lease_end:
            last_lease_end, lease_end = lease_end_epoch, from_epoch(lease_end_epoch, UTC)
        if isinstance(stored, dict) and ENVELOPE_KEY in stored:
            payload, context = unwrap_payload(stored)
        else:
            payload, context = stored, NO_CONTEXT
        append(
            claimed_job(
                job_id,
                queue,
                payload,
                context,
                attempts,
                max_attempts,
                enqueued_at,
                lease_end,
                last_error,
            )
        )
    return jobs


_EPOCH = datetime.fromtimestamp(0, UTC)


# -- settle and extend (each fenced by the claimed attempt) -------------------------------

COMPLETE = "SELECT drainpipe.complete_job_v1(%s, %s, %s)"


def complete_params(job: Job[Any]) -> Params:
    return (job.queue, job.id, job.attempts)


parse_complete = _flag
"""True: completed; False: the lease was lost, nothing changed."""

COMPLETE_MANY = "SELECT drainpipe.complete_jobs_v1(%s, %s::bigint[], %s::integer[])"


def complete_many_params(jobs: Sequence[Job[Any]]) -> Params:
    """Jobs of one queue (the first one's); callers skip the call for no jobs."""
    return (
        jobs[0].queue,
        int_array([job.id for job in jobs]),
        int_array([job.attempts for job in jobs]),
    )


def parse_complete_many(jobs: Sequence[Job[Any]], rows: list[Row]) -> list[bool]:
    """One flag per job, in order: True for each the call completed."""
    done = {int(row[0]) for row in rows}
    return [job.id in done for job in jobs]


#: A lane's turn: the completions of the batch it ran and the claim of its next batch, one
#: statement and one transaction. Refused completions come first, marked by the
#: last column; the claimed rows have :data:`CLAIM`'s columns before it.
COMPLETE_AND_CLAIM = (
    "SELECT c.id, c.attempts, date_part('epoch', c.enqueued_at),"
    " date_part('epoch', c.visible_until), c.payload, c.max_attempts, c.last_error,"
    " c.refused"
    " FROM drainpipe.complete_and_claim_jobs_v1(%s, %s::bigint[], %s::integer[], %s, %s) c"
)


def complete_and_claim_params(
    queue: str, jobs: Sequence[Job[Any]], lease: float, batch: int
) -> Params:
    """The completions of ``jobs`` (of ``queue``; none is fine) and a claim of ``batch``."""
    return (
        queue,
        int_array([job.id for job in jobs]),
        int_array([job.attempts for job in jobs]),
        float(lease),
        batch,
    )


def parse_complete_and_claim(
    queue: str, jobs: Sequence[Job[Any]], rows: list[Row]
) -> tuple[list[Job[Any]], list[Job[Any]]]:
    """(the jobs whose completion was refused, the newly claimed jobs)."""
    if not rows or not rows[0][7]:  # the common case: nothing refused
        return [], parse_claim(queue, rows)
    refused_ids = {int(row[0]) for row in rows if row[7]}
    refused = [job for job in jobs if job.id in refused_ids]
    return refused, parse_claim(queue, [row for row in rows if not row[7]])


# an uncoded failure: the handler raised (code HANDLER_ERROR), retried unless out of attempts
FAIL = "SELECT drainpipe.fail_job_v2(%s, %s, %s, %s, %s, 'HANDLER_ERROR', false)"


def fail_params(job: Job[Any], error: str, retry_in: float | None) -> Params:
    return (job.queue, job.id, job.attempts, error, None if retry_in is None else float(retry_in))


def parse_fail(rows: list[Row]) -> FailOutcome | None:
    """``"queued"``, ``"dead"``, or None when the lease was lost."""
    outcome: FailOutcome | None = rows[0][0] if rows else None
    return outcome


# -- coded settlements: a handler's Skip and a failure with a code ------------------------

SKIP = "SELECT drainpipe.skip_job_v1(%s, %s, %s, %s)"


def skip_params(job: Job[Any], code: str) -> Params:
    return (job.queue, job.id, job.attempts, code)


def parse_skip(rows: list[Row]) -> bool:
    """True: the job succeeded (skipped); False: the lease was lost or cancelled."""
    return bool(rows[0][0]) if rows else False


FAIL_CODED = "SELECT drainpipe.fail_job_v2(%s, %s, %s, %s, %s, %s, %s)"


def fail_coded_params(
    job: Job[Any], error: str, retry_in: float | None, code: str, discard: bool
) -> Params:
    return (
        job.queue,
        job.id,
        job.attempts,
        error,
        None if retry_in is None else float(retry_in),
        code,
        discard,
    )


def parse_fail_coded(rows: list[Row]) -> FailOutcome | None:
    """``"queued"``, ``"dead"``, or None when the lease was lost (or the job cancelled)."""
    outcome: FailOutcome | None = rows[0][0] if rows else None
    return outcome


EXTEND = "SELECT drainpipe.extend_job_lease_v1(%s, %s, %s, %s)"


def extend_params(job: Job[Any], lease: float) -> Params:
    return (job.queue, job.id, job.attempts, float(lease))


parse_extend = _flag
"""True: the lease now ends ``lease`` seconds from now; False: it was lost."""

EXTEND_MANY = "SELECT drainpipe.extend_job_leases_v1(%s, %s::bigint[], %s::integer[], %s)"


def extend_many_params(jobs: Sequence[Job[Any]], lease: float) -> Params:
    """Jobs of one queue (the first one's); callers skip the call for no jobs."""
    return (
        jobs[0].queue,
        int_array([job.id for job in jobs]),
        int_array([job.attempts for job in jobs]),
        float(lease),
    )


def parse_extend_many(rows: list[Row]) -> set[int]:
    """The ids whose leases are still held (and now extended)."""
    return {int(row[0]) for row in rows}


# -- stats, dead letters, replay, purge ---------------------------------------------------

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
