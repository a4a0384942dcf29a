"""``Jobs.work`` and ``Jobs.drain``, and the jobs source of the lease engine behind them.

The loop itself (lanes, heartbeats, lost leases, claim retries, settling) is
:class:`drainpipe.engine.runner.Runner`; this module hands it the run's options (checked
once by :class:`~drainpipe.engine.core.RunOptions`, the queue's lease by
:func:`~drainpipe.jobs.job_rules.worker_lease`, as in the sync twin) and says how jobs are
claimed, extended, settled and handed to their handler. The runner and the step rules load with the first run: a function that only
enqueues does not import them.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

from ..codes import CANCELLED
from ..engine.core import JOB_HEARTBEAT_FLOOR, MAX_OUTAGE, RunOptions, run_deadline
from ..models import FailOutcome, Job, JobContext, WorkReport
from ..telemetry import active_telemetry
from .guard import bury, fail_within_window
from .job_rules import hand_over, worker_lease
from .policy import PAYLOAD_UNREADABLE, QueuePolicy

if TYPE_CHECKING:
    from ..engine.runner import ClaimableSource, Runner
    from .client import Handler, Jobs, OnError
    from .steps import StepRuntime

__all__ = ["JobSource", "WorkMixin", "Worker"]

log = logging.getLogger("drainpipe.jobs")


def _is_sealed(value: Any) -> bool:
    # sealing.is_sealed, inlined: the sealing module is imported only for sealed jobs
    return isinstance(value, dict) and value.get("$dp") == 1 and "sealed" in value


class _LazySteps:
    """What a claimed job's step calls reach before the run's step runtime exists: the first
    attribute asked for makes it (:attr:`JobSource.steps`), and later jobs get it directly."""

    __slots__ = ("_source",)

    def __init__(self, source: JobSource) -> None:
        self._source = source

    def __getattr__(self, name: str) -> Any:
        return getattr(self._source.steps, name)


class JobSource:
    """One queue as a :class:`~drainpipe.engine.runner.ClaimableSource`."""

    heartbeat_floor = JOB_HEARTBEAT_FLOOR
    complete_each = False
    concept = "jobs"
    log = log

    def __init__(
        self,
        jobs: Jobs,
        queue: str,
        handler: Handler,
        *,
        all_tenants: bool,
        step_margin: float = 5.0,
    ) -> None:
        driver = jobs.driver
        self.queue = self.name = queue
        self.leases = driver.leases
        # known once, so the per-job path skips inspect.isawaitable for async handlers
        self.async_handler = inspect.iscoroutinefunction(handler)
        self._handler = handler
        self._driver = driver
        # the runner sends a batch's completions with the next claim (one call)
        self._fused = driver.complete_and_claim
        self.skip = driver.skip
        self._validate = jobs.validator(queue)
        self._all_tenants = all_tenants
        self._keyring = jobs.keyring
        # ids whose payload did not decrypt in start(): their failure buries them
        self._unreadable: set[int] = set()
        self._policy = jobs._policies.get(queue)
        self._window = None if self._policy is None else self._policy.attempt_window
        #: durable steps (docs/steps.md), on drivers that record them: without, a handler's
        #: ``job.step`` says STEPS_UNAVAILABLE and returned values are not kept. The
        #: runtime is made on a handler's first step call (or a result to keep): a run whose
        #: handlers take no step never sets it up
        self.records_steps = "record_step" not in driver.lacks
        self._jobs = jobs
        self._step_margin = step_margin
        self._steps: StepRuntime | None = None
        self._workflow: Any = _LazySteps(self) if self.records_steps else None
        self._now = jobs._now
        #: the run's budget end (the runner's clock), for the steps' budget rule
        self.deadline: float | None = None
        if self.records_steps:
            # the runner keeps a handler's returned value only where this is set
            self.keep_result = self._keep_result

    @property
    def steps(self) -> StepRuntime:
        """The run's step runtime, made on first use."""
        if self._steps is None:
            from .steps import StepRuntime

            self._steps = StepRuntime(self._jobs, self.queue, step_margin=self._step_margin)
            self._steps.deadline = self.deadline
            self._workflow = self._steps
        return self._steps

    async def _keep_result(self, job: Job[Any], value: Any) -> None:
        """A handler's return value, kept as the job's result (``jobs.result``)."""
        await self.steps.keep_result(job, value)

    def _lease_end(self, lease: float) -> datetime:
        # the lease end as the steps' budget rule counts it: on the client's clock (the
        # Jobs' ``now``, so a test can move it), taken before the claim went out (so never
        # later than the stored one)
        return self._now() + timedelta(seconds=lease)

    def claim(self, batch: int, lease: float) -> Awaitable[list[Job[Any]]]:
        if not self.records_steps:
            return self._driver.read(self.queue, lease=lease, batch=batch)
        return self._leased(lease, batch)

    async def _leased(self, lease: float, batch: int) -> list[Job[Any]]:
        from .steprules import LEASE_END  # the step rules load with a run that records steps

        end = self._lease_end(lease)
        claimed: list[Job[Any]] = await self._driver.read(self.queue, lease=lease, batch=batch)
        for job in claimed:
            job.__dict__[LEASE_END] = end
        return claimed

    def complete_and_claim(
        self, items: Sequence[Job[Any]], batch: int, lease: float
    ) -> Awaitable[tuple[list[Job[Any]], list[Job[Any]]]]:
        if not self.records_steps:
            return self._fused(self.queue, items, lease=lease, batch=batch)
        return self._fused_leased(items, batch, lease)

    async def _fused_leased(
        self, items: Sequence[Job[Any]], batch: int, lease: float
    ) -> tuple[list[Job[Any]], list[Job[Any]]]:
        from .steprules import LEASE_END

        end = self._lease_end(lease)
        refused, claimed = await self._fused(self.queue, items, lease=lease, batch=batch)
        for job in claimed:
            job.__dict__[LEASE_END] = end
        return refused, claimed

    async def extend(self, items: Sequence[Job[Any]], lease: float) -> set[int]:
        end = self._lease_end(lease) if self.records_steps else None
        held = set(await self._driver.extend_many(items, lease))
        if end is not None:
            from .steprules import LEASE_END

            # a heartbeat moved these leases on: the budget rule counts from the new end
            for job in items:
                if job.id in held:
                    job.__dict__[LEASE_END] = end
        return held

    async def complete(self, items: Sequence[Job[Any]]) -> Sequence[Job[Any]]:
        if len(items) == 1:
            return () if await self._driver.complete(items[0]) else items
        done = await self._driver.complete_many(items)
        if all(done):
            return ()
        return [job for job, ok in zip(items, done, strict=True) if not ok]

    def fail(
        self,
        item: Job[Any],
        error: str,
        retry_in: float | None,
        code: str | None = None,
        discard: bool = False,
    ) -> Awaitable[Any]:
        if self._unreadable and item.id in self._unreadable:
            # its payload did not decrypt in start(): dead now, no retry
            self._unreadable.discard(item.id)
            return bury(self._driver, item, error, PAYLOAD_UNREADABLE)
        if self._window is not None and not discard:
            return self._fail_windowed(item, error, retry_in, code)
        return self._settle_failure(item, error, retry_in, code, discard)

    async def _fail_windowed(
        self, item: Job[Any], error: str, retry_in: float | None, code: str | None
    ) -> FailOutcome | None:
        ended, wait, outcome = await fail_within_window(
            self._driver, self._policy, item, error, retry_in
        )
        if ended:
            return outcome
        settled: FailOutcome | None = await self._settle_failure(item, error, wait, code, False)
        return settled

    def _settle_failure(
        self, item: Job[Any], error: str, retry_in: float | None, code: str | None, discard: bool
    ) -> Awaitable[Any]:
        if code is not None:
            return self._driver.fail_coded(item, error, retry_in, code=code, discard=discard)
        return self._driver.fail(item, error, retry_in)

    def _open(self, item: Job[Any]) -> None:
        """Decrypt a sealed payload in place; an unreadable one fails the job, which then
        ends dead (``PAYLOAD_UNREADABLE``) instead of being retried."""
        assert self._keyring is not None
        from ..keyring import UnreadableCiphertext
        from .sealing import open_stored, unreadable

        try:
            payload, context = open_stored(self._keyring, self.queue, item.payload)
        except UnreadableCiphertext as exc:
            self._unreadable.add(item.id)
            raise unreadable(item.id, self.queue, str(exc)) from None
        trace = item.context.trace
        if trace is not None:
            context = JobContext(actor=context.actor, tenant=context.tenant, trace=trace)
        # the claimed Job has not left the worker yet: it takes the opened payload in place
        fields = item.__dict__
        fields["payload"] = payload
        fields["context"] = context

    async def why_lost(self, items: Sequence[Job[Any]]) -> dict[int, str]:
        """``CANCELLED`` for the jobs an operator cancelled (read on the rare lost path)."""
        if "get_record" in self._driver.lacks:
            return {}  # a storage without records cannot say
        reasons = {}
        for job in items:
            record = await self._driver.get_record(job.queue, job.id)
            if record is not None and record.state == "cancelled":
                reasons[job.id] = CANCELLED
        return reasons

    def start(self, item: Job[Any]) -> Any:
        if self._keyring is not None and _is_sealed(item.payload):
            self._open(item)
        if self._workflow is not None:
            item.__dict__["_workflow"] = self._workflow
        return self._handler(hand_over(item, self._validate, self._all_tenants), item)

    def fields(self, item: Job[Any] | None) -> dict[str, Any]:
        """The ``extra`` of a log record about ``item`` (stable names: docs/observability.md)."""
        if item is None:
            return {"queue": self.queue, "job_id": None, "attempt": None}
        return {"queue": self.queue, "job_id": item.id, "attempt": item.attempts}

    def trace_of(self, item: Job[Any]) -> dict[str, str] | None:
        """The trace context stored with the job by the span that enqueued it."""
        return item.context.trace

    def describe(self, item: Job[Any] | None) -> str:
        if item is None:
            return f"queue {self.queue}"
        return f"queue {self.queue} job {item.id} (attempt {item.attempts}/{item.max_attempts})"


