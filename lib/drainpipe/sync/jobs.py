"""``drainpipe.sync.Jobs``: :class:`drainpipe.Jobs` for synchronous code (Django, Flask,
plain Lambda handlers, scripts).

The checks are :class:`~drainpipe.jobs.job_rules.JobRules` and the statements
:mod:`drainpipe.statements`, both shared with the async twin, so the same call with the same
input answers the same result or the same error. Given a ``psycopg.Connection`` (Django's
``connection.connection``), the statements join its open transaction: an enqueue inside
``transaction.atomic()`` commits or rolls back with the view's own writes.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar, overload

from ..engine.core import RunOptions
from ..jobs.job_rules import SEVEN_DAYS, THIRTY_DAYS, JobRules, worker_lease
from ..jobs.replays import ReplayCheck, check_replay_check
from ..models import (
    DeadJob,
    DedupeMode,
    FailOutcome,
    Job,
    JobContext,
    JobPage,
    JobRecord,
    QueueStats,
    ReplayReport,
    WorkReport,
)
from .archive import SyncArchiveMixin
from .backend import SyncSqlBackend
from .enqueue import SyncEnqueueMixin
from .events import SyncEventsMixin
from .pause import SyncPauseMixin
from .records import SyncRecordsMixin
from .replays import SyncReplaysMixin
from .schedules import SyncScheduleMixin
from .worker import SyncHandler, SyncOnError, SyncWorker
from .working import QueueWorkMixin, SyncWorkMixin

if TYPE_CHECKING:
    from ..jobs.policy import QueuePolicy
    from ..keyring import Keyring
    from .steps import SyncJob

T = TypeVar("T")


class Jobs(
    SyncReplaysMixin,
    SyncPauseMixin,
    SyncEnqueueMixin,
    JobRules,
    SyncRecordsMixin,
    SyncScheduleMixin,
    SyncArchiveMixin,
    SyncEventsMixin,
    SyncWorkMixin,
):
    """Typed job queues on a DSN, a ``psycopg_pool.ConnectionPool`` or a
    ``psycopg.Connection`` (whose open transaction the statements join).

    ``queues``, ``now``, ``scheduler``, ``policies``, ``keyring``, ``cursor_secret`` and
    ``replay_check`` (a plain function here) mean what they mean for :class:`drainpipe.Jobs`.
    ``close()`` (or ``with Jobs(...) as jobs:``) closes the pool opened for a DSN.
    """

    def __init__(
        self,
        db: Any,
        queues: Mapping[str, Any],
        *,
        now: Callable[[], datetime] | None = None,
        scheduler: Literal["drain", "pg_cron"] = "drain",
        policies: Mapping[str, QueuePolicy] | None = None,
        keyring: Keyring | None = None,
        cursor_secret: str | bytes | None = None,
        replay_check: ReplayCheck | None = None,
    ) -> None:
        super().__init__(queues, now=now, scheduler=scheduler, cursor_secret=cursor_secret)
        self._init_policies(policies, keyring, list(queues))
        self.backend = SyncSqlBackend(db)
        # the generated mixins call the driver, as the async ones do: here the one backend
        self.driver = self.backend
        self._replay_check = check_replay_check(replay_check)

    # -- claim ---------------------------------------------------------------------------

    def claim(self, queue: str, *, batch: int = 1, lease: float | None = None) -> list[Job[Any]]:
        """:meth:`drainpipe.Jobs.claim`, each job a :class:`drainpipe.sync.Job` (its step
        calls say ``STEPS_UNAVAILABLE`` outside ``drain``)."""
        from .steps import as_sync_job

        return [as_sync_job(job, None) for job in super().claim(queue, batch=batch, lease=lease)]

    # -- drain ---------------------------------------------------------------------------

    def drain(
        self,
        queue: str,
        handler: SyncHandler,
        *,
        concurrency: int = 1,
        batch: int = 1,
        lease: float | None = None,
        budget: float | None = None,
        on_error: SyncOnError | None = None,
        all_tenants: bool = False,
        deadline: float | None = None,
        heartbeat_every: float | None = None,
        step_margin: float | timedelta = 5.0,
    ) -> WorkReport:
        """Run ``handler(payload, job)`` (a plain function) until the queue has no ready job
        or ``budget`` seconds are spent; heartbeats run on a thread. ``deadline`` is a
        ``time.monotonic()`` time to stop claiming at (the earlier of it and ``budget`` wins). ``lease``: 300 s
        when None. ``job`` is a :class:`drainpipe.sync.Job`: its durable steps need no
        ``await``; a job with less than ``step_margin`` seconds of the budget left suspends
        at its next step (eligible at once). See :mod:`drainpipe.sync.worker`."""
        self._check_queue(queue)
        options = RunOptions.checked(
            concurrency=concurrency,
            batch=batch,
            lease=worker_lease(self.policy(queue), lease),
            on_error=on_error,
            all_tenants=all_tenants,
            budget=budget,
            deadline=deadline,
            heartbeat_every=heartbeat_every,
            step_margin=step_margin,
        )
        return SyncWorker(self, queue, handler, options).run()

    # -- handles and lifetime ------------------------------------------------------------

    @overload
    def queue(self, name: str) -> Queue[Any]: ...
    @overload
    def queue(self, name: str, schema: type[T]) -> Queue[T]: ...

    def queue(self, name: str, schema: Any = None) -> Queue[Any]:
        """A handle bound to one queue (``Queue[Model]`` when given the declared schema)."""
        self._check_queue(name)
        if schema is not None and schema is not self._schemas[name]:
            raise ValueError(f'Queue "{name}" was declared with another schema')
        return Queue(self, name)

    def bound_to(self, db: Any) -> Jobs:
        """This object on another database handle, sharing its queues, schemas and built
        validators: ``jobs.bound_to(request_connection).enqueue(...)`` joins that
        connection's transaction (Django: ``drainpipe.contrib.django.connection()``).
        Closing the bound object closes nothing of yours."""
        bound = copy.copy(self)
        bound.backend = bound.driver = SyncSqlBackend(db)
        return bound

    def close(self) -> None:
        """Close the pool opened for a DSN; a pool or connection you passed stays open."""
        self.backend.db.close()

    def __enter__(self) -> Jobs:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class Queue(QueueWorkMixin[T], Generic[T]):
    """One queue of a sync :class:`Jobs`: the same methods without the queue argument."""

    def __init__(self, jobs: Jobs, name: str) -> None:
        self.jobs = jobs
        self.name = name

    def enqueue(
        self,
        payload: T,
        *,
        delay: float | timedelta | None = None,
        run_at: datetime | None = None,
        max_attempts: int | None = None,
        dedupe_key: str | None = None,
        dedupe: DedupeMode = "always",
        context: JobContext | Mapping[str, Any] | None = None,
        key: str | None = None,
        priority: int = 0,
        debounce: float | timedelta | None = None,
        throttle: float | timedelta | None = None,
    ) -> int:
        return self.jobs.enqueue(
            self.name,
            payload,
            delay=delay,
            run_at=run_at,
            max_attempts=max_attempts,
            dedupe_key=dedupe_key,
            dedupe=dedupe,
            context=context,
            key=key,
            priority=priority,
            debounce=debounce,
            throttle=throttle,
        )

    def enqueue_many(
        self,
        payloads: Sequence[T],
        *,
        delay: float | timedelta | None = None,
        run_at: datetime | None = None,
        max_attempts: int | None = None,
        context: JobContext | Mapping[str, Any] | None = None,
        key: str | None = None,
        priority: int = 0,
    ) -> list[int]:
        return self.jobs.enqueue_many(
            self.name,
            payloads,
            delay=delay,
            run_at=run_at,
            max_attempts=max_attempts,
            context=context,
            key=key,
            priority=priority,
        )

    def claim(self, *, batch: int = 1, lease: float | None = None) -> list[Job[Any]]:
        return self.jobs.claim(self.name, batch=batch, lease=lease)

    def complete(self, job: Job[Any]) -> bool:
        return self.jobs.complete(job)

    def fail(
        self, job: Job[Any], error: Any, *, retry_in: float | timedelta | None = None
    ) -> FailOutcome | None:
        return self.jobs.fail(job, error, retry_in=retry_in)

    def extend(self, job: Job[Any], lease: float | timedelta) -> bool:
        return self.jobs.extend(job, lease)

    def drain(
        self,
        handler: Callable[[T, SyncJob[T]], Any],
        *,
        concurrency: int = 1,
        batch: int = 1,
        lease: float | None = None,
        budget: float | None = None,
        on_error: SyncOnError | None = None,
        all_tenants: bool = False,
        deadline: float | None = None,
        heartbeat_every: float | None = None,
        step_margin: float | timedelta = 5.0,
    ) -> WorkReport:
        """:meth:`Jobs.drain` on this queue."""
        return self.jobs.drain(
            self.name,
            handler,
            concurrency=concurrency,
            batch=batch,
            lease=lease,
            budget=budget,
            on_error=on_error,
            all_tenants=all_tenants,
            deadline=deadline,
            heartbeat_every=heartbeat_every,
            step_margin=step_margin,
        )

    def stats(self) -> QueueStats:
        return self.jobs.stats([self.name])[self.name]

    def list_dead(self, *, limit: int = 100, cursor: int | None = None) -> list[DeadJob]:
        return self.jobs.list_dead(self.name, limit=limit, cursor=cursor)

    def retry_dead(self, *, ids: Sequence[int] | None = None, limit: int = 1000) -> ReplayReport:
        return self.jobs.retry_dead(self.name, ids=ids, limit=limit)

    def replay(self, job_id: int) -> int | None:
        return self.jobs.replay(self.name, job_id)

    def get(self, job_id: int) -> JobRecord | None:
        return self.jobs.get(self.name, job_id)

    def list_jobs(
        self,
        *,
        state: str | None = None,
        tenant: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> JobPage:
        return self.jobs.list_jobs(
            self.name, state=state, tenant=tenant, limit=limit, cursor=cursor
        )

    def cancel(self, job_id: int) -> bool:
        return self.jobs.cancel(self.name, job_id)

    def purge_archive(
        self,
        *,
        older_than: float | timedelta = SEVEN_DAYS,
        dead_older_than: float | timedelta = THIRTY_DAYS,
        batch: int = 10000,
    ) -> int:
        return self.jobs.purge_archive(
            self.name, older_than=older_than, dead_older_than=dead_older_than, batch=batch
        )
