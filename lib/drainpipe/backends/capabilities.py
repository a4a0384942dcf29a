"""The pieces of :class:`~drainpipe.backends.driver.Driver`: one protocol per operation
group, so each operation has one typed signature.

River's driver interface is the model: every operation has a typed signature and typed,
frozen results (:class:`~drainpipe.models.QueueStats`, :class:`~drainpipe.models.DeadJob`,
:class:`~drainpipe.models.ScheduleInfo`, :class:`~drainpipe.models.DueSchedule`); a backend
parses its own rows into them. Call sites never test a backend against these protocols:
``Jobs`` talks to a complete driver, and a backend that lacks some operations is made one by
:mod:`drainpipe.backends.reduced`, the one place that says what each missing operation
answers. The protocols stay ``runtime_checkable`` for code written against them before.

Parameters stay keyword arguments rather than parameter objects: ``api_version = 1``
backends already take them that way, and the claim/complete hot path builds no extra
object per call.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..errors import DrainpipeError, missing_feature
from .step_operations import SupportsSteps

if TYPE_CHECKING:
    from ..models import (
        DeadJob,
        DedupeMode,
        DueSchedule,
        FailOutcome,
        Job,
        JobRecord,
        Position,
        QueueStats,
        ScheduleInfo,
    )

__all__ = [
    "SupportsAdvanceSchedule",
    "SupportsBatches",
    "SupportsBury",
    "SupportsCancel",
    "SupportsCodedSettle",
    "SupportsCompleteAndClaim",
    "SupportsCompleteMany",
    "SupportsDeadLetters",
    "SupportsDueSchedules",
    "SupportsExtendMany",
    "SupportsFlowEnqueue",
    "SupportsFlowHolds",
    "SupportsGetRecord",
    "SupportsListDead",
    "SupportsListRecords",
    "SupportsListSchedules",
    "SupportsPause",
    "SupportsPayloadRewrite",
    "SupportsPolicies",
    "SupportsPurgeArchive",
    "SupportsQueueHolds",
    "SupportsRecords",
    "SupportsReplay",
    "SupportsReplayRules",
    "SupportsRetryDead",
    "SupportsSchedule",
    "SupportsScheduleRuns",
    "SupportsSchedules",
    "SupportsSendMany",
    "SupportsStats",
    "SupportsSteps",
    "SupportsUnschedule",
    "SupportsUnscheduleTenant",
    "lacking",
]

# -- batches ------------------------------------------------------------------------------


@runtime_checkable
class SupportsSendMany(Protocol):
    async def send_many(
        self, queue: str, payloads: Sequence[Any], *, delay: float = 0, max_attempts: int = 5
    ) -> list[int]:
        """Store every payload in one round trip; the new ids, in order."""
        ...


@runtime_checkable
class SupportsCompleteMany(Protocol):
    async def complete_many(self, jobs: Sequence[Job[Any]]) -> list[bool]:
        """Complete jobs of one queue at once, each fenced by its attempt; one flag per job."""
        ...


@runtime_checkable
class SupportsCompleteAndClaim(Protocol):
    async def complete_and_claim(
        self, queue: str, jobs: Sequence[Job[Any]], *, lease: float, batch: int
    ) -> tuple[list[Job[Any]], list[Job[Any]]]:
        """Complete ``jobs`` of ``queue`` (each fenced by its attempt; none is fine) and claim
        up to ``batch`` jobs for ``lease`` seconds, atomically (both or neither happen);
        returns (the jobs whose completion was refused, the claimed jobs)."""
        ...


@runtime_checkable
class SupportsExtendMany(Protocol):
    async def extend_many(self, jobs: Sequence[Job[Any]], lease: float) -> set[int]:
        """Extend the leases of jobs of one queue; the ids still held."""
        ...


@runtime_checkable
class SupportsBatches(SupportsSendMany, SupportsCompleteMany, SupportsExtendMany, Protocol):
    """Every batched operation."""


# -- stats and dead letters ---------------------------------------------------------------


@runtime_checkable
class SupportsStats(Protocol):
    async def stats(self, queues: Sequence[str]) -> dict[str, QueueStats]:
        """Counts for each queue asked for, in one round trip."""
        ...


@runtime_checkable
class SupportsReplay(Protocol):
    async def replay(self, queue: str, job_id: int) -> int | None:
        """A dead letter enqueued again: its new id, or None when it is no dead letter."""
        ...


@runtime_checkable
class SupportsReplayRules(Protocol):
    """Replays under a queue policy's replay rules (docs/policies.md#replaying-safely): the
    caller's declared ``window``/``replayable`` on top of the rules the storage keeps."""

    async def replay_ruled(
        self, queue: str, job_id: int, *, window: float | None, replayable: bool
    ) -> tuple[int | None, str | None]:
        """(the child's id, None), or (None, why not: ``JOB_NOT_FOUND``, ``JOB_NOT_DEAD``,
        ``JOB_ALREADY_REPLAYED``, ``EVENT_EXPIRED``, ``REPLAY_BLOCKED``)."""
        ...

    async def retry_dead_ruled(
        self,
        queue: str,
        *,
        ids: Sequence[int] | None,
        limit: int,
        window: float | None,
        replayable: bool,
    ) -> list[tuple[int, int | None, str | None]]:
        """``replay_ruled`` for the given ids (at most ``limit``, newest first) or the newest
        ``limit`` dead letters: one (id, child id, code) per job tried."""
        ...