class Worker:
    """A :class:`Runner` over a :class:`JobSource`, with options checked once
    (:class:`~drainpipe.engine.core.RunOptions`). ``retry_unreached=False`` (the drain
    route) reports a database that never answered at once instead of retrying the first
    claim."""

    def __init__(
        self,
        jobs: Jobs,
        queue: str,
        handler: Handler,
        options: RunOptions,
        *,
        retry_unreached: bool = True,
    ) -> None:
        loop = asyncio.get_running_loop()
        jobs_source = JobSource(
            jobs, queue, handler, all_tenants=options.all_tenants, step_margin=options.step_margin
        )
        from ..engine.runner import Runner  # asyncio's loop machinery: with the first run

        source: ClaimableSource[Any] = jobs_source
        # chosen once per run: without a tracer or meter the jobs take the plain path
        if (otel := active_telemetry()) is not None:
            source = otel.traced(source)
        self.runner: Runner = Runner(
            source,
            concurrency=options.concurrency,
            batch=options.batch,
            lease=options.lease,
            poll_interval=options.poll_interval,
            max_poll_interval=options.max_poll_interval,
            stop=options.stop,
            on_error=options.on_error,
            deadline=run_deadline(loop.time(), options.budget, options.deadline),
            heartbeat_every=options.heartbeat_every,
            retry_unreached=retry_unreached,
            max_outage=options.max_outage,
        )
        # the budget rule: a step started with less than the margin left suspends
        jobs_source.deadline = self.runner.deadline

    @property
    def report(self) -> WorkReport:
        return self.runner.report

    async def run(self, *, until_empty: bool) -> WorkReport:
        return await self.runner.run(until_empty=until_empty)


