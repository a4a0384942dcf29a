"""A typed handle on one queue of a :class:`~drainpipe.jobs.Jobs`: the same methods
without the queue argument, so a wrong payload type is a type-checker error."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ..engine.core import MAX_OUTAGE
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
from .client import Jobs, OnError
from .records import SEVEN_DAYS, THIRTY_DAYS

if TYPE_CHECKING:
    import asyncio

T = TypeVar("T")


class Queue(Generic[T]):
    """One queue of a :class:`Jobs`: the same methods without the queue argument."""

    def __init__(self, jobs: Jobs, name: str) -> None:
        self.jobs = jobs
        self.name = name

    async def enqueue(
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
        return await self.jobs.enqueue(
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

    async def enqueue_many(
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
        return await self.jobs.enqueue_many(
            self.name,
            payloads,
            delay=delay,
            run_at=run_at,
            max_attempts=max_attempts,
            context=context,
            key=key,
            priority=priority,
        )

    async def claim(self, *, batch: int = 1, lease: float | None = None) -> list[Job[Any]]:
        return await self.jobs.claim(self.name, batch=batch, lease=lease)

    async def complete(self, job: Job[Any]) -> bool:
        return await self.jobs.complete(job)

    async def fail(
        self, job: Job[Any], error: Any, *, retry_in: float | timedelta | None = None
    ) -> FailOutcome | None:
        return await self.jobs.fail(job, error, retry_in=retry_in)

    async def extend(self, job: Job[Any], lease: float | timedelta) -> bool:
        return await self.jobs.extend(job, lease)

    async def work(
        self,
        handler: Callable[[T, Job[T]], Awaitable[Any]],
        *,
        concurrency: int = 1,
        batch: int = 1,
        lease: float | None = None,
        poll_interval: float = 1.0,
        max_poll_interval: float = 30.0,
        stop: asyncio.Event | None = None,
        on_error: OnError | None = None,
        all_tenants: bool = False,
        heartbeat_every: float | None = None,
        max_outage: float | None = MAX_OUTAGE,
        step_margin: float | timedelta = 5.0,
    ) -> WorkReport:
        """:meth:`Jobs.work` on this queue."""
        return await self.jobs.work(
            self.name,
            handler,
            concurrency=concurrency,
            batch=batch,
            lease=lease,
            poll_interval=poll_interval,
            max_poll_interval=max_poll_interval,
            stop=stop,
            on_error=on_error,
            all_tenants=all_tenants,
            heartbeat_every=heartbeat_every,
            max_outage=max_outage,
            step_margin=step_margin,
        )

    async def drain(
        self,
        handler: Callable[[T, Job[T]], Awaitable[Any]],
        *,
        concurrency: int = 1,
        batch: int = 1,
        lease: float | Callable[[], float] | None = None,
        budget: float | None = None,
        on_error: OnError | None = None,
        all_tenants: bool = False,
        deadline: float | None = None,
        heartbeat_every: float | None = None,
        step_margin: float | timedelta = 5.0,
    ) -> WorkReport:
        """:meth:`Jobs.drain` on this queue."""
        return await self.jobs.drain(
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

    async def stats(self) -> QueueStats:
        return (await self.jobs.stats([self.name]))[self.name]

    async def list_dead(self, *, limit: int = 100, cursor: int | None = None) -> list[DeadJob]:
        return await self.jobs.list_dead(self.name, limit=limit, cursor=cursor)

    async def retry_dead(
        self, *, ids: Sequence[int] | None = None, limit: int = 1000
    ) -> ReplayReport:
        return await self.jobs.retry_dead(self.name, ids=ids, limit=limit)

    async def replay(self, job_id: int) -> int | None:
        return await self.jobs.replay(self.name, job_id)

    async def get(self, job_id: int) -> JobRecord | None:
        return await self.jobs.get(self.name, job_id)

    async def list_jobs(
        self,
        *,
        state: str | None = None,
        tenant: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> JobPage:
        return await self.jobs.list_jobs(
            self.name, state=state, tenant=tenant, limit=limit, cursor=cursor
        )

    async def cancel(self, job_id: int) -> bool:
        return await self.jobs.cancel(self.name, job_id)

    async def purge_archive(
        self,
        *,
        older_than: float | timedelta = SEVEN_DAYS,
        dead_older_than: float | timedelta = THIRTY_DAYS,
        batch: int = 10000,
    ) -> int:
        return await self.jobs.purge_archive(
            self.name, older_than=older_than, dead_older_than=dead_older_than, batch=batch
        )
