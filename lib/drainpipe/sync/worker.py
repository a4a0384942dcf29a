"""``drain`` and ``work`` for the sync twin: plain-function handlers, heartbeats on a thread
(``work``: :mod:`drainpipe.sync.working`).

The semantics are the async runner's (:mod:`drainpipe.engine.runner`), computed with the
same pure core and reported the same way (:mod:`drainpipe.engine.core`):

* each lane claims ``batch`` jobs, runs them in order and completes the successes fenced,
  in the same call that claims its next batch (``complete_and_claim_jobs_v1``: one round
  trip and one transaction per batch; the lane's last completion goes alone); when that
  call fails, the successes are completed alone before the claim error is handled;
  ``concurrency`` lanes are threads (the first one is the caller's),
  the others opened once a claim comes back full (an empty drain is one round trip);
* while a batch runs, the lane's heartbeat thread extends every unsettled job of the batch every
  ``max(1, lease/2)`` seconds (or ``heartbeat_every``) in one round trip;
* a lost lease drops the job: no settlement is sent, ``on_error`` gets ``conflict`` /
  ``LEASE_LOST``. A thread cannot be cancelled, so a handler already running on it runs to
  its end and its result is discarded (the async twin cancels its task instead);
* a raising handler fails the job, recording its ``code`` (else ``HANDLER_ERROR``);
  ``Retry(after)`` fails it with that delay, ``Skip(code)`` succeeds it without its work,
  ``Discard(code)`` makes it dead now: none of the three is reported to ``on_error``;
* a job an operator cancelled while it ran is dropped like a lost lease, reported with
  code ``CANCELLED``;
* transient claim errors are retried 3 times per lane (``poll_interval``, doubling), any
  other claim error stops every lane and ``drain`` raises it;
* ``budget`` (seconds) is checked before each claim; claimed jobs always finish;
* durable steps (:mod:`drainpipe.sync.steps`): the handler gets a
  :class:`~drainpipe.sync.steps.SyncJob`; a run that suspends (``Suspend``) counts in
  ``report.suspended``, neither succeeded nor failed; with less than ``step_margin`` of the
  budget left a step suspends its job, eligible at once, and the lanes claim no more; a
  handler's JSON return value is kept as its job's result before the completion.
"""

from __future__ import annotations

import inspect
import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

from ..codes import CANCELLED, Discard, Skip, Suspend, code_of
from ..engine.core import (
    JOB_HEARTBEAT_FLOOR,
    RunOptions,
    as_error,
    budget_spent,
    check_hooks,
    claim_retry_wait,
    heartbeat_interval,
    lease_lost,
    log_error,
    next_idle_wait,
    outage_left,
    outage_wait,
    run_deadline,
    should_retry_claim,
)
from ..errors import TRANSIENT_KINDS, DrainpipeError, Retry
from ..jobs.job_rules import hand_over
from ..models import Job, WorkReport
from ..validation import error_text, seconds
from .lanes import Batch, Beats
from .policies import fail_within_window

if TYPE_CHECKING:
    from .jobs import Jobs
    from .steps import SyncJob

log = logging.getLogger("drainpipe.jobs")
_set_attribute = object.__setattr__

#: ``handler(payload, job)``: a plain function; ``job`` is a ``drainpipe.sync.Job``
SyncHandler = Callable[[Any, "SyncJob[Any]"], Any]
SyncOnError = Callable[[BaseException, Job[Any] | None], Any]


