# generated from lib/drainpipe/backends/sql.py by ./scripts/sync-twin: do not edit.
# Change the async source (or tools/sync_twin.py) and run ./scripts/sync-twin again.
"""The SQL backend: every operation is one call of a ``drainpipe.*`` function, one round trip.

The same functions exist for the pgmq and the table storage, so this class does not care
which one the database has. A job's own path keeps its statements beside the calls that
run them: enqueue in :mod:`drainpipe.backends.sql_enqueue`, claim, extend and settle in
:mod:`drainpipe.backends.sql_leases` (the two bases of :class:`SqlQueueBackend`). The other
operations' statements, their parameters and the reading of their rows are the
``backends/*_statements.py`` modules; this class runs them on a
:class:`~drainpipe.db.Database`.

``drainpipe.sync.backend`` is generated from this module (``./scripts/sync-twin``): the same
statements, run on a :class:`~drainpipe.db.sync.SyncDatabase`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, ClassVar

from ..backends import job_statements as ops
from ..backends import pause_statements as pause_ops
from ..backends import record_statements as record_ops
from ..backends import schedule_statements as schedule_ops
from ..backends.job_statements import parse_dead
from ..backends.sql_leases import parse_claimed
from ..db import jsonb
from ..db.statement_shapes import int_array
from ..db.sync import SyncDatabase, as_sync_database
from ..models import DeadJob, DueSchedule, Job, JobRecord, Position, QueueStats, ScheduleInfo
from .backend_enqueue import SyncSqlEnqueue
from .backend_leases import SyncSqlLeases

__all__ = ["SyncSqlBackend", "int_array", "parse_claimed", "parse_dead"]


class SyncSqlBackend(SyncSqlEnqueue, SyncSqlLeases):
    """Jobs over a direct Postgres connection (psycopg): a DSN, a pool or a connection."""

    api_version: ClassVar[int] = 1
    name = "sql"
    leases = True
    #: a complete driver (docs/reference.md#backends): nothing answered from a table
    lacks: frozenset[str] = frozenset()

    def __init__(self, db: Any) -> None:
        self.db: SyncDatabase = as_sync_database(db)

    # -- durable steps; their statements are imported on first use, so a
    # function that never runs a step does not pay for them at cold start ----------------

    def load_steps(self, queue: str, job_id: int) -> dict[int, tuple[str, str, Any]]:
        """The job's recorded steps: number → (name, state, stored result)."""
        from ..backends import step_statements as step_ops

        rows = self.db.fetch(step_ops.LOAD_STEPS, (queue, job_id))
        return step_ops.parse_loaded(rows)

    def record_step(
        self,
        job: Job[Any],
        number: int,
        name: str,
        state: str,
        result: Any,
        code: str | None = None,
        started_at: datetime | None = None,
    ) -> str:
        """``recorded``, ``exists``, ``mismatch`` or ``lost`` (the attempt's fence moved)."""
        from ..backends import step_statements as step_ops

        params = step_ops.record_params(
            job.queue, job.id, job.attempts, number, name, state, result, code, started_at
        )
        return step_ops.parse_text(self.db.fetch(step_ops.RECORD_STEP, params))

    def suspend(
        self,
        job: Job[Any],
        delay: float,
        waiting_for: str | None,
        number: int | None = None,
        name: str | None = None,
        started_at: datetime | None = None,
    ) -> str:
        """``suspended``, ``mismatch`` or ``lost``; the lease is released with it."""
        from ..backends import step_statements as step_ops

        params = step_ops.suspend_params(job, delay, waiting_for, number, name, started_at)
        return step_ops.parse_text(self.db.fetch(step_ops.SUSPEND, params))

    def wait_event(
        self,
        job: Job[Any],
        event: str,
        key: str,
        timeout: float | None,
        number: int,
        name: str,
        started_at: datetime | None = None,
    ) -> tuple[str, Any]:
        """(``taken`` | ``timeout`` | ``suspended`` | ``mismatch`` | ``lost``, data)."""
        from ..backends import step_statements as step_ops

        params = step_ops.wait_params(job, event, key, timeout, number, name, started_at)
        return step_ops.parse_wait(self.db.fetch(step_ops.WAIT_EVENT, params))

    def emit(self, event: str, key: str, data: Any = None) -> int:
        from ..backends import step_statements as step_ops

        rows = self.db.fetch(step_ops.EMIT, (event, key, jsonb(data)))
        return int(rows[0][0])

    def spawn(
        self,
        job: Job[Any],
        number: int,
        name: str,
        queue: str,
        payloads: Sequence[Any],
        delay: float,
        max_attempts: int,
        started_at: datetime | None = None,
    ) -> tuple[str, list[int]]:
        """Enqueue ``payloads`` as children of ``job`` and record the step, at most once:
        (``recorded`` | ``exists`` | ``mismatch`` | ``lost``, the children's ids)."""
        from ..backends import step_statements as step_ops

        params = step_ops.spawn_params(
            job, number, name, queue, payloads, delay, max_attempts, started_at
        )
        return step_ops.parse_spawn(self.db.fetch(step_ops.SPAWN, params))

    def join(
        self,
        job: Job[Any],
        queue: str,
        ids: Sequence[int],
        number: int,
        name: str,
        started_at: datetime | None = None,
    ) -> str:
        """``done`` (every child finished), ``suspended``, ``mismatch`` or ``lost``."""
        from ..backends import step_statements as step_ops

        params = step_ops.join_params(job, queue, ids, number, name, started_at)
        return step_ops.parse_text(self.db.fetch(step_ops.JOIN, params))

    def child_outcomes(
        self, queue: str, ids: Sequence[int]
    ) -> list[tuple[int, str, str | None, bool, Any]]:
        from ..backends import step_statements as step_ops

        rows = self.db.fetch(step_ops.CHILD_OUTCOMES, step_ops.outcomes_params(queue, ids))
        return step_ops.parse_outcomes(rows)

    def cancel_children(self, queue: str, job_id: int) -> int:
        from ..backends import step_statements as step_ops

        rows = self.db.fetch(step_ops.CANCEL_CHILDREN, (queue, job_id))
        return int(rows[0][0] or 0) if rows else 0

    def job_workflow(self, queue: str, job_id: int) -> Any:
        from ..backends import step_statements as step_ops

        return step_ops.parse_workflow(self.db.fetch(step_ops.WORKFLOW, (queue, job_id)))

    def job_result(self, queue: str, job_id: int) -> tuple[bool, Any]:
        from ..backends import step_statements as step_ops

        return step_ops.parse_result(self.db.fetch(step_ops.RESULT, (queue, job_id)))

    def replay(self, queue: str, job_id: int) -> int | None:
        return ops.parse_replay(
            queue, job_id, self.db.fetch(ops.REPLAY, ops.replay_params(queue, job_id))
        )

    def replay_ruled(
        self, queue: str, job_id: int, *, window: float | None, replayable: bool
    ) -> tuple[int | None, str | None]:
        params = record_ops.replay_ruled_params(queue, job_id, window, replayable)
        return record_ops.parse_replay_ruled(self.db.fetch(record_ops.REPLAY_RULED, params))

    def retry_dead_ruled(
        self,
        queue: str,
        *,
        ids: Sequence[int] | None,
        limit: int,
        window: float | None,
        replayable: bool,
    ) -> list[tuple[int, int | None, str | None]]:
        params = record_ops.retry_dead_ruled_params(queue, ids, limit, window, replayable)
        rows = self.db.fetch(record_ops.RETRY_DEAD_RULED, params)
        return record_ops.parse_retry_dead_ruled(rows)

    # -- records and coded settlements -----------------------------------------------------

    def get_record(self, queue: str, job_id: int) -> JobRecord | None:
        rows = self.db.fetch(record_ops.GET, record_ops.get_params(queue, job_id))
        return record_ops.parse_get(rows)

    def list_records(
        self,
        queue: str | None,
        *,
        state: str | None,
        tenant: str | None,
        limit: int,
        before: Position | None,
    ) -> tuple[list[JobRecord], Position | None]:
        params = record_ops.list_params(queue, state, tenant, limit, before)
        return record_ops.parse_list(self.db.fetch(record_ops.LIST, params), limit)

    def cancel(self, queue: str, job_id: int) -> str | None:
        rows = self.db.fetch(record_ops.CANCEL, record_ops.cancel_params(queue, job_id))
        return record_ops.parse_cancel(rows)

    def stats(self, queues: Sequence[str]) -> dict[str, QueueStats]:
        return ops.parse_stats(self.db.fetch(ops.STATS, ops.stats_params(queues)))

    def list_dead(self, queue: str, *, limit: int, before: int | None) -> list[DeadJob]:
        rows = self.db.fetch(ops.LIST_DEAD, ops.list_dead_params(queue, limit, before))
        return ops.parse_list_dead(queue, rows)

    def retry_dead(self, queue: str, *, ids: Sequence[int] | None, limit: int) -> int:
        rows = self.db.fetch(ops.RETRY_DEAD, ops.retry_dead_params(queue, ids, limit))
        return ops.parse_retry_dead(rows)

    def purge_archive(
        self, queue: str, *, older_than: timedelta, dead_older_than: timedelta, batch: int
    ) -> int:
        rows = self.db.fetch(
            ops.PURGE_ARCHIVE,
            ops.purge_archive_params(queue, older_than, dead_older_than, batch),
        )
        return ops.parse_purge_archive(rows)

    # -- queue policies and payload rewrites (docs/policies.md) -----------------------------

    def bury(self, job: Job[Any], error: str, code: str) -> bool:
        from ..backends import policy_statements as policy_ops

        rows = self.db.fetch(
            policy_ops.BURY, policy_ops.bury_params(job.queue, job.id, job.attempts, error, code)
        )
        return policy_ops.parse_flag(rows)

    def live_payloads(self, queue: str, *, after: int, limit: int) -> list[tuple[int, Any]]:
        from ..backends import policy_statements as policy_ops

        rows = self.db.fetch(
            policy_ops.LIVE_PAYLOADS, policy_ops.live_payloads_params(queue, after, limit)
        )
        return policy_ops.parse_live_payloads(rows)

    def rewrite_payload(self, queue: str, job_id: int, old: Any, new: Any) -> bool:
        from ..backends import policy_statements as policy_ops

        rows = self.db.fetch(
            policy_ops.REWRITE_PAYLOAD, policy_ops.rewrite_payload_params(queue, job_id, old, new)
        )
        return policy_ops.parse_flag(rows)

    def ensure_policy(self, queue: str, row: Sequence[Any]) -> None:
        from ..backends import policy_statements as policy_ops

        self.db.fetch(policy_ops.ENSURE_POLICY, policy_ops.ensure_policy_params(row))

    def apply_retention(self, *, min_interval: float | None) -> int | None:
        from ..backends import policy_statements as policy_ops

        rows = self.db.fetch(policy_ops.APPLY_RETENTION, (min_interval,))
        return policy_ops.parse_retention(rows)

    # -- pause (docs/policies.md#pause) ----------------------------------------------------

    def pause(self, queue: str) -> bool:
        rows = self.db.fetch(pause_ops.PAUSE, pause_ops.queue_params(queue))
        return pause_ops.parse_changed(rows)

    def resume(self, queue: str) -> bool:
        rows = self.db.fetch(pause_ops.RESUME, pause_ops.queue_params(queue))
        return pause_ops.parse_changed(rows)

    def paused(self, queues: Sequence[str]) -> set[str]:
        rows = self.db.fetch(pause_ops.PAUSED, pause_ops.paused_params(queues))
        return pause_ops.parse_paused(rows)

    def flow_holds(self, jobs: Sequence[tuple[str, int]]) -> dict[tuple[str, int], str]:
        rows = self.db.fetch(pause_ops.FLOW_HOLDS, pause_ops.flow_holds_params(jobs))
        return pause_ops.parse_flow_holds(rows)

    def queue_holds(self, queues: Sequence[str]) -> tuple[set[str], dict[str, dict[str, int]]]:
        rows = self.db.fetch(pause_ops.QUEUE_HOLDS, pause_ops.paused_params(queues))
        return pause_ops.parse_queue_holds(rows)

    # -- schedules (drain scheduler; pg_cron answers through the same functions) ----------

    def schedule(
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
        self.db.fetch(
            schedule_ops.SCHEDULE,
            schedule_ops.schedule_params(name, cron, queue, payload, time_zone, next_run, tenant),
        )

    def unschedule(self, name: str) -> bool:
        rows = self.db.fetch(schedule_ops.UNSCHEDULE, schedule_ops.unschedule_params(name))
        return schedule_ops.parse_unschedule(rows)

    def list_schedules(self, *, prefix: str | None, tenant: str | None) -> list[ScheduleInfo]:
        rows = self.db.fetch(
            schedule_ops.LIST_SCHEDULES, schedule_ops.list_schedules_params(prefix, tenant)
        )
        return schedule_ops.parse_list_schedules(rows)

    def unschedule_tenant(self, tenant: str) -> int:
        rows = self.db.fetch(
            schedule_ops.UNSCHEDULE_TENANT, schedule_ops.unschedule_tenant_params(tenant)
        )
        return schedule_ops.parse_unschedule_tenant(rows)

    def due_schedules(self, *, lease: float, batch: int) -> list[DueSchedule]:
        """Due schedules now leased to us; ``advance_schedule`` needs their token."""
        rows = self.db.fetch(
            schedule_ops.DUE_SCHEDULES, schedule_ops.due_schedules_params(lease, batch)
        )
        return schedule_ops.parse_due_schedules(rows)

    def advance_schedule(
        self, name: str, ran: datetime | None, next_run: datetime | None, claim_token: Any
    ) -> bool:
        """Move a schedule we claimed to its next run; False when our claim is gone."""
        rows = self.db.fetch(
            schedule_ops.ADVANCE_SCHEDULE,
            schedule_ops.advance_schedule_params(name, ran, next_run, claim_token),
        )
        return schedule_ops.parse_advance_schedule(rows)