class WorkMixin:
    """``work`` and ``drain`` of :class:`~drainpipe.jobs.Jobs`: the queue's lease (its
    policy's), the options checked, then a :class:`Worker` over them."""

    _policies: dict[str, QueuePolicy]

    if TYPE_CHECKING:

        def _check_queue(self, queue: str) -> str: ...

    async def work(
        self,
        queue: str,
        handler: Handler,
        *,
        concurrency: int = 1,
        batch: int = 1,
        lease: float | None = None,
        poll_interval: float = 1.0,
        max_poll_interval: float = 30.0,
        stop: Any = None,
        on_error: OnError | None = None,
        all_tenants: bool = False,
        heartbeat_every: float | None = None,
        max_outage: float | None = MAX_OUTAGE,
        step_margin: float | timedelta = 5.0,
    ) -> WorkReport:
        """Run ``handler`` on jobs until ``stop`` (an ``asyncio.Event``) is set.

        Transient claim errors (the database restarting, a failover, a pooler restart) are
        ridden out for ``max_outage`` seconds (default 300; None: the 3 retries ``drain``
        makes), waiting with capped, jittered backoff and reporting each to ``on_error``;
        past it, or on any other claim error, the call raises."""
        self._check_queue(queue)
        options = RunOptions.checked(
            concurrency=concurrency,
            batch=batch,
            lease=worker_lease(self._policies.get(queue), lease),
            poll_interval=poll_interval,
            max_poll_interval=max_poll_interval,
            stop=stop,
            on_error=on_error,
            all_tenants=all_tenants,
            heartbeat_every=heartbeat_every,
            max_outage=max_outage,
            step_margin=step_margin,
        )
        worker = Worker(cast("Jobs", self), queue, handler, options)  # a base of Jobs only
        return await worker.run(until_empty=False)

    async def drain(
        self,
        queue: str,
        handler: Handler,
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
        """Run ``handler`` until the queue has no ready job or ``budget`` seconds are spent
        (checked before each claim; claimed jobs always finish). ``deadline`` is an
        ``asyncio`` loop time that wins over ``budget`` when given. A job with less than
        ``step_margin`` seconds of the budget left suspends at its next step (eligible at
        once) instead of running past it (docs/steps.md)."""
        self._check_queue(queue)
        options = RunOptions.checked(
            concurrency=concurrency,
            batch=batch,
            lease=lease if callable(lease) else worker_lease(self._policies.get(queue), lease),
            on_error=on_error,
            all_tenants=all_tenants,
            budget=budget,
            deadline=deadline,
            heartbeat_every=heartbeat_every,
            step_margin=step_margin,
        )
        worker = Worker(cast("Jobs", self), queue, handler, options)  # a base of Jobs only
        return await worker.run(until_empty=True)
