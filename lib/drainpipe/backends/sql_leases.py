"""Claiming, extending and settling jobs on the SQL backend, the path every drain runs:
the statements, their parameters and the reading of their rows, beside the calls of
:class:`~drainpipe.backends.sql.SqlQueueBackend` that run them (:class:`SqlLeases`).

Each is one call of a ``drainpipe.*`` function (the same for the pgmq and the table
storage), one round trip; every settlement and extension is fenced by the claimed
attempt. ``drainpipe.sync.backend_leases`` is generated from this module
(``./scripts/sync-twin``): its calls run these very statements on a
:class:`~drainpipe.db.sync.SyncDatabase`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from ..context import ENVELOPE_KEY, unwrap_payload
from ..db import Database
from ..db.statement_shapes import Params, Row, int_array
from ..models import FailOutcome, Job, JobContext, claimed_job

NO_CONTEXT = JobContext()


def _flag(rows: list[Row]) -> bool:
    return bool(rows[0][0]) if rows else False


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


# -- the calls that run them (SqlQueueBackend's claim, extend and settle) -----------------


class SqlLeases:
    """The claim, extend and settle calls of :class:`~drainpipe.backends.sql.SqlQueueBackend`."""

    db: Database

    async def read(self, queue: str, *, lease: float, batch: int) -> list[Job[Any]]:
        rows = await self.db.fetch(CLAIM, claim_params(queue, lease, batch))
        return parse_claim(queue, rows)

    async def complete(self, job: Job[Any]) -> bool:
        return parse_complete(await self.db.fetch(COMPLETE, complete_params(job)))

    async def complete_many(self, jobs: Sequence[Job[Any]]) -> list[bool]:
        """Complete several jobs of one queue in one round trip; each still fenced."""
        if not jobs:
            return []
        rows = await self.db.fetch(COMPLETE_MANY, complete_many_params(jobs))
        return parse_complete_many(jobs, rows)

    async def complete_and_claim(
        self, queue: str, jobs: Sequence[Job[Any]], *, lease: float, batch: int
    ) -> tuple[list[Job[Any]], list[Job[Any]]]:
        """Complete ``jobs`` (each fenced) and claim up to ``batch`` more, in one call and one
        transaction; returns (the jobs whose completion was refused, the claimed jobs)."""
        rows = await self.db.fetch(
            COMPLETE_AND_CLAIM, complete_and_claim_params(queue, jobs, lease, batch)
        )
        return parse_complete_and_claim(queue, jobs, rows)

    async def fail(
        self, job: Job[Any], error: str, retry_in: float | None = None
    ) -> FailOutcome | None:
        return parse_fail(await self.db.fetch(FAIL, fail_params(job, error, retry_in)))

    async def fail_coded(
        self, job: Job[Any], error: str, retry_in: float | None, *, code: str, discard: bool
    ) -> FailOutcome | None:
        params = fail_coded_params(job, error, retry_in, code, discard)
        return parse_fail_coded(await self.db.fetch(FAIL_CODED, params))

    async def skip(self, job: Job[Any], code: str) -> bool:
        return parse_skip(await self.db.fetch(SKIP, skip_params(job, code)))

    async def extend(self, job: Job[Any], lease: float) -> bool:
        return parse_extend(await self.db.fetch(EXTEND, extend_params(job, lease)))

    async def extend_many(self, jobs: Sequence[Job[Any]], lease: float) -> set[int]:
        """Extend the leases of several jobs of one queue; returns the ids still held."""
        if not jobs:
            return set()
        rows = await self.db.fetch(EXTEND_MANY, extend_many_params(jobs, lease))
        return parse_extend_many(rows)
