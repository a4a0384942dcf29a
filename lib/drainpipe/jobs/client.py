"""Jobs: typed queues on Postgres with leases, fenced completion, retries and dead letters.

The checks and payload handling are :class:`~drainpipe.jobs.job_rules.JobRules`, shared with
the sync twin; this class runs the checked calls on its (async) backend."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

from ..backends import QueueBackend, resolve_backend
from ..backends.reduced import as_driver
from ..codes import code_of
from ..engine.core import MAX_OUTAGE
from ..models import DedupeMode, FailOutcome, Job, JobContext, WorkReport
from ..schedules import ScheduleMixin
from ..telemetry import active_telemetry
from ..validation import seconds
from .archive import ArchiveMixin
from .events import EventsMixin
from .guard import PolicyMixin, fail_within_window
from .job_rules import MAX_DEDUPE_KEY, SEVEN_DAYS, THIRTY_DAYS, JobRules
from .pause_calls import PauseMixin
from .record_calls import RecordsMixin
from .replay_calls import ReplaysMixin
from .replays import ReplayCheck, check_replay_check

if TYPE_CHECKING:
    from ..backends.driver import Driver
    from ..console.management_app import ManagementApp
    from ..keyring import Keyring
    from .drain_route import DrainRoute
    from .policy import QueuePolicy
    from .queue import Queue

__all__ = ["MAX_DEDUPE_KEY", "SEVEN_DAYS", "THIRTY_DAYS", "Handler", "Jobs", "OnError"]

T = TypeVar("T")
Handler = Callable[[Any, Job[Any]], Awaitable[Any]]
OnError = Callable[[BaseException, Job[Any] | None], Any]


class Jobs(
    ReplaysMixin,
    PauseMixin,
    PolicyMixin,
    JobRules,
    RecordsMixin,
    ScheduleMixin,
    ArchiveMixin,
    EventsMixin,
):
    """Typed job queues on a database (DSN, pool, connection), a supabase client or a backend.

    ``queues`` maps each queue name to the payload schema (anything
    ``pydantic.TypeAdapter`` accepts). ``now`` is the clock for ``run_at`` and schedules.
    ``scheduler`` says which scheduler the ``jobs`` SQL module was installed with.
    ``cursor_secret`` signs ``list_jobs`` cursors (default: a random key per process).
    ``policies`` maps queues to :class:`~drainpipe.QueuePolicy` (checked before sending;
    ``ensure_policies()`` makes the database enforce them too); ``keyring`` opens and seals
    the payloads of encrypted queues (docs/policies.md). ``replay_check(record) -> None |
    code`` (plain or async) runs before each replay; a code refuses it with 409 and that
    code (docs/policies.md#replaying-safely).
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
        self._replay_check = check_replay_check(replay_check)
        #: what the caller gave (or the backend built from it), as given
        self.backend: QueueBackend = resolve_backend(db, list(queues))
        #: every call goes here: the backend itself when complete, else it made complete
        #: by :mod:`drainpipe.backends.reduced` (what it lacks answers from one table)
        self.driver: Driver = as_driver(self.backend)

    # -- enqueue -------------------------------------------------------------------------

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
        otel = active_telemetry()
        if (
            otel is None
            and delay is None
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
            # policy, no tracing): of _enqueue_args' checks only the payload's are left
            return await self.driver.send(
                queue,
                self._store(queue, self.serialise(queue, payload), None),
                delay=0.0,
                max_attempts=5,
                dedupe_key=None,
                dedupe="always",
            )
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
        if debounce is not None or throttle is not None:
            return await self._send_flow(
                queue,
                value,
                wait,
                max_attempts,
                dedupe_key,
                dedupe,
                key,
                context,
                delay,
                run_at,
                debounce,
                throttle,
            )
        if otel is not None:
            driver = self.driver
            return await otel.enqueue(
                queue,
                value,
                lambda traced: driver.send(
                    queue,
                    traced,
                    delay=wait,
                    max_attempts=max_attempts,
                    dedupe_key=dedupe_key,
                    dedupe=dedupe,
                ),
            )
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
        key: str | None,
        context: Any,
        delay: Any,
        run_at: Any,
        debounce: Any,
        throttle: Any,
    ) -> int:
        """A debounced or throttled enqueue: one statement (docs/flow-control.md)."""
        effective, debounce_s, throttle_s = self._flow_enqueue_args(
            queue, key, context, delay, run_at, debounce, throttle
        )
        driver = self.driver

        async def send(stored: Any) -> int:
            return await driver.send_flow(
                queue,
                stored,
                delay=wait,
                max_attempts=max_attempts,
                dedupe_key=dedupe_key,
                dedupe=dedupe,
                key=effective,
                debounce=debounce_s,
                throttle=throttle_s,
            )

        otel = active_telemetry()
        if otel is None:
            return await send(value)
        # the same drainpipe.enqueue span as a plain enqueue, its context stored with the
        # payload: a debounced job runs under the trace of the enqueue that set its payload
        # last; a throttled enqueue inside its window stores nothing and the span names the
        # job it returned
        return await otel.enqueue(queue, value, send)

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
        if (otel := active_telemetry()) is not None:
            return await otel.enqueue_many(
                queue, values, lambda traced: self._send_many(queue, traced, wait, max_attempts)
            )
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
        batch, length = self._claim_args(queue, batch, 300 if lease is None else lease)
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

    # -- workers -------------------------------------------------------------------------

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
        from .worker import Worker, worker_lease

        self._check_queue(queue)
        policy = self._policies.get(queue)
        return await Worker(
            self,
            queue,
            handler,
            concurrency=concurrency,
            batch=batch,
            lease=worker_lease(policy, None if lease is None else seconds(lease, "lease")),
            poll_interval=poll_interval,
            max_poll_interval=max_poll_interval,
            stop=stop,
            on_error=on_error,
            all_tenants=all_tenants,
            heartbeat_every=heartbeat_every,
            max_outage=max_outage,
            step_margin=step_margin,
        ).run(until_empty=False)

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
        from .worker import Worker, worker_lease

        self._check_queue(queue)
        if not callable(lease):
            policy = self._policies.get(queue)
            lease = worker_lease(policy, None if lease is None else seconds(lease, "lease"))
        return await Worker(
            self,
            queue,
            handler,
            concurrency=concurrency,
            batch=batch,
            lease=lease,
            budget=budget,
            deadline=deadline,
            on_error=on_error,
            all_tenants=all_tenants,
            heartbeat_every=heartbeat_every,
            step_margin=step_margin,
        ).run(until_empty=True)

    # -- typed handles and the drain route -----------------------------------------------

    @overload
    def queue(self, name: str) -> Queue[Any]: ...
    @overload
    def queue(self, name: str, schema: type[T]) -> Queue[T]: ...

    def queue(self, name: str, schema: Any = None) -> Queue[Any]:
        """A handle bound to one queue. Pass the declared schema to get ``Queue[Model]``,
        so a wrong payload type is a type-checker error."""
        self._check_queue(name)
        if schema is not None and schema is not self._schemas[name]:
            raise ValueError(f'Queue "{name}" was declared with another schema')
        from .queue import Queue

        return Queue(self, name)

    async def close(self) -> None:
        """Release what this object opened for itself: the pool of a DSN it was given, the
        HTTP client of a URL-built PostgREST backend. Pools, connections and clients you
        passed in stay open. Also ``async with Jobs(...) as jobs:``."""
        db = getattr(self.backend, "db", None)
        close = getattr(db, "close", None) or getattr(self.backend, "aclose", None)
        if close is not None:
            await close()

    async def __aenter__(self) -> Jobs:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def drain_route(self, **options: Any) -> DrainRoute:
        """An ASGI app a cron caller hits: see :class:`drainpipe.jobs.drain_route.DrainRoute`."""
        from .drain_route import DrainRoute

        return DrainRoute(self, **options)

    def management_app(self, **options: Any) -> ManagementApp:
        """The Job Inbox's ASGI app (API, admin page): see :class:`drainpipe.console.management_app.ManagementApp`."""
        from ..console.management_app import ManagementApp

        return ManagementApp(self, **options)

    def executor_app(
        self,
        *,
        tokens: Mapping[str, Collection[str] | Literal["*"]],
        budget: float = 25.0,
        lease_secret: str | bytes | None = None,
        allowed_origins: Collection[str] | None = None,
    ) -> Any:
        """Private endpoints for executors that claim and settle jobs over HTTP with the
        agent inbox's pull protocol (docs/reference.md section 11): see :mod:`drainpipe.jobs.executor`."""
        from .executor import build_executor_app

        return build_executor_app(
            self,
            tokens=tokens,
            budget=budget,
            lease_secret=lease_secret,
            allowed_origins=allowed_origins,
        )
