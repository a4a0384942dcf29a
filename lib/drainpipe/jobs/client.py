"""Jobs: typed queues on Postgres with leases, fenced completion, retries and dead letters."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

from ..backends import (
    QueueBackend,
    SupportsSendMany,
    SupportsStats,
    lacking,
    resolve_backend,
)
from ..backends.capabilities import SupportsCodedSettle
from ..codes import code_of
from ..context import coerce_context
from ..db import dump_json
from ..engine.core import MAX_OUTAGE
from ..errors import DrainpipeError, invalid_request, missing_feature, validation_error
from ..models import DedupeMode, FailOutcome, Job, JobContext, QueueStats, WorkReport
from ..schedules import ScheduleMixin
from ..telemetry import active_telemetry
from ..validation import (
    INT8_MAX,
    MAX_PAYLOAD_BYTES,
    aware,
    check_queue_name,
    error_text,
    json_error,
    positive_int,
    pydantic_issues,
    seconds,
    storable_text,
    surrogate_fault,
)
from .cursor import cursor_key
from .dead_letters import SEVEN_DAYS, THIRTY_DAYS, DeadLetterMixin
from .guard import PolicyMixin, fail_within_window

if TYPE_CHECKING:
    from pydantic import TypeAdapter

    from ..drain import DrainRoute
    from ..keyring import Keyring
    from .policy import QueuePolicy
    from .queue import Queue

T = TypeVar("T")
Handler = Callable[[Any, Job[Any]], Awaitable[Any]]
OnError = Callable[[BaseException, Job[Any] | None], Any]

__all__ = ["SEVEN_DAYS", "THIRTY_DAYS", "Handler", "Jobs", "OnError"]

MAX_DEDUPE_KEY = 255


_REPLACEMENT = "\ufffd".encode()


def _surrogate_error(to_python: Callable[..., Any], value: Any) -> DrainpipeError | None:
    """The ``validation`` error naming where a validated payload holds a lone surrogate
    (looked for in its Python form, before pydantic's JSON mode replaces it), or None."""
    try:
        plain = to_python(value, mode="python", by_alias=True)
    except Exception:
        return None
    fault = surrogate_fault(plain)
    return None if fault is None else json_error(fault, "payload")


def _utcnow() -> datetime:
    return datetime.now(UTC)


class Jobs(PolicyMixin, DeadLetterMixin, ScheduleMixin):
    """Typed job queues on a database (DSN, pool, connection), a supabase client or a backend.

    ``queues`` maps each queue name to the payload schema (anything
    ``pydantic.TypeAdapter`` accepts). ``now`` is the clock for ``run_at`` and schedules.
    ``scheduler`` says which scheduler the ``jobs`` SQL module was installed with.
    ``policies`` maps queues to :class:`~drainpipe.QueuePolicy` (checked before sending;
    ``ensure_policies()`` makes the database enforce them too); ``keyring`` opens and seals
    the payloads of encrypted queues (docs/policies.md).
    ``cursor_secret`` signs ``list_jobs`` cursors (default: a random key per process).
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
    ) -> None:
        if not isinstance(queues, Mapping):
            raise TypeError("queues must be a mapping of queue name to payload schema")
        for name in queues:
            check_queue_name(name)
        if scheduler not in ("drain", "pg_cron"):
            raise ValueError(f'scheduler must be "drain" or "pg_cron", not "{scheduler}"')
        self._schemas: dict[str, Any] = dict(queues)
        self._adapters: dict[str, TypeAdapter[Any]] = {}
        self._validators: dict[str, Callable[[Any], Any]] = {}
        self._serialisers: dict[str, Callable[[Any], Any]] = {}
        self._now = now or _utcnow
        self.scheduler = scheduler
        self._init_policies(policies, keyring, list(queues))
        self._cursor_key = cursor_key(cursor_secret)
        self.backend: QueueBackend = resolve_backend(db, list(queues))

    # -- helpers -------------------------------------------------------------------------

    @property
    def queue_names(self) -> list[str]:
        return list(self._schemas)

    def _check_queue(self, queue: str) -> str:
        if queue not in self._schemas:
            raise invalid_request(f'Unknown queue "{queue}". Queues: {", ".join(self._schemas)}')
        return queue

    def _check_job(self, job: Any) -> None:
        """A settled job must be a claimed one: its id a bigint and its attempt (the fence)
        an integer Postgres holds, else SQL would look for a function of other types."""
        if not isinstance(job, Job):
            raise validation_error(
                f"job must be a Job (from claim), not {type(job).__name__}",
                [{"message": "Expected a Job", "path": ["job"]}],
            )
        self._check_queue(job.queue)
        positive_int(job.id, "job.id", minimum=0, maximum=INT8_MAX)
        positive_int(job.attempts, "job.attempts")

    def _adapter(self, queue: str) -> TypeAdapter[Any]:
        adapter = self._adapters.get(queue)
        if adapter is None:
            # built on first use: pydantic's import and schema build cost cold starts
            from pydantic import TypeAdapter

            adapter = self._adapters[queue] = TypeAdapter(self._schemas[queue])
        return adapter

    def validator(self, queue: str) -> Callable[[Any], Any]:
        """A function that validates payloads of ``queue`` (``validation`` error on failure);
        workers fetch it once instead of looking the schema up per job."""
        validate = self._validators.get(queue)
        if validate is None:
            validate = self._validators[queue] = self._make_validator(queue)
        return validate

    def _make_validator(self, queue: str) -> Callable[[Any], Any]:
        from pydantic import ValidationError

        # the core validator skips TypeAdapter's per-call wrapper (this runs once per job)
        validate_python = self._adapter(self._check_queue(queue)).validator.validate_python

        def validate(payload: Any) -> Any:
            try:
                return validate_python(payload)
            except ValidationError as exc:
                issues = pydantic_issues(exc)
                first = issues[0]["message"] if issues else str(exc)
                raise validation_error(
                    f'Payload for queue "{queue}" is invalid: {first}', issues
                ) from exc
            except Exception as exc:
                # pydantic lets anything but ValueError/AssertionError out of a custom
                # validator (a TypeError, a KeyError): still a payload that failed its checks
                raise validation_error(
                    f'Payload for queue "{queue}" is invalid: {error_text(exc)}',
                    [{"message": error_text(exc), "path": []}],
                ) from exc

        return validate

    def validate(self, queue: str, payload: Any) -> Any:
        """Validate ``payload`` against the queue's schema; returns the validated value."""
        return self.validator(queue)(payload)

    def serialise(self, queue: str, payload: Any) -> Any:
        """Validate and serialise a payload to the JSON value that is stored."""
        serialise = self._serialisers.get(queue)
        if serialise is None:
            serialise = self._serialisers[queue] = self._make_serialiser(queue)
        return serialise(payload)

    def _make_serialiser(self, queue: str) -> Callable[[Any], Any]:
        validate = self.validator(queue)
        # the core serializer skips TypeAdapter's per-call wrapper (this runs per enqueue).
        # Built again with NaN/Infinity kept as floats: pydantic's default writes them as
        # None, a silent change; kept, the stored-JSON check refuses them naming the path.
        from pydantic_core import SchemaSerializer, core_schema

        policy = self._policies.get(queue)
        max_bytes = MAX_PAYLOAD_BYTES if policy is None else policy.max_payload_bytes
        to_python = SchemaSerializer(
            self._adapter(queue).core_schema, core_schema.CoreConfig(ser_json_inf_nan="constants")
        ).to_python

        def serialise(payload: Any) -> Any:
            value = validate(payload)
            try:
                # by alias: the worker validates the stored value again, and a model with
                # aliases (Field(alias=...), an alias generator) only accepts its aliases
                stored = to_python(value, mode="json", by_alias=True)
            except Exception as exc:  # PydanticSerializationError, or a bad custom serializer
                raise _surrogate_error(to_python, value) or validation_error(
                    f'Payload for queue "{queue}" is not JSON-serialisable: {exc}',
                    [{"message": "Not JSON-serialisable", "path": ["payload"]}],
                ) from exc
            # serialised once here for every backend: what jsonb cannot hold exactly (NaN, a
            # lone surrogate, NUL, a depth past 254) and a payload over 1 MiB are refused
            # before anything is sent; the size check is a len() of these bytes
            data = dump_json(stored, max_bytes=max_bytes)
            # pydantic writes a dict key holding a lone surrogate as U+FFFD characters: a
            # payload whose JSON holds one is checked again, from its Python form
            if _REPLACEMENT in data:  # (a substring search: cheap)
                error = _surrogate_error(to_python, value)
                if error is not None:
                    raise error
            return stored

        return serialise

    def _delay(self, delay: Any, run_at: Any) -> float:
        if delay is not None:
            return seconds(delay, "delay")
        if run_at is not None:
            return max(0.0, (aware(run_at, "run_at") - self._now()).total_seconds())
        return 0.0

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
    ) -> int:
        """Validate and store a job; returns its id (the existing id on a dedupe hit).

        ``delay`` (seconds) wins over ``run_at`` (aware datetime). ``dedupe="always"``
        coalesces onto any live job with the key; ``"waiting"`` only onto a never-claimed one.
        ``max_attempts``: 5, or the queue policy's (a larger value is capped at it).
        """
        self._check_queue(queue)
        recorded = coerce_context(context)
        value = self._store(queue, self.serialise(queue, payload), recorded)
        wait = self._delay(delay, run_at)
        self._check_delay(queue, wait)
        max_attempts = positive_int(self._max_attempts(queue, max_attempts), "max_attempts")
        if dedupe not in ("always", "waiting"):
            raise validation_error(
                f'dedupe must be "always" or "waiting", not {dedupe!r}',
                [{"message": "Invalid dedupe mode", "path": ["dedupe"]}],
            )
        if dedupe_key is not None:
            if (
                not isinstance(dedupe_key, str)
                or not dedupe_key
                or len(dedupe_key) > MAX_DEDUPE_KEY
                or storable_text(dedupe_key) != dedupe_key
            ):
                raise validation_error(
                    f"dedupe_key must be a non-empty string of at most {MAX_DEDUPE_KEY} characters"
                    " (no NUL characters or lone surrogates)",
                    [{"message": "Invalid dedupe key", "path": ["dedupe_key"]}],
                )
            if getattr(self.backend, "name", "") == "pgmq_public":
                raise missing_feature("dedupe_key", "pgmq_public")
            dedupe_key = self._stored_dedupe_key(queue, dedupe_key)
        if (otel := active_telemetry()) is not None:
            backend = self.backend
            return await otel.enqueue(
                queue,
                value,
                lambda traced: backend.send(
                    queue,
                    traced,
                    delay=wait,
                    max_attempts=max_attempts,
                    dedupe_key=dedupe_key,
                    dedupe=dedupe,
                ),
            )
        return await self.backend.send(
            queue,
            value,
            delay=wait,
            max_attempts=max_attempts,
            dedupe_key=dedupe_key,
            dedupe=dedupe,
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
    ) -> list[int]:
        """Validate every payload first, then store them all in one round trip; ids in order.

        Nothing is stored when any payload fails validation (or a policy refuses the
        batch: all or nothing). No dedupe keys here.
        """
        self._check_queue(queue)
        if isinstance(payloads, str | bytes) or not isinstance(payloads, Sequence):
            raise validation_error(
                "payloads must be a sequence",
                [{"message": "Expected a list", "path": ["payloads"]}],
            )
        recorded = coerce_context(context)
        values = []
        for index, payload in enumerate(payloads):
            try:
                values.append(self._store(queue, self.serialise(queue, payload), recorded))
            except DrainpipeError as exc:
                for issue in exc.issues or []:
                    issue["path"] = [index, *issue.get("path", [])]
                raise
        wait = self._delay(delay, run_at)
        self._check_delay(queue, wait)
        max_attempts = positive_int(self._max_attempts(queue, max_attempts), "max_attempts")
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
        backend = self.backend
        if not isinstance(backend, SupportsSendMany):
            return [
                await backend.send(queue, value, delay=wait, max_attempts=max_attempts)
                for value in values
            ]
        return list(await backend.send_many(queue, values, delay=wait, max_attempts=max_attempts))

    # -- claim / complete / fail / extend ------------------------------------------------

    async def claim(
        self, queue: str, *, batch: int = 1, lease: float | None = None
    ) -> list[Job[Any]]:
        """Lease up to ``batch`` ready jobs for ``lease`` seconds (300, or the queue policy's
        ``lease``; over its ``max_lease`` → ``LEASE_TOO_LONG``). Payloads are not validated;
        sealed ones are decrypted, and one that does not decrypt ends dead
        (``PAYLOAD_UNREADABLE``) instead of being returned."""
        self._check_queue(queue)
        positive_int(batch, "batch")
        wanted = self._claim_lease(queue, None if lease is None else seconds(lease, "lease"))
        jobs = await self.backend.read(queue, lease=wanted, batch=batch)
        return jobs if self.keyring is None else await self._open_claimed(jobs)

    async def complete(self, job: Job[Any]) -> bool:
        """Archive a finished job. False: the lease was lost (claimed again), nothing changed."""
        self._check_job(job)
        return await self.backend.complete(job)

    async def fail(
        self, job: Job[Any], error: Any, *, retry_in: float | timedelta | None = None
    ) -> FailOutcome | None:
        """Record a failure: ``"queued"`` (retried after ``retry_in`` or the jittered
        backoff), ``"dead"`` (no attempts left) or ``None`` (the lease was lost or the job
        was cancelled). The attempt records ``error.code`` when it is a valid code, else
        ``HANDLER_ERROR``."""
        self._check_job(job)
        wait = None if retry_in is None else seconds(retry_in, "retry_in")
        backend = self.backend
        if job.queue in self._windowed:
            ended, wait, outcome = await fail_within_window(
                backend, self._policies[job.queue], job, error_text(error), wait
            )
            if ended:
                return outcome
        if isinstance(backend, SupportsCodedSettle):
            return await backend.fail_coded(
                job, error_text(error), wait, code=code_of(error), discard=False
            )
        return await backend.fail(job, error_text(error), wait)

    async def extend(self, job: Job[Any], lease: float | timedelta) -> bool:
        """Move the lease end to now + ``lease`` seconds. False once the lease was lost."""
        self._check_job(job)
        wanted = self._claim_lease(job.queue, seconds(lease, "lease"))
        return await self.backend.extend(job, wanted)

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
    ) -> WorkReport:
        """Run ``handler`` on jobs until ``stop`` (an ``asyncio.Event``) is set.

        Transient claim errors (the database restarting, a failover, a pooler restart) are
        ridden out for ``max_outage`` seconds (default 300; None: the 3 retries ``drain``
        makes), waiting with capped, jittered backoff and reporting each to ``on_error``;
        past it, or on any other claim error, the call raises."""
        from .worker import Worker

        self._check_queue(queue)
        return await Worker(
            self,
            queue,
            handler,
            concurrency=concurrency,
            batch=batch,
            lease=self._worker_lease(queue, None if lease is None else seconds(lease, "lease")),
            poll_interval=poll_interval,
            max_poll_interval=max_poll_interval,
            stop=stop,
            on_error=on_error,
            all_tenants=all_tenants,
            heartbeat_every=heartbeat_every,
            max_outage=max_outage,
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
    ) -> WorkReport:
        """Run ``handler`` until the queue has no ready job or ``budget`` seconds are spent
        (checked before each claim; claimed jobs always finish). ``deadline`` is an
        ``asyncio`` loop time that wins over ``budget`` when given. ``lease``: 300, or the
        queue policy's ``lease``, capped at its ``max_lease`` (heartbeats keep it held)."""
        from .worker import Worker

        self._check_queue(queue)
        if not callable(lease):
            lease = self._worker_lease(queue, None if lease is None else seconds(lease, "lease"))
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
        ).run(until_empty=True)

    # -- dead letters, stats, archive ----------------------------------------------------

    async def stats(self, queues: Sequence[str] | None = None) -> dict[str, QueueStats]:
        """Counts per queue (default: every declared queue) in one round trip."""
        names = list(self._schemas) if queues is None else [self._check_queue(q) for q in queues]
        backend = self.backend
        if not isinstance(backend, SupportsStats):
            raise lacking(backend, "stats")
        return dict(await backend.stats(names))

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
        """An ASGI app a cron caller hits: see :class:`drainpipe.drain.DrainRoute`."""
        from ..drain import DrainRoute

        return DrainRoute(self, **options)