@runtime_checkable
class SupportsListDead(Protocol):
    async def list_dead(self, queue: str, *, limit: int, before: int | None) -> list[DeadJob]:
        """Dead letters newest first, only ids below ``before`` when given."""
        ...


@runtime_checkable
class SupportsRetryDead(Protocol):
    async def retry_dead(self, queue: str, *, ids: Sequence[int] | None, limit: int) -> int:
        """Replay the given dead letters (or the newest ``limit``); how many went back."""
        ...


@runtime_checkable
class SupportsPurgeArchive(Protocol):
    async def purge_archive(
        self, queue: str, *, older_than: timedelta, dead_older_than: timedelta, batch: int
    ) -> int:
        """Delete up to ``batch`` finished jobs past their age; how many were deleted."""
        ...


@runtime_checkable
class SupportsDeadLetters(
    SupportsReplay, SupportsListDead, SupportsRetryDead, SupportsPurgeArchive, Protocol
):
    """Every dead-letter and archive operation."""


# -- job records ----------------------------------------------------------------------------


@runtime_checkable
class SupportsGetRecord(Protocol):
    async def get_record(self, queue: str, job_id: int) -> JobRecord | None:
        """The job's record with its history; None when unknown or purged."""
        ...


@runtime_checkable
class SupportsListRecords(Protocol):
    async def list_records(
        self,
        queue: str | None,
        *,
        state: str | None,
        tenant: str | None,
        limit: int,
        before: Position | None,
    ) -> tuple[list[JobRecord], Position | None]:
        """Records newest first (history empty), after ``before``; the position after the
        last one, None when no more follow."""
        ...


@runtime_checkable
class SupportsCancel(Protocol):
    async def cancel(self, queue: str, job_id: int) -> str | None:
        """``"cancelled"``, ``"terminal"`` (finished already), None when unknown."""
        ...


@runtime_checkable
class SupportsRecords(SupportsGetRecord, SupportsListRecords, SupportsCancel, Protocol):
    """Every record operation."""


@runtime_checkable
class SupportsCodedSettle(Protocol):
    """Settlements that record a safe code: ``Skip``, ``Discard``, coded failures."""

    async def skip(self, job: Job[Any], code: str) -> bool:
        """Succeed the job without its work (outcome ``skipped``); False: not held."""
        ...

    async def fail_coded(
        self, job: Job[Any], error: str, retry_in: float | None, *, code: str, discard: bool
    ) -> FailOutcome | None:
        """``fail`` recording ``code``; ``discard``: dead now, whatever attempts are left."""
        ...


# -- queue policies and encrypted payloads -----------------------------------------------


@runtime_checkable
class SupportsBury(Protocol):
    async def bury(self, job: Job[Any], error: str, code: str) -> bool:
        """End a held job dead now, with ``code`` (no retry); False when the lease was lost."""
        ...


@runtime_checkable
class SupportsPayloadRewrite(Protocol):
    async def live_payloads(self, queue: str, *, after: int, limit: int) -> list[tuple[int, Any]]:
        """Live jobs' stored values (context envelope included) in id order after ``after``."""
        ...

    async def rewrite_payload(self, queue: str, job_id: int, old: Any, new: Any) -> bool:
        """Replace a live job's stored value if it is still ``old``."""
        ...


@runtime_checkable
class SupportsPolicies(Protocol):
    async def ensure_policy(self, queue: str, row: Sequence[Any]) -> None:
        """Store a queue's policy where the database's own checks read it."""
        ...

    async def apply_retention(self, *, min_interval: float | None) -> int | None:
        """Delete terminal records past their queue's retention; None when skipped because
        it ran less than ``min_interval`` seconds ago."""
        ...