class SyncWorker:
    """One ``drain`` or ``work`` call: lanes over options checked once
    (:class:`~drainpipe.engine.core.RunOptions`), until the queue is empty or ``stop`` is set."""

    def __init__(
        self,
        jobs: Jobs,
        queue: str,
        handler: SyncHandler,
        options: RunOptions,
        *,
        until_empty: bool = True,
    ) -> None:
        if not callable(handler):
            raise TypeError("handler must be a function: handler(payload, job)")
        if inspect.iscoroutinefunction(handler):
            raise TypeError(
                "drainpipe.sync drains with plain functions; an async handler belongs to "
                "drainpipe.Jobs.drain"
            )
        check_hooks(options.stop, options.on_error, event="a threading.Event", item="job")
        self.queue = queue
        self.backend = jobs.backend
        self.handler = handler
        self.validate = jobs.validator(queue)
        #: a queue with an attempt_window: a retry that could only start after it ends dead
        self._policy = jobs.policy(queue)
        #: a keyring's Jobs opens sealed payloads as its claim does (an unreadable one ends
        #: dead with PAYLOAD_UNREADABLE and is left out of the batch)
        self._open_claimed = None if jobs.keyring is None else jobs._open_claimed
        self.concurrency = options.concurrency
        self.batch = options.batch
        # seconds: the sync calls take no lease callable (their lease check refuses one)
        self.lease = seconds(options.lease, "lease")
        self.poll_interval = options.poll_interval
        #: ``work``: poll when idle (doubling to ``max_poll_interval``) until ``stop`` is set,
        #: riding out transient claim errors for ``max_outage`` seconds (None: 3 retries)
        self.until_empty = until_empty
        self.stop = options.stop
        self.max_poll_interval = options.max_poll_interval
        self.max_outage = options.max_outage
        self.on_error: SyncOnError | None = options.on_error
        self.all_tenants = options.all_tenants
        self.every = heartbeat_interval(
            self.lease,
            options.heartbeat_every,
            JOB_HEARTBEAT_FLOOR if options.heartbeat_every is None else 0.0,
        )
        self.deadline = run_deadline(time.monotonic(), options.budget, options.deadline)
        from .steps import SyncJob, SyncStepRuntime  # the step rules load with a drain

        self._job_class = SyncJob
        # the sync twin's one backend is the SQL one, which records steps
        self.steps: SyncStepRuntime | None = SyncStepRuntime(
            jobs, queue, step_margin=options.step_margin
        )
        self.steps.deadline = self.deadline  # the budget rule: a time.monotonic() time
        self.report = WorkReport()
        self._count = threading.Lock()
        self._halt = threading.Event()
        self._fatal: BaseException | None = None
        self._spread = self.concurrency == 1
        self._others: list[threading.Thread] = []

    def run(self) -> WorkReport:
        """Claim and run jobs until none is ready or the budget is spent (``drain``), or
        until ``stop`` is set (``work``, whose lanes all open at once). A drain's other lanes
        open once a claim comes back full, so an empty drain costs one round trip."""
        if not self.until_empty:
            self._open_other_lanes()
        try:
            self._lane()
        except BaseException:
            # the caller's lane was interrupted (KeyboardInterrupt, SystemExit): the other
            # lanes stop at their next claim instead of keeping the call from returning
            self._halt.set()
            raise
        finally:
            with self._count:
                self._spread = True  # no lane opens from here on
                others = list(self._others)
            for thread in others:
                thread.join()
        if self._fatal is not None:
            raise self._fatal
        return self.report

    def _open_other_lanes(self) -> None:
        with self._count:
            if self._spread:
                return
            self._spread = True
            for n in range(1, self.concurrency):
                thread = threading.Thread(
                    target=self._lane, name=f"drainpipe-{self.queue}-{n}", daemon=True
                )
                thread.start()
                self._others.append(thread)

    def _lane(self) -> None:
        beats = Beats(self._heartbeat)
        try:
            self._claim_loop(beats)
        finally:
            beats.stop()

    def _stopping(self) -> bool:
        return self._halt.is_set() or (self.stop is not None and self.stop.is_set())

    def _sleep(self, delay: float) -> None:
        """Wait ``delay`` seconds, waking within 50 ms of a stop or a fatal error (one
        thread cannot wait on two events: the wait is sliced)."""
        end = time.monotonic() + delay
        while not self._stopping() and (left := end - time.monotonic()) > 0:
            self._halt.wait(min(left, 0.05))

    def _claim_loop(self, beats: Beats) -> None:
        retries = 0
        wait = self.poll_interval
        outage_started: float | None = None
        # the successes of the batch just run: completed by the next claim's call (one
        # round trip, one transaction), or alone when the lane stops
        done: list[Job[Any]] = []
        while not self._stopping():
            if budget_spent(time.monotonic(), self.deadline):
                self.report.budget_exhausted = True
                break
            try:
                if done:
                    refused, claimed = self.backend.complete_and_claim(
                        self.queue, done, lease=self.lease, batch=self.batch
                    )
                else:
                    refused = []
                    claimed = self.backend.read(self.queue, lease=self.lease, batch=self.batch)
            except Exception as exc:
                if done:  # nothing of the fused call committed: settle the finished work alone
                    self._settle(done)
                done = []
                error = as_error(exc)
                transient = error.kind in TRANSIENT_KINDS
                if transient and self.max_outage is not None:
                    now = time.monotonic()
                    outage_started = now if outage_started is None else outage_started
                    left = outage_left(outage_started, now, self.max_outage)
                    if left > 0:
                        retries += 1
                        self._report(error, None)
                        jitter = random.random()  # noqa: S311 - a retry spread, not a secret
                        self._sleep(min(left, outage_wait(retries, self.poll_interval, jitter)))
                        continue
                elif should_retry_claim(transient, retries):
                    retries += 1
                    self._sleep(claim_retry_wait(retries, self.poll_interval))
                    continue
                if self._fatal is None:
                    self._fatal = error
                self._halt.set()
                return
            done = []
            self._report_refused(refused)  # outside the try: reporting is not claiming
            if retries:  # the database is back: poll at the first interval again
                wait = self.poll_interval
            retries = 0
            outage_started = None
            if not claimed:
                if self.until_empty:
                    return
                self._sleep(wait)
                wait = next_idle_wait(wait, self.max_poll_interval)
                continue
            wait = self.poll_interval
            if len(claimed) >= self.batch and not self._spread:
                self._open_other_lanes()
            if self._open_claimed is not None:
                claimed = self._open_claimed(claimed)
            done = self._run_batch(claimed, beats)
        self._settle(done)

    # -- one batch ----------------------------------------------------------------------

    def _run_batch(self, claimed: Sequence[Job[Any]], beats: Beats) -> list[Job[Any]]:
        """Run a claimed batch; the jobs that succeeded and still hold their lease (for the
        caller to complete)."""
        batch = Batch(claimed)
        beats.put(batch)
        succeeded: list[Job[Any]] = []
        try:
            for job in claimed:
                if batch.is_lost(job):
                    self._report(self._lost(batch, job), job)
                    continue
                if self._run_one(batch, job):
                    succeeded.append(job)
                else:
                    batch.settled(job)
        finally:
            with batch.lock:
                # nothing left to extend: no beat marks a job of this batch lost from here
                batch.unfinished.clear()
            batch.done.set()
        kept = []
        for job in succeeded:
            if job.id in batch.lost:  # done, but taken over before it was settled
                self._report(self._lost(batch, job), job)
            else:
                kept.append(job)
        with self._count:
            self.report.succeeded += len(kept)
        return kept

    def _run_one(self, batch: Batch, job: Job[Any]) -> bool:
        """Run one job's handler; True when it returned normally and still holds its lease."""
        try:
            # the handler's job is a sync.Job (steps without await): the claimed object
            # itself, its class switched in place (steps.as_sync_job, inlined: per job)
            _set_attribute(job, "__class__", self._job_class)
            job.__dict__["_workflow"] = self.steps
            result = self.handler(
                hand_over(job, self.validate, self.all_tenants), cast("SyncJob[Any]", job)
            )
            if inspect.isawaitable(result):
                close = getattr(result, "close", None)
                if close is not None:
                    close()  # never awaited: no "coroutine was never awaited" warning
                raise TypeError(
                    "the handler returned an awaitable; drainpipe.sync drains with plain"
                    " functions (use drainpipe.Jobs.drain for async handlers)"
                )
            if result is not None and self.steps is not None:
                self.steps.keep_result(job, result)  # kept before the completion
        except Suspend as suspend:
            # suspended, its lease released in the same round trip: nothing to settle,
            # neither a success nor a failure
            batch.settled(job)
            with self._count:
                self.report.suspended += 1
            if suspend.budget:  # the budget is as good as spent: no lane claims more
                self.deadline = time.monotonic()
            return False
        except Retry as retry:
            if self._dropped(batch, job):
                return False
            self._failed(job, str(retry), retry.after, retry.code)
            return False
        except Skip as skip:
            if self._dropped(batch, job):
                return False
            batch.settled(job)
            try:
                done = self.backend.skip(job, skip.code)
            except Exception as exc:  # the job comes back when its lease ends
                self._report(exc, job)
                return False
            if done:
                with self._count:
                    self.report.succeeded += 1
            else:
                self._report(
                    lease_lost(self._describe(job), self._why_lost([job]).get(job.id)), job
                )
            return False
        except Discard as discard:
            if self._dropped(batch, job):
                return False
            self._failed(job, error_text(discard), None, discard.code, discard=True)
            return False
        except Exception as exc:
            if self._dropped(batch, job):
                return False
            self._failed(job, error_text(exc), None, code_of(exc))
            self._report(exc, job)
            return False
        return not self._dropped(batch, job)

    def _dropped(self, batch: Batch, job: Job[Any]) -> bool:
        if batch.is_lost(job):
            self._report(self._lost(batch, job), job)
            return True
        return False

    def _lost(self, batch: Batch, job: Job[Any]) -> DrainpipeError:
        with batch.lock:
            reason = batch.reasons.get(job.id)
        return lease_lost(self._describe(job), reason)

    def _why_lost(self, jobs: Sequence[Job[Any]]) -> dict[int, str]:
        """``CANCELLED`` for the jobs an operator cancelled (read on the rare lost path);
        empty when the question fails."""
        reasons = {}
        try:
            for job in jobs:
                record = self.backend.get_record(job.queue, job.id)
                if record is not None and record.state == "cancelled":
                    reasons[job.id] = CANCELLED
        except Exception:
            return {}
        return reasons

    def _failed(
        self,
        job: Job[Any],
        text: str,
        retry_in: float | None,
        code: str | None = None,
        *,
        discard: bool = False,
    ) -> None:
        with self._count:
            self.report.failed += 1
        try:
            if not discard and self._policy is not None and self._policy.attempt_window:
                ended, retry_in, _ = fail_within_window(
                    self.backend, self._policy, job, text, retry_in
                )
                if ended:  # dead with DEADLINE_PASSED
                    return
            if code is None:
                self.backend.fail(job, text, retry_in)
            else:
                self.backend.fail_coded(job, text, retry_in, code=code, discard=discard)
        except Exception as exc:  # the job comes back when its lease ends
            self._report(exc, job)

    def _heartbeat(self, batch: Batch) -> None:
        """Extend every unsettled job of the batch every ``self.every`` seconds."""
        while not batch.done.wait(self.every):
            with batch.lock:
                items = list(batch.unfinished.values())
            if not items:
                continue
            try:
                held = self.backend.extend_many(items, self.lease)
            except Exception:  # a missed beat is retried next time; the jobs keep running
                log.warning(
                    "drainpipe: heartbeat failed for queue %s",
                    self.queue,
                    exc_info=True,
                    extra={"queue": self.queue, "job_id": None, "attempt": None, "code": None},
                )
                continue
            gone = [job for job in items if job.id not in held]
            if not gone:
                continue
            reasons = self._why_lost(gone)
            with batch.lock:
                batch.reasons.update(reasons)
                for job in gone:
                    if job.id in batch.unfinished:
                        del batch.unfinished[job.id]
                        batch.lost.add(job.id)

    def _settle(self, succeeded: list[Job[Any]]) -> None:
        if not succeeded:
            return
        try:
            if len(succeeded) == 1:
                done = [self.backend.complete(succeeded[0])]
            else:
                done = self.backend.complete_many(succeeded)
        except Exception as exc:
            for job in succeeded:  # the handlers ran; the jobs come back after the lease
                self._report(exc, job)
            return
        self._report_refused([job for job, ok in zip(succeeded, done, strict=True) if not ok])

    def _report_refused(self, refused: list[Job[Any]]) -> None:
        """Completions the database refused: each reported as a lost lease, with its reason."""
        if not refused:
            return
        reasons = self._why_lost(refused)
        for job in refused:
            self._report(lease_lost(self._describe(job), reasons.get(job.id)), job)

    # -- reporting ----------------------------------------------------------------------

    def _describe(self, job: Job[Any] | None) -> str:
        if job is None:
            return f"queue {self.queue}"
        return f"queue {self.queue} job {job.id} (attempt {job.attempts}/{job.max_attempts})"

    def _report(self, error: BaseException, job: Job[Any] | None) -> None:
        if self.on_error is None:
            fields = {
                "queue": self.queue,
                "job_id": None if job is None else job.id,
                "attempt": None if job is None else job.attempts,
            }
            log_error(self._describe(job), error, logger=log, fields=fields)
            return
        try:
            self.on_error(error, job)
        except Exception:
            log.exception("drainpipe: on_error raised")
