"""``work`` for the sync twin: :class:`~drainpipe.sync.worker.SyncWorker` without an end.

``concurrency`` lanes are threads (the caller's and ``concurrency - 1`` more, all opened at
once); an empty claim waits ``poll_interval`` seconds, doubling to ``max_poll_interval``;
``stop`` is a ``threading.Event`` (any object with ``is_set`` and ``wait``), checked before
each claim and during every wait; transient claim errors are ridden out for
``max_outage`` seconds (default 300; None: the 3 retries ``drain`` makes), each reported to
``on_error``. Durable steps run as under ``drain``, with no budget: a job suspends only at
its ``sleep``, ``wait_for`` and ``join``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ..engine.core import MAX_OUTAGE, RunOptions
from ..jobs.job_rules import worker_lease
from ..models import WorkReport
from .worker import SyncHandler, SyncOnError, SyncWorker

if TYPE_CHECKING:
    from .jobs import Jobs
    from .steps import SyncJob

T = TypeVar("T")


class SyncWorkMixin:
    """``sync.Jobs.work``."""

    def work(
        self,
        queue: str,
        handler: SyncHandler,
        *,
        concurrency: int = 1,
        batch: int = 1,
        lease: float | None = None,
        poll_interval: float = 1.0,
        max_poll_interval: float = 30.0,
        stop: Any = None,
        on_error: SyncOnError | None = None,
        all_tenants: bool = False,
        heartbeat_every: float | None = None,
        max_outage: float | None = MAX_OUTAGE,
        step_margin: float | timedelta = 5.0,
    ) -> WorkReport:
        """Run ``handler(payload, job)`` (a plain function) on ``queue``'s jobs until
        ``stop`` (a ``threading.Event``) is set; see :mod:`drainpipe.sync.working`."""
        jobs: Jobs = self  # type: ignore[assignment]
        jobs._check_queue(queue)
        options = RunOptions.checked(
            concurrency=concurrency,
            batch=batch,
            lease=worker_lease(jobs.policy(queue), lease),
            poll_interval=poll_interval,
            max_poll_interval=max_poll_interval,
            stop=stop,
            on_error=on_error,
            all_tenants=all_tenants,
            heartbeat_every=heartbeat_every,
            max_outage=max_outage,
            step_margin=step_margin,
        )
        return SyncWorker(jobs, queue, handler, options, until_empty=False).run()


class QueueWorkMixin(Generic[T]):
    """``sync.Queue.work``."""

    jobs: Jobs
    name: str

    def work(
        self,
        handler: Callable[[T, SyncJob[T]], Any],
        *,
        concurrency: int = 1,
        batch: int = 1,
        lease: float | None = None,
        poll_interval: float = 1.0,
        max_poll_interval: float = 30.0,
        stop: Any = None,
        on_error: SyncOnError | None = None,
        all_tenants: bool = False,
        heartbeat_every: float | None = None,
        max_outage: float | None = MAX_OUTAGE,
        step_margin: float | timedelta = 5.0,
    ) -> WorkReport:
        """:meth:`Jobs.work` on this queue."""
        return self.jobs.work(
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
