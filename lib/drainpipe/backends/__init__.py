"""Where jobs are stored: the :class:`QueueBackend` protocol and how ``Jobs(db)`` picks one.

Required: ``name``, ``leases``, ``send``, ``read``, ``complete``, ``fail``, ``extend``.
Everything else ``Jobs`` asks of a storage is the complete driver interface,
:class:`drainpipe.backends.driver.Driver`: the SQL and PostgREST (``drainpipe_api``)
backends implement all of it; any other backend is wrapped by
:mod:`drainpipe.backends.reduced`, whose one table says what each operation it lacks
answers (a stand-in, or ``invalid_request`` naming the feature).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from .capabilities import (
    SupportsAdvanceSchedule,
    SupportsBatches,
    SupportsBury,
    SupportsCompleteAndClaim,
    SupportsCompleteMany,
    SupportsDeadLetters,
    SupportsDueSchedules,
    SupportsExtendMany,
    SupportsListDead,
    SupportsListSchedules,
    SupportsPause,
    SupportsPayloadRewrite,
    SupportsPolicies,
    SupportsPurgeArchive,
    SupportsReplay,
    SupportsRetryDead,
    SupportsSchedule,
    SupportsScheduleRuns,
    SupportsSchedules,
    SupportsSendMany,
    SupportsStats,
    SupportsUnschedule,
    SupportsUnscheduleTenant,
    lacking,
)

if TYPE_CHECKING:
    from ..models import DedupeMode, FailOutcome, Job

__all__ = [
    "API_VERSION",
    "QueueBackend",
    "SupportsAdvanceSchedule",
    "SupportsBatches",
    "SupportsBury",
    "SupportsCompleteAndClaim",
    "SupportsCompleteMany",
    "SupportsDeadLetters",
    "SupportsDueSchedules",
    "SupportsExtendMany",
    "SupportsListDead",
    "SupportsListSchedules",
    "SupportsPause",
    "SupportsPayloadRewrite",
    "SupportsPolicies",
    "SupportsPurgeArchive",
    "SupportsReplay",
    "SupportsRetryDead",
    "SupportsSchedule",
    "SupportsScheduleRuns",
    "SupportsSchedules",
    "SupportsSendMany",
    "SupportsStats",
    "SupportsUnschedule",
    "SupportsUnscheduleTenant",
    "is_backend",
    "lacking",
    "resolve_backend",
]

API_VERSION = 1


@runtime_checkable
class QueueBackend(Protocol):
    """Stores and leases jobs. Payloads given to ``send`` are JSON values, already
    validated and wrapped in the context envelope; ``read`` returns unwrapped jobs whose
    payloads are not validated yet."""

    api_version: ClassVar[int]
    name: str
    leases: bool

    async def send(
        self,
        queue: str,
        payload: Any,
        *,
        delay: float = 0,
        max_attempts: int = 5,
        dedupe_key: str | None = None,
        dedupe: DedupeMode = "always",
    ) -> int: ...

    async def read(self, queue: str, *, lease: float, batch: int) -> list[Job[Any]]: ...

    async def complete(self, job: Job[Any]) -> bool: ...

    async def fail(
        self, job: Job[Any], error: str, retry_in: float | None = None
    ) -> FailOutcome | None: ...

    async def extend(self, job: Job[Any], lease: float) -> bool: ...


def is_backend(value: Any) -> bool:
    return getattr(value, "api_version", None) is not None and all(
        callable(getattr(value, name, None))
        for name in ("send", "read", "complete", "fail", "extend")
    )


def _is_supabase_client(value: Any) -> bool:
    module = type(value).__module__
    return module.startswith(("supabase", "postgrest")) or (
        hasattr(value, "rpc") and hasattr(value, "schema") and hasattr(value, "postgrest")
    )


def resolve_backend(db: Any, queues: Sequence[str] = ()) -> QueueBackend:
    """A backend for what the user gave: a backend as is, a supabase client → pgmq_public,
    anything else (DSN, pool, connection) → the SQL backend."""
    if is_backend(db):
        if getattr(db, "api_version", None) != API_VERSION:
            raise ValueError(f"QueueBackend api_version must be {API_VERSION}")
        return db  # type: ignore[no-any-return]
    if _is_supabase_client(db):
        from .pgmq_public import PgmqPublicBackend

        return PgmqPublicBackend(db)
    from .sql import SqlQueueBackend

    return SqlQueueBackend(db)
