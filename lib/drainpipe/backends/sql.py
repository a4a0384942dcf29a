"""The SQL backend: every operation is one call of a ``drainpipe.*`` function, one round trip.

The same functions exist for the pgmq and the table storage, so this class does not care
which one the database has.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, ClassVar

from ..context import ENVELOPE_KEY, unwrap_payload
from ..db import Database, Row, as_database, jsonb
from ..models import DeadJob, DedupeMode, FailOutcome, Job, JobContext, QueueStats, claimed_job

NO_CONTEXT = JobContext()


def parse_claimed(queue: str, row: Row) -> Job[Any]:
    """A ``claim_jobs`` row ``(id, attempts, enqueued_at, visible_until, payload,
    max_attempts, last_error)`` → Job. Runs once per claimed job, so the common case
    (no context envelope) stays on a fast path."""
    job_id, attempts, enqueued_at, visible_until, stored, max_attempts, last_error = row
    if isinstance(stored, dict) and ENVELOPE_KEY in stored:
        payload, context = unwrap_payload(stored)
    else:
        payload, context = stored, NO_CONTEXT
    return claimed_job(
        job_id,
        queue,
        payload,
        context,
        attempts,
        max_attempts,
        enqueued_at,
        visible_until,
        last_error,
    )


def int_array(values: Sequence[int]) -> str:
    """A Postgres array literal for ints: much cheaper than psycopg's generic list dumper,
    which inspects every element (this is on the completion hot path)."""
    return "{" + ",".join(map(str, values)) + "}"


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


class SqlQueueBackend:
    """Jobs over a direct Postgres connection (psycopg): a DSN, a pool or a connection."""

    api_version: ClassVar[int] = 1
    name = "sql"
    leases = True

    def __init__(self, db: Any) -> None:
        self.db: Database = as_database(db)

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
        if not delay and max_attempts == 5 and dedupe_key is None:
            # the SQL defaults: four parameters fewer to send and for psycopg to dump
            value = await self.db.fetchval(
                "SELECT drainpipe.enqueue_job_v1(%s, %s)", (queue, jsonb(payload))
            )
        else:
            value = await self.db.fetchval(
                "SELECT drainpipe.enqueue_job_v1(%s, %s, %s, %s, %s, %s)",
                (
                    queue,
                    jsonb(payload),
                    float(delay),
                    max_attempts,
                    dedupe_key,
                    dedupe != "waiting",
                ),
            )
        return int(value)

    async def send_many(
        self, queue: str, payloads: Sequence[Any], *, delay: float = 0, max_attempts: int = 5
    ) -> list[int]:
        rows = await self.db.fetch(
            "SELECT drainpipe.enqueue_jobs_v1(%s, %s, %s, %s)",
            (queue, jsonb(list(payloads)), float(delay), max_attempts),
        )
        return [int(row[0]) for row in rows]

    async def read(self, queue: str, *, lease: float, batch: int) -> list[Job[Any]]:
        rows = await self.db.fetch(
            "SELECT * FROM drainpipe.claim_jobs_v1(%s, %s, %s)", (queue, float(lease), batch)
        )
        return [parse_claimed(queue, row) for row in rows]

    async def complete(self, job: Job[Any]) -> bool:
        return bool(
            await self.db.fetchval(
                "SELECT drainpipe.complete_job_v1(%s, %s, %s)", (job.queue, job.id, job.attempts)
            )
        )

    async def complete_many(self, jobs: Sequence[Job[Any]]) -> list[bool]:
        """Complete several jobs of one queue in one round trip; each still fenced."""
        if not jobs:
            return []
        queue = jobs[0].queue
        rows = await self.db.fetch(
            "SELECT drainpipe.complete_jobs_v1(%s, %s::bigint[], %s::integer[])",
            (queue, int_array([job.id for job in jobs]), int_array([job.attempts for job in jobs])),
        )
        done = {int(row[0]) for row in rows}
        return [job.id in done for job in jobs]

    async def fail(
        self, job: Job[Any], error: str, retry_in: float | None = None
    ) -> FailOutcome | None:
        outcome = await self.db.fetchval(
            "SELECT drainpipe.fail_job_v1(%s, %s, %s, %s, %s)",
            (job.queue, job.id, job.attempts, error, None if retry_in is None else float(retry_in)),
        )
        return outcome  # type: ignore[no-any-return]

    async def extend(self, job: Job[Any], lease: float) -> bool:
        return bool(
            await self.db.fetchval(
                "SELECT drainpipe.extend_job_lease_v1(%s, %s, %s, %s)",
                (job.queue, job.id, job.attempts, float(lease)),
            )
        )

    async def extend_many(self, jobs: Sequence[Job[Any]], lease: float) -> set[int]:
        """Extend the leases of several jobs of one queue; returns the ids still held."""
        if not jobs:
            return set()
        rows = await self.db.fetch(
            "SELECT drainpipe.extend_job_leases_v1(%s, %s::bigint[], %s::integer[], %s)",
            (
                jobs[0].queue,
                int_array([job.id for job in jobs]),
                int_array([job.attempts for job in jobs]),
                float(lease),
            ),
        )
        return {int(row[0]) for row in rows}

    async def replay(self, queue: str, job_id: int) -> int | None:
        value = await self.db.fetchval(
            "SELECT drainpipe.replay_dead_job_v1(%s, %s)", (queue, job_id)
        )
        return None if value is None else int(value)

    async def stats(self, queues: Sequence[str]) -> dict[str, QueueStats]:
        rows = await self.db.fetch(
            "SELECT * FROM drainpipe.job_queue_stats_v1(%s)", (list(queues),)
        )
        return {
            row[0]: QueueStats(
                ready=int(row[1]),
                in_flight=int(row[2]),
                delayed=int(row[3]),
                dead=int(row[4]),
                oldest_age_seconds=None if row[5] is None else float(row[5]),
            )
            for row in rows
        }

    async def list_dead(self, queue: str, *, limit: int, before: int | None) -> list[DeadJob]:
        rows = await self.db.fetch(
            "SELECT * FROM drainpipe.list_dead_jobs_v1(%s, %s, %s)", (queue, limit, before)
        )
        return [parse_dead(queue, row) for row in rows]

    async def retry_dead(self, queue: str, *, ids: Sequence[int] | None, limit: int) -> int:
        value = await self.db.fetchval(
            "SELECT drainpipe.retry_dead_jobs_v1(%s, %s, %s)",
            (queue, None if ids is None else list(ids), limit),
        )
        return int(value or 0)

    async def purge_archive(
        self, queue: str, *, older_than: timedelta, dead_older_than: timedelta, batch: int
    ) -> int:
        value = await self.db.fetchval(
            "SELECT drainpipe.purge_job_archive_v1(%s, %s, %s, %s)",
            (queue, older_than, batch, dead_older_than),
        )
        return int(value or 0)

    # -- schedules (drain scheduler; pg_cron answers through the same functions) ----------

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
        await self.db.fetch(
            "SELECT drainpipe.schedule_job_v1(%s, %s, %s, %s, %s, %s, %s)",
            (name, cron, queue, jsonb(payload), time_zone, next_run, tenant),
        )

    async def unschedule(self, name: str) -> bool:
        return bool(await self.db.fetchval("SELECT drainpipe.unschedule_job_v1(%s)", (name,)))

    async def list_schedules(self, *, prefix: str | None, tenant: str | None) -> list[Row]:
        """Rows ``(name, cron, time_zone, queue, tenant, next_run, last_run, leased_until, created_at)``."""
        return await self.db.fetch(
            "SELECT * FROM drainpipe.list_schedules_v1(%s, %s)", (prefix, tenant)
        )

    async def unschedule_tenant(self, tenant: str) -> int:
        return int(
            await self.db.fetchval("SELECT drainpipe.unschedule_tenant_v1(%s)", (tenant,)) or 0
        )

    async def due_schedules(self, *, lease: float, batch: int) -> list[Row]:
        """Rows ``(name, cron, time_zone, queue, payload, next_run, first_after, claim_token)``
        now leased to us; ``advance_schedule`` needs the token."""
        return await self.db.fetch(
            "SELECT * FROM drainpipe.claim_due_schedules_v1(%s, %s)", (float(lease), batch)
        )

    async def advance_schedule(
        self, name: str, ran: datetime | None, next_run: datetime | None, claim_token: Any
    ) -> bool:
        """Move a schedule we claimed to its next run; False when our claim is gone."""
        return bool(
            await self.db.fetchval(
                "SELECT drainpipe.advance_schedule_v1(%s, %s, %s, %s)",
                (name, ran, next_run, claim_token),
            )
        )
