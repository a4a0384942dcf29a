"""What :class:`drainpipe.Jobs` and :class:`drainpipe.sync.Jobs` share: the queue and job
checks, payload validation and serialisation, and the checked arguments of every call.

Nothing here does I/O: each public call of either twin is "check with these rules, run
the :mod:`drainpipe.statements` statement on its executor", so both answer the same errors for
the same input before any SQL is sent, and store the same values.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from ..codes import PAYLOAD_INVALID
from ..context import add_flow, check_flow, coerce_context, wrap_payload
from ..db.json import dump_json
from ..errors import DrainpipeError, invalid_request, missing_feature, validation_error
from ..models import Job, JobContext
from ..validation import (
    INT8_MAX,
    MAX_PAYLOAD_BYTES,
    aware,
    check_queue_name,
    error_text,
    issue_summary,
    json_error,
    positive_int,
    pydantic_issues,
    seconds,
    storable_text,
    surrogate_fault,
)
from .cursor import cursor_key

if TYPE_CHECKING:
    from pydantic import TypeAdapter

    from .policy import QueuePolicy

#: The lease of a queue without a policy when none is given (section 2).
DEFAULT_LEASE = 300.0
SEVEN_DAYS = timedelta(days=7)
THIRTY_DAYS = timedelta(days=30)
MAX_DEDUPE_KEY = 255
#: ``list_dead`` answers at most this many dead letters per call.
MAX_DEAD_PAGE = 1000

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


def hand_over(item: Job[Any], validate: Callable[[Any], Any], all_tenants: bool) -> Any:
    """Validate a claimed job's payload and put it (and, under ``all_tenants``, a context
    that says so) into the job the handler receives; returns the validated payload. Both
    twins' workers call it once per job. A stored payload that no longer passes its schema
    fails the attempt with ``PAYLOAD_INVALID``."""
    try:
        payload = validate(item.payload)
    except DrainpipeError as exc:
        exc.code = exc.code or PAYLOAD_INVALID
        raise
    # The claimed Job has not left the worker yet, so it takes the validated payload in
    # place: building a second frozen dataclass per job costs a microsecond on this path.
    fields = item.__dict__
    fields["payload"] = payload
    if all_tenants:
        context = item.context
        if context.tenant is None and not context.all_tenants:
            fields["context"] = JobContext(
                actor=context.actor, tenant=None, all_tenants=True, trace=context.trace
            )
    return payload


def worker_lease(policy: QueuePolicy | None, lease: float | None) -> float:
    """``work``/``drain``'s lease (both twins), checked: the queue policy's default, capped
    at its ``max_lease`` (heartbeats keep a longer handler's job leased)."""
    if lease is not None:
        lease = seconds(lease, "lease")
    if policy is None:
        return DEFAULT_LEASE if lease is None else lease
    return policy.lease if lease is None else min(lease, policy.max_lease)


def _utcnow() -> datetime:
    return datetime.now(UTC)


class JobRules:
    """Queues, schemas and the checks of every jobs call, without a backend.

    ``queues`` maps each queue name to the payload schema (anything
    ``pydantic.TypeAdapter`` accepts). ``now`` is the clock for ``run_at`` and schedules.
    ``scheduler`` says which scheduler the ``jobs`` SQL module was installed with.
    ``cursor_secret`` signs ``list_jobs`` cursors (default: a random key per process).
    """

    def __init__(
        self,
        queues: Mapping[str, Any],
        *,
        now: Callable[[], datetime] | None = None,
        scheduler: Literal["drain", "pg_cron"] = "drain",
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
        self.scheduler: str = scheduler
        self._cursor_key = cursor_key(cursor_secret)

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
                raise validation_error(
                    f'Payload for queue "{queue}" is invalid: {issue_summary(issues, exc)}',
                    issues,
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

        to_python = SchemaSerializer(
            self._adapter(queue).core_schema, core_schema.CoreConfig(ser_json_inf_nan="constants")
        ).to_python
        max_bytes = self._payload_limit(queue)

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

    # -- what a queue policy changes (drainpipe.jobs.guard.PolicyMixin overrides these) --

    def _payload_limit(self, queue: str) -> int:
        """The most bytes a payload of ``queue`` may serialise to."""
        return MAX_PAYLOAD_BYTES

    def _store(self, queue: str, payload: Any, context: JobContext | None) -> Any:
        """The value stored for a serialised payload: its context envelope."""
        return wrap_payload(payload, context)

    def _check_delay(self, queue: str, delay: float) -> None:
        """Refuse a job that would run too far ahead (no limit without a policy)."""

    def _delay(self, delay: Any, run_at: Any) -> float:
        if delay is not None:
            return seconds(delay, "delay")
        if run_at is not None:
            return max(0.0, (aware(run_at, "run_at") - self._now()).total_seconds())
        return 0.0

    # -- the checked arguments of each call ----------------------------------------------

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
    ) -> tuple[Any, float]:
        """The stored value (validated, serialised, in its context envelope) and the delay."""
        self._check_queue(queue)
        key, priority = check_flow(key, priority)
        value = add_flow(
            self._store(queue, self.serialise(queue, payload), coerce_context(context)),
            key,
            priority,
        )
        wait = self._delay(delay, run_at)
        self._check_delay(queue, wait)
        positive_int(max_attempts, "max_attempts")
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
            if backend_name == "pgmq_public":
                raise missing_feature("dedupe_key", "pgmq_public")
        return value, wait

    def _flow_enqueue_args(
        self,
        queue: str,
        key: str | None,
        context: Any,
        delay: Any,
        run_at: Any,
        debounce: Any,
        throttle: Any,
    ) -> tuple[str, float | None, float | None]:
        """The key a debounced or throttled enqueue goes by (``key``, else the tenant) and
        the two windows in seconds; ``ValueError`` for bad values (docs/flow-control.md)."""
        if debounce is not None and throttle is not None:
            raise ValueError("debounce and throttle cannot be combined")
        windows: list[float | None] = []
        for name, value in (("debounce", debounce), ("throttle", throttle)):
            if value is None:
                windows.append(None)
                continue
            if isinstance(value, timedelta):
                value = value.total_seconds()
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value <= 0
            ):
                raise ValueError(f"{name} must be a positive number of seconds or a timedelta")
            windows.append(float(value))
        if debounce is not None and (delay is not None or run_at is not None):
            raise ValueError("debounce sets when the job runs: no delay or run_at with it")
        if debounce is not None:
            self._check_delay(queue, float(debounce))
        effective = key
        if effective is None:
            recorded = coerce_context(context)
            effective = recorded.tenant if recorded is not None else None
        if effective is None:
            raise ValueError("debounce and throttle need a key (or a tenant in the context)")
        return effective, windows[0], windows[1]

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
    ) -> tuple[list[Any], float]:
        """Every stored value (all validated before anything is sent) and the delay; an
        invalid payload's issue paths start with its index."""
        self._check_queue(queue)
        key, priority = check_flow(key, priority)
        if isinstance(payloads, str | bytes) or not isinstance(payloads, Sequence):
            raise validation_error(
                "payloads must be a sequence",
                [{"message": "Expected a list", "path": ["payloads"]}],
            )
        recorded = coerce_context(context)
        values = []
        for index, payload in enumerate(payloads):
            try:
                stored = self._store(queue, self.serialise(queue, payload), recorded)
                values.append(add_flow(stored, key, priority))
            except DrainpipeError as exc:
                for issue in exc.issues or []:
                    issue["path"] = [index, *issue.get("path", [])]
                raise
        wait = self._delay(delay, run_at)
        self._check_delay(queue, wait)
        positive_int(max_attempts, "max_attempts")
        return values, wait

    def _claim_args(self, queue: str, batch: Any, lease: Any) -> tuple[int, float]:
        self._check_queue(queue)
        return positive_int(batch, "batch"), seconds(lease, "lease")

    def _fail_args(self, job: Any, error: Any, retry_in: Any) -> tuple[str, float | None]:
        self._check_job(job)
        wait = None if retry_in is None else seconds(retry_in, "retry_in")
        return error_text(error), wait

    def _stats_names(self, queues: Sequence[str] | None) -> list[str]:
        return list(self._schemas) if queues is None else [self._check_queue(q) for q in queues]

    def _list_dead_args(self, queue: str, limit: Any, cursor: Any) -> tuple[int, int | None]:
        self._check_queue(queue)
        positive_int(limit, "limit", maximum=INT8_MAX)  # clamped below
        if cursor is not None:
            positive_int(cursor, "cursor", minimum=0, maximum=INT8_MAX)
        return min(limit, MAX_DEAD_PAGE), cursor

    def _retry_dead_args(self, queue: str, ids: Any, limit: Any) -> list[int] | None:
        self._check_queue(queue)
        positive_int(limit, "limit")
        if ids is None:
            return None
        return [positive_int(i, "ids", minimum=0, maximum=INT8_MAX) for i in ids]

    def _replay_args(self, queue: str, job_id: Any) -> int:
        self._check_queue(queue)
        return positive_int(job_id, "job_id", minimum=0, maximum=INT8_MAX)

    def _purge_args(
        self, queue: str, older_than: Any, dead_older_than: Any, batch: Any
    ) -> tuple[timedelta, timedelta]:
        self._check_queue(queue)
        positive_int(batch, "batch")
        return (
            timedelta(seconds=seconds(older_than, "older_than")),
            timedelta(seconds=seconds(dead_older_than, "dead_older_than")),
        )