@runtime_checkable
class SupportsPause(Protocol):
    """Pausing a queue: stored where every claim reads it (docs/policies.md#pause)."""

    async def pause(self, queue: str) -> bool:
        """Pause ``queue``; True when it was running."""
        ...

    async def resume(self, queue: str) -> bool:
        """Resume ``queue``; True when it was paused."""
        ...

    async def paused(self, queues: Sequence[str]) -> set[str]:
        """The paused ones of ``queues``."""
        ...


@runtime_checkable
class SupportsFlowEnqueue(Protocol):
    """Debounced and throttled enqueues (docs/flow-control.md#debounce-and-throttle)."""

    async def send_flow(
        self,
        queue: str,
        payload: Any,
        *,
        delay: float,
        max_attempts: int,
        dedupe_key: str | None,
        dedupe: DedupeMode,
        key: str,
        debounce: float | None,
        throttle: float | None,
    ) -> int:
        """The job's id: the key's debounced or accepted job, or a new one."""
        ...


@runtime_checkable
class SupportsFlowHolds(Protocol):
    """Why queued jobs of limited queues are held (docs/flow-control.md)."""

    async def flow_holds(self, jobs: Sequence[tuple[str, int]]) -> dict[tuple[str, int], str]:
        """``(queue, id) -> "order" | "concurrency" | "rate"`` for the held ones."""
        ...


@runtime_checkable
class SupportsQueueHolds(Protocol):
    """The drain route's report on its idle queues (docs/flow-control.md#what-held-means)."""

    async def queue_holds(
        self, queues: Sequence[str]
    ) -> tuple[set[str], dict[str, dict[str, int]]]:
        """(the paused ones of ``queues``, ``QueueStats.held`` of those with held jobs)."""
        ...


# -- schedules ----------------------------------------------------------------------------


@runtime_checkable
class SupportsSchedule(Protocol):
    async def schedule(
        self,
        name: str,
        cron: str,
        queue: str,
        payload: Any,
        *,
        time_zone: str,
        next_run: datetime | None,
        tenant: str | None,
    ) -> None:
        """Create or replace the schedule ``name`` (``payload`` is stored as given)."""
        ...


@runtime_checkable
class SupportsUnschedule(Protocol):
    async def unschedule(self, name: str) -> bool:
        """Remove a schedule; False when there was none."""
        ...


@runtime_checkable
class SupportsListSchedules(Protocol):
    async def list_schedules(
        self, *, prefix: str | None, tenant: str | None
    ) -> Sequence[ScheduleInfo]:
        """Schedules by name. (Backends from before this protocol may return 9-tuples in
        :class:`~drainpipe.models.ScheduleInfo`'s field order; they are still read.)"""
        ...


@runtime_checkable
class SupportsUnscheduleTenant(Protocol):
    async def unschedule_tenant(self, tenant: str) -> int:
        """Remove every schedule of ``tenant``; how many."""
        ...


@runtime_checkable
class SupportsDueSchedules(Protocol):
    async def due_schedules(self, *, lease: float, batch: int) -> Sequence[DueSchedule]:
        """Lease up to ``batch`` due schedules for ``lease`` seconds. (8-tuples in
        :class:`~drainpipe.models.DueSchedule`'s field order are still read.)"""
        ...


@runtime_checkable
class SupportsAdvanceSchedule(Protocol):
    async def advance_schedule(
        self, name: str, ran: datetime | None, next_run: datetime | None, claim_token: Any
    ) -> bool:
        """Move a schedule this claim leased to ``next_run``; False when the claim is gone."""
        ...


@runtime_checkable
class SupportsScheduleRuns(SupportsDueSchedules, SupportsAdvanceSchedule, Protocol):
    """What ``run_schedules`` needs: lease the due schedules, then advance each."""


@runtime_checkable
class SupportsSchedules(
    SupportsSchedule,
    SupportsUnschedule,
    SupportsListSchedules,
    SupportsUnscheduleTenant,
    SupportsScheduleRuns,
    Protocol,
):
    """Every schedule operation (the drain scheduler)."""


def lacking(backend: Any, feature: str) -> DrainpipeError:
    """The contract's answer for a ``feature`` the backend lacks: ``invalid_request``
    naming the feature and the backend (raised by :mod:`drainpipe.backends.reduced`)."""
    return missing_feature(feature, str(getattr(backend, "name", None) or "custom"))
