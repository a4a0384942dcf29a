"""Enqueue, claim, complete, fail and extend of :class:`~drainpipe.jobs.Jobs`: the checked
calls, over the policy rules and sealing of :class:`~drainpipe.jobs.guard.PolicyMixin`.

Straight-line on purpose: ``drainpipe.sync.enqueue`` is generated from this module
(``./scripts/sync-twin``), so both twins enqueue through one set of rules. Tracing stays
out of it (the telemetry imports asyncio): the async ``Jobs`` overrides ``_send``,
``_send_flow`` and ``_send_many`` to add the ``drainpipe.enqueue`` span; the sync calls
emit none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..codes import code_of
from ..models import DedupeMode, FailOutcome, Job, JobContext
from ..validation import seconds
from .guard import PolicyMixin, fail_within_window
from .job_rules import DEFAULT_LEASE

if TYPE_CHECKING:
    from ..backends import QueueBackend
    from ..backends.driver import Driver

__all__ = ["EnqueueMixin"]


class EnqueueMixin(PolicyMixin):
    """``enqueue``, ``enqueue_many``, ``claim``, ``complete``, ``fail`` and ``extend``;
    the checks are :class:`~drainpipe.jobs.job_rules.JobRules`' (a base of ``Jobs``)."""

    backend: QueueBackend
    driver: Driver
    _schemas: dict[str, Any]

    if TYPE_CHECKING:

        def serialise(self, queue: str, payload: Any) -> Any: ...
        def _check_job(self, job: Any) -> None: ...
        def _claim_args(self, queue: str, batch: Any, lease: Any) -> tuple[int, float]: ...
        def _fail_args(self, job: Any, error: Any, retry_in: Any) -> tuple[str, float | None]: ...
        def _enqueue_args(
            self,
            queue: str,
            payload: Any,
            delay: Any,
            run_at: Any,
            max_attempts: Any,
            dedupe_key: Any,
            dedupe: Any,
            context: Any,
            backend_name: str = "",
            key: Any = None,
            priority: Any = 0,
        ) -> tuple[Any, float]: ...
        def _flow_enqueue_args(
            self,
            queue: str,
            key: str | None,
            context: Any,
            delay: Any,
            run_at: Any,
            debounce: Any,
            throttle: Any,
        ) -> tuple[str, float | None, float | None]: ...
        def _enqueue_many_args(
            self,
            queue: str,
            payloads: Any,
            delay: Any,
            run_at: Any,
            max_attempts: Any,
            context: Any,
            key: Any = None,
            priority: Any = 0,
        ) -> tuple[list[Any], float]: ...

    async def enqueue(
        self,
        queue: str,
        payload: Any,
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
        """Validate and store a job; returns its id (the existing id on a dedupe hit).

        ``delay`` (seconds) wins over ``run_at`` (aware datetime). ``dedupe="always"``
        coalesces onto any live job with the key; ``"waiting"`` only onto a never-claimed one.
        ``max_attempts``: 5, or the queue policy's (a larger value is capped at it).
        ``key`` (at most 200 bytes; default: the context's tenant) names the job's
        flow-control group; ``priority`` (-100..100) orders claims, higher first
        (docs/flow-control.md). ``debounce=seconds`` (needs a key): the key's debounced job,
        while still queued, gets this payload and runs that long from now, and its id is
        returned; ``throttle=seconds``: one job accepted per key per window, a later
        enqueue in it returns the accepted job's id. Bad values raise ``ValueError``.
        """
        if (
            delay is None
            and run_at is None
            and max_attempts is None
            and dedupe_key is None
            and dedupe == "always"
            and context is None
            and key is None
            and priority == 0
            and debounce is None
            and throttle is None
            and queue in self._schemas
            and queue not in self._policies
        ):
            # the common call (every option at its default, a declared queue without a
            # policy): of _enqueue_args' checks only the payload's are left
            stored = self._store(queue, self.serialise(queue, payload), None)
            return await self._send(queue, stored, 0.0, 5, None, "always")
        max_attempts = self._max_attempts(queue, max_attempts)
        value, wait = self._enqueue_args(
            queue,
            payload,
            delay,
            run_at,
            max_attempts,
            dedupe_key,
            dedupe,
            context,
            self.driver.name,
            key,
            priority,
        )
        dedupe_key = self._stored_dedupe_key(queue, dedupe_key)
        if debounce is None and throttle is None:
            return await self._send(queue, value, wait, max_attempts, dedupe_key, dedupe)
        effective, debounce_s, throttle_s = self._flow_enqueue_args(
            queue, key, context, delay, run_at, debounce, throttle
        )
        return await self._send_flow(
            queue, value, wait, max_attempts, dedupe_key, dedupe, effective, debounce_s, throttle_s
        )

    async def _send(
        self,
        queue: str,
        value: Any,
        wait: float,
        max_attempts: int,
        dedupe_key: str | None,
        dedupe: DedupeMode,
    ) -> int:
        """Store one checked job (the async ``Jobs`` adds its span here)."""
        return await self.driver.send(
            queue,
            value,
            delay=wait,
            max_attempts=max_attempts,
            dedupe_key=dedupe_key,
            dedupe=dedupe,
        )

    async def _send_flow(
        self,
        queue: str,
        value: Any,
        wait: float,
        max_attempts: int,
        dedupe_key: str | None,
        dedupe: DedupeMode,
        key: str,
        debounce: float | None,
        throttle: float | None,
    ) -> int:
        """A debounced or throttled enqueue: one statement (docs/flow-control.md)."""
        return await self.driver.send_flow(
            queue,
            value,
            delay=wait,
            max_attempts=max_attempts,
            dedupe_key=dedupe_key,
            dedupe=dedupe,
            key=key,
            debounce=debounce,
            throttle=throttle,
        )

    async def enqueue_many(
        self,
        queue: str,
        payloads: Sequence[Any],
        *,
        delay: float | timedelta | None = None,
        run_at: datetime | None = None,
        max_attempts: int | None = None,
        context: JobContext | Mapping[str, Any] | None = None,
        key: str | None = None,
        priority: int = 0,
    ) -> list[int]:
        """Validate every payload first, then store them all in one round trip; ids in order.

        Nothing is stored when any payload fails validation (or a policy refuses the
        batch: all or nothing). No dedupe keys here; ``key`` and ``priority`` apply to
        every job (see :meth:`enqueue`).
        """
        max_attempts = self._max_attempts(queue, max_attempts)
        values, wait = self._enqueue_many_args(
            queue, payloads, delay, run_at, max_attempts, context, key, priority
        )
        if not values:
            return []
        return await self._send_many(queue, values, wait, max_attempts)

    async def _send_many(
        self, queue: str, values: list[Any], wait: float, max_attempts: int
    ) -> list[int]:
        sent = await self.driver.send_many(queue, values, delay=wait, max_attempts=max_attempts)
        return list(sent)

    # -- claim / complete / fail / extend ------------------------------------------------

    async def claim(
        self, queue: str, *, batch: int = 1, lease: float | None = None
    ) -> list[Job[Any]]:
        """Lease up to ``batch`` ready jobs for ``lease`` seconds (300, or the queue policy's
        ``lease``; over its ``max_lease`` → ``LEASE_TOO_LONG``). Payloads are not validated;
        sealed ones are decrypted, and one that does not decrypt ends dead
        (``PAYLOAD_UNREADABLE``) instead of being returned."""
        batch, length = self._claim_args(queue, batch, DEFAULT_LEASE if lease is None else lease)
        length = self._claim_lease(queue, None if lease is None else length)
        jobs = await self.driver.read(queue, lease=length, batch=batch)
        return jobs if self.keyring is None else await self._open_claimed(jobs)

    async def complete(self, job: Job[Any]) -> bool:
        """Archive a finished job. False: the lease was lost (claimed again), nothing changed."""
        self._check_job(job)
        return await self.driver.complete(job)

    async def fail(
        self, job: Job[Any], error: Any, *, retry_in: float | timedelta | None = None
    ) -> FailOutcome | None:
        """Record a failure: ``"queued"`` (retried after ``retry_in`` or the jittered
        backoff), ``"dead"`` (no attempts left) or ``None`` (the lease was lost or the job
        was cancelled). The attempt records ``error.code`` when it is a valid code, else
        ``HANDLER_ERROR``."""
        text, wait = self._fail_args(job, error, retry_in)
        driver = self.driver
        if job.queue in self._windowed:
            ended, wait, outcome = await fail_within_window(
                driver, self._policies[job.queue], job, text, wait
            )
            if ended:
                return outcome
        return await driver.fail_coded(job, text, wait, code=code_of(error), discard=False)

    async def extend(self, job: Job[Any], lease: float | timedelta) -> bool:
        """Move the lease end to now + ``lease`` seconds. False once the lease was lost."""
        self._check_job(job)
        wanted = self._claim_lease(job.queue, seconds(lease, "lease"))
        return await self.driver.extend(job, wanted)
