"""The loop behind ``work`` and ``drain``: lanes that claim, run, heartbeat and finish jobs.

Each lane claims ``batch`` jobs and runs them in order. While a batch runs, one heartbeat
extends the lease of every job of the batch not yet finished in the database (in one round
trip). Jobs that succeeded are completed together when the batch ends (one round trip,
each still fenced by its attempt); failures are recorded as they happen.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .backends.capabilities import SupportsCompleteMany, SupportsExtendMany
from .errors import TRANSIENT_KINDS, DrainpipeError, Retry
from .models import Job, JobContext, WorkReport
from .validation import error_text, positive_int, seconds

if TYPE_CHECKING:
    from .jobs import Handler, Jobs, OnError

log = logging.getLogger("drainpipe")

CLAIM_RETRIES = 3


async def call_hook(hook: Callable[..., Any] | None, *args: Any) -> Any:
    """Call a plain or async hook; its own failure is logged, never raised."""
    if hook is None:
        return None
    try:
        result = hook(*args)
        if inspect.isawaitable(result):
            result = await result
        return result
    except Exception:
        log.exception("drainpipe: a hook raised")
        return None


class Worker:
    def __init__(
        self,
        jobs: Jobs,
        queue: str,
        handler: Handler,
        *,
        concurrency: int = 1,
        batch: int = 1,
        lease: float | Callable[[], float] = 300,
        poll_interval: float = 1.0,
        max_poll_interval: float = 30.0,
        stop: asyncio.Event | None = None,
        on_error: OnError | None = None,
        all_tenants: bool = False,
        budget: float | None = None,
        deadline: float | None = None,
        heartbeat_every: float | None = None,
    ) -> None:
        self.jobs = jobs
        self.backend = jobs.backend
        self.leases = bool(getattr(jobs.backend, "leases", False))
        self.queue = queue
        self.handler = handler
        # known once, so the per-job path skips inspect.isawaitable for async handlers
        self._async_handler = inspect.iscoroutinefunction(handler)
        self._validate = jobs.validator(queue)
        self.concurrency = max(1, positive_int(concurrency, "concurrency"))
        self.batch = positive_int(batch, "batch")
        self.lease = lease if callable(lease) else seconds(lease, "lease")
        self.poll_interval = seconds(poll_interval, "poll_interval")
        self.max_poll_interval = max(
            self.poll_interval, seconds(max_poll_interval, "max_poll_interval")
        )
        self.stop = stop
        self.on_error = on_error
        self.all_tenants = all_tenants
        self.heartbeat_every = (
            None if heartbeat_every is None else seconds(heartbeat_every, "heartbeat_every")
        )
        loop = asyncio.get_running_loop()
        if deadline is None and budget is not None:
            deadline = loop.time() + seconds(budget, "budget")
        self.deadline = deadline
        self.report = WorkReport()
        self._fatal: BaseException | None = None
        self._halt = asyncio.Event()  # set when a lane hit a fatal claim error

    # -- the lanes ----------------------------------------------------------------------

    async def run(self, *, until_empty: bool) -> WorkReport:
        # A drain starts with one lane and opens the others only once a claim comes back
        # full, so draining an empty queue costs one round trip, not one per lane.
        self._lanes: list[asyncio.Task[None]] = []
        self._spread = not until_empty or self.concurrency == 1
        self._until_empty = until_empty
        lanes = self.concurrency if self._spread else 1
        self._lanes += [asyncio.create_task(self._lane(until_empty)) for _ in range(lanes)]
        try:
            while pending := [lane for lane in self._lanes if not lane.done()]:
                await asyncio.wait(pending)
            for lane in self._lanes:
                lane.result()
        finally:
            for lane in self._lanes:
                lane.cancel()
        if self._fatal is not None:
            raise self._fatal
        return self.report

    def _open_other_lanes(self) -> None:
        if not self._spread:
            self._spread = True
            self._lanes += [
                asyncio.create_task(self._lane(self._until_empty))
                for _ in range(self.concurrency - 1)
            ]

    def _stopping(self) -> bool:
        return self._halt.is_set() or (self.stop is not None and self.stop.is_set())

    def _lease_seconds(self) -> float:
        return self.lease() if callable(self.lease) else self.lease

    async def _lane(self, until_empty: bool) -> None:
        loop = asyncio.get_running_loop()
        wait = self.poll_interval
        transient = 0
        while not self._stopping():
            if self.deadline is not None and loop.time() >= self.deadline:
                self.report.budget_exhausted = True
                return
            try:
                claimed = await self.backend.read(
                    self.queue, lease=self._lease_seconds(), batch=self.batch
                )
            except Exception as exc:
                error = (
                    exc
                    if isinstance(exc, DrainpipeError)
                    else DrainpipeError("unexpected", error_text(exc))
                )
                if error.kind in TRANSIENT_KINDS and transient < CLAIM_RETRIES:
                    transient += 1
                    await self._sleep(self.poll_interval * 2 ** (transient - 1))
                    continue
                if self._fatal is None:
                    if error is not exc:
                        error.__cause__ = exc
                    self._fatal = error
                self._halt.set()
                return
            transient = 0
            if not claimed:
                if until_empty:
                    return
                await self._sleep(wait)
                wait = min(wait * 2, self.max_poll_interval)
                continue
            wait = self.poll_interval
            if len(claimed) >= self.batch:
                self._open_other_lanes()
            await self._run_batch(claimed)

    async def _sleep(self, delay: float) -> None:
        """Sleep, waking early when the worker is told to stop."""
        waiters = [asyncio.ensure_future(self._halt.wait())]
        if self.stop is not None:
            waiters.append(asyncio.ensure_future(self.stop.wait()))
        try:
            await asyncio.wait(waiters, timeout=delay, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    # -- one batch ----------------------------------------------------------------------

    async def _run_batch(self, claimed: list[Job[Any]]) -> None:
        unfinished: dict[int, Job[Any]] = {job.id: job for job in claimed}
        beats: list[asyncio.Task[None]] = []
        first_beat = None
        if self.leases:
            # a timer, not a task: most batches finish before their first beat is due,
            # and a timer costs far less to set up and cancel on this hot path
            every = self.heartbeat_every or max(1.0, self._lease_seconds() / 2)
            first_beat = asyncio.get_running_loop().call_later(
                every, lambda: beats.append(asyncio.create_task(self._heartbeat(unfinished, every)))
            )
        succeeded: list[Job[Any]] = []
        try:
            for job in claimed:
                if await self._run_one(job):
                    succeeded.append(job)
                else:
                    unfinished.pop(job.id, None)
            self.report.succeeded += len(succeeded)
            await self._complete(succeeded)
        finally:
            unfinished.clear()
            if first_beat is not None:
                first_beat.cancel()
            for beat in beats:
                beat.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await beat

    async def _heartbeat(self, unfinished: dict[int, Job[Any]], every: float) -> None:
        """Extend every unfinished job of the batch now, then every ``every`` seconds."""
        extend_many = (
            self.backend.extend_many if isinstance(self.backend, SupportsExtendMany) else None
        )
        while True:
            jobs = list(unfinished.values())
            if jobs:
                try:
                    lease = self._lease_seconds()
                    if extend_many is not None:
                        await extend_many(jobs, lease)
                    else:
                        for job in jobs:
                            await self.backend.extend(job, lease)
                except Exception:  # a missed beat is retried next time; the job keeps running
                    log.warning(
                        "drainpipe: heartbeat failed for queue %s", self.queue, exc_info=True
                    )
            await asyncio.sleep(every)

    async def _complete(self, succeeded: list[Job[Any]]) -> None:
        if not succeeded:
            return
        complete_many = (
            self.backend.complete_many if isinstance(self.backend, SupportsCompleteMany) else None
        )
        try:
            if complete_many is not None and len(succeeded) > 1:
                await complete_many(succeeded)
            else:
                for job in succeeded:
                    await self.backend.complete(job)
        except Exception as exc:
            # the handlers ran; their jobs will be retried after the lease, so say so
            for job in succeeded:
                await call_hook(self.on_error, exc, job)

    async def _run_one(self, job: Job[Any]) -> bool:
        """Run one job; True when it succeeded (the caller counts and completes the
        succeeded ones together)."""
        try:
            payload = self._validate(job.payload)
        except Exception as invalid:  # a validator's own bug must not strand the batch
            await self._fail(job, invalid, None)
            return False
        # The claimed Job has not left the worker yet, so it takes the validated payload in
        # place: building a second frozen dataclass per job costs a microsecond on this path.
        fields = job.__dict__
        fields["payload"] = payload
        if self.all_tenants:
            context = job.context
            if context.tenant is None and not context.all_tenants:
                fields["context"] = JobContext(actor=context.actor, tenant=None, all_tenants=True)
        try:
            if self._async_handler:
                await self.handler(payload, job)
            else:
                result = self.handler(payload, job)
                if inspect.isawaitable(result):
                    await result
        except Retry as retry:
            await self._record_failure(job, str(retry), retry.after)
            self.report.failed += 1
            return False
        except Exception as exc:
            await self._fail(job, exc, None)
            return False
        return True

    async def _fail(self, job: Job[Any], error: BaseException, retry_in: float | None) -> None:
        self.report.failed += 1
        await self._record_failure(job, error_text(error), retry_in)
        await call_hook(self.on_error, error, job)

    async def _record_failure(self, job: Job[Any], text: str, retry_in: float | None) -> None:
        try:
            await self.backend.fail(job, text, retry_in)
        except Exception as exc:  # the job comes back when its lease ends
            await call_hook(self.on_error, exc, job)
