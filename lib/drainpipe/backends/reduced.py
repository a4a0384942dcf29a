"""A backend that lacks operations, made a complete :class:`~drainpipe.backends.driver.Driver`.

``pgmq_public`` (PostgREST over pgmq's own schema), the in-memory backend of
:mod:`drainpipe.testing` and custom :class:`~drainpipe.backends.QueueBackend` classes
implement part of the driver. :func:`as_driver` wraps them in a :class:`ReducedDriver`: every
operation the backend has is its own bound method (no extra hop on the hot path), and every
one it lacks answers as :data:`MISSING` states, the one place that says what a reduced
backend cannot do. A refusal is the contract's ``invalid_request`` naming the public feature
and the backend (docs/reference.md#backends), raised before anything is sent; a stand-in
answers from the operations the backend has, as the calls did before the driver existed.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar, cast

from ..errors import DrainpipeError, missing_feature
from .driver import OPERATIONS

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
    from . import QueueBackend
    from .driver import Driver

__all__ = ["MISSING", "MissingFeature", "ReducedDriver", "as_driver", "refused_as"]

_REFUSED = "refused: invalid_request naming "

#: What a reduced driver answers for each operation its backend lacks.
MISSING: Mapping[str, str] = {
    "send_many": "one send per payload",
    "complete_many": "one complete per job",
    "extend_many": "one extend per job",
    "complete_and_claim": "a claim, then one complete per job (a failed claim completes none)",
    "skip": "complete (a plain success)",
    "fail_coded": "fail (the code is not recorded)",
    "bury": "fail_coded discarding the job, else complete (the only terminal state)",
    "send_flow": _REFUSED + '"debounce" or "throttle"',
    "flow_holds": "none held",
    "queue_holds": "the paused ones (paused), none held",
    "stats": _REFUSED + '"stats"',
    "replay": _REFUSED + '"replay"',
    "replay_ruled": 'replay when the queue has no replay rules, else refused: "replay rules"',
    "retry_dead_ruled": 'refused: "replay rules" (Jobs.retry_dead counts with retry_dead)',
    "list_dead": _REFUSED + '"list_dead"',
    "retry_dead": _REFUSED + '"retry_dead"',
    "purge_archive": _REFUSED + '"purge_archive"',
    "get_record": _REFUSED + '"get"',
    "list_records": _REFUSED + '"list_jobs"',
    "cancel": _REFUSED + '"cancel"',
    "ensure_policy": _REFUSED + '"ensure_policies"',
    "apply_retention": _REFUSED + '"apply_retention"; skipped (None) when run if due',
    "live_payloads": _REFUSED + '"reencrypt"',
    "rewrite_payload": _REFUSED + '"reencrypt"',
    "pause": _REFUSED + '"pause"',
    "resume": _REFUSED + '"resume"',
    "paused": "none paused",
    "schedule": _REFUSED + '"schedule"',
    "unschedule": _REFUSED + '"unschedule"',
    "list_schedules": _REFUSED + '"list_schedules"',
    "unschedule_tenant": _REFUSED + '"unschedule_all"',
    "due_schedules": "none due (also when advance_schedule is missing)",
    "advance_schedule": 'refused: "run_schedules" (also when due_schedules is missing)',
    "load_steps": _REFUSED + '"steps"',
    "record_step": _REFUSED + '"steps"',
    "suspend": _REFUSED + '"steps"',
    "wait_event": _REFUSED + '"steps"',
    "spawn": _REFUSED + '"steps"',
    "join": _REFUSED + '"steps"',
    "child_outcomes": _REFUSED + '"steps"',
    "emit": _REFUSED + '"emit"',
    "cancel_children": _REFUSED + '"cancel(children=True)"',
    "job_workflow": "no steps (None)",
    "job_result": _REFUSED + '"result"',
}

#: Operations a reduced driver takes from its backend only together: a schedule run leases
#: with one and advances with the other.
_TOGETHER = (("due_schedules", "advance_schedule"),)


class MissingFeature(DrainpipeError):
    """The contract's ``invalid_request`` for an operation a reduced backend lacks (the
    message names the feature and the backend; no code)."""

    def __init__(self, feature: str, backend: str) -> None:
        error = missing_feature(feature, backend)
        super().__init__(error.kind, error.message, code=error.code)
        self.feature = feature
        self.backend = backend

    def __reduce__(self) -> tuple[type[MissingFeature], tuple[str, str]]:
        # built from (feature, backend), not from the message: so it pickles and copies
        return MissingFeature, (self.feature, self.backend)


@contextmanager
def refused_as(feature: str) -> Iterator[None]:
    """Name ``feature`` (the public call) in a refusal raised by the operations inside,
    for a call built from several operations (``ensure_schedules``)."""
    try:
        yield
    except MissingFeature as missing:
        raise MissingFeature(feature, missing.backend) from None


def as_driver(backend: QueueBackend) -> Driver:
    """``backend`` itself when it has every operation, else a :class:`ReducedDriver`."""
    if all(callable(getattr(backend, name, None)) for name in OPERATIONS):
        if not isinstance(getattr(backend, "lacks", None), frozenset):
            return ReducedDriver(backend)  # complete, but written before ``lacks``
        return cast("Driver", backend)
    return ReducedDriver(backend)


class ReducedDriver:
    """A complete driver over a backend that implements part of it (see :data:`MISSING`).

    ``backend`` is the wrapped object; ``lacks`` the operations answered from the table."""

    api_version: ClassVar[int] = 1

    def __init__(self, backend: QueueBackend) -> None:
        self.backend = backend
        self.name = str(getattr(backend, "name", None) or "custom")
        self.leases = bool(getattr(backend, "leases", False))
        self.send = backend.send
        self.read = backend.read
        self.complete = backend.complete
        self.fail = backend.fail
        self.extend = backend.extend
        lacking = {name for name in OPERATIONS if not callable(getattr(backend, name, None))}
        for group in _TOGETHER:
            if lacking.intersection(group):
                lacking.update(group)
        for name in OPERATIONS:
            if name not in lacking:
                # an instance attribute: the backend's own bound method answers directly
                setattr(self, name, getattr(backend, name))
        self.lacks = frozenset(lacking)

    def _refuse(self, feature: str) -> MissingFeature:
        return MissingFeature(feature, self.name)

    # -- stand-ins built from the required operations --------------------------------------

    async def send_many(
        self, queue: str, payloads: Sequence[Any], *, delay: float = 0, max_attempts: int = 5
    ) -> list[int]:
        return [
            await self.send(queue, payload, delay=delay, max_attempts=max_attempts)
            for payload in payloads
        ]

    async def complete_many(self, jobs: Sequence[Job[Any]]) -> list[bool]:
        return [bool(await self.complete(job)) for job in jobs]

    async def extend_many(self, jobs: Sequence[Job[Any]], lease: float) -> set[int]:
        return {job.id for job in jobs if await self.extend(job, lease)}

    async def complete_and_claim(
        self, queue: str, jobs: Sequence[Job[Any]], *, lease: float, batch: int
    ) -> tuple[list[Job[Any]], list[Job[Any]]]:
        # claimed first: a claim that fails has completed nothing, so the caller settles
        # ``jobs`` on its own, as it does after a failed fused call
        claimed = list(await self.read(queue, lease=lease, batch=batch))
        done = await self.complete_many(jobs)
        return [job for job, ok in zip(jobs, done, strict=True) if not ok], claimed

    async def skip(self, job: Job[Any], code: str) -> bool:
        return bool(await self.complete(job))

    async def fail_coded(
        self, job: Job[Any], error: str, retry_in: float | None, *, code: str, discard: bool
    ) -> FailOutcome | None:
        return await self.fail(job, error, retry_in)

    async def bury(self, job: Job[Any], error: str, code: str) -> bool:
        if "fail_coded" in self.lacks:
            return bool(await self.complete(job))
        return await self.fail_coded(job, error, None, code=code, discard=True) == "dead"

    # -- flow control ------------------------------------------------------------------------

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
        raise self._refuse("debounce" if debounce is not None else "throttle")

    async def flow_holds(self, jobs: Sequence[tuple[str, int]]) -> dict[tuple[str, int], str]:
        return {}

    async def queue_holds(
        self, queues: Sequence[str]
    ) -> tuple[set[str], dict[str, dict[str, int]]]:
        return set(await self.paused(queues)), {}

    # -- stats, dead letters, replays ---------------------------------------------------------

    async def stats(self, queues: Sequence[str]) -> dict[str, QueueStats]:
        raise self._refuse("stats")

    async def replay(self, queue: str, job_id: int) -> int | None:
        raise self._refuse("replay")

    async def replay_ruled(
        self, queue: str, job_id: int, *, window: float | None, replayable: bool
    ) -> tuple[int | None, str | None]:
        if window is not None or not replayable:
            raise self._refuse("replay rules")
        new_id = await self.replay(queue, job_id)
        return (None if new_id is None else int(new_id)), None

    async def retry_dead_ruled(
        self,
        queue: str,
        *,
        ids: Sequence[int] | None,
        limit: int,
        window: float | None,
        replayable: bool,
    ) -> list[tuple[int, int | None, str | None]]:
        raise self._refuse("replay rules")

    async def list_dead(self, queue: str, *, limit: int, before: int | None) -> list[DeadJob]:
        raise self._refuse("list_dead")

    async def retry_dead(self, queue: str, *, ids: Sequence[int] | None, limit: int) -> int:
        raise self._refuse("retry_dead")

    async def purge_archive(
        self, queue: str, *, older_than: timedelta, dead_older_than: timedelta, batch: int
    ) -> int:
        raise self._refuse("purge_archive")

    # -- job records --------------------------------------------------------------------------

    async def get_record(self, queue: str, job_id: int) -> JobRecord | None:
        raise self._refuse("get")

    async def list_records(
        self,
        queue: str | None,
        *,
        state: str | None,
        tenant: str | None,
        limit: int,
        before: Position | None,
    ) -> tuple[list[JobRecord], Position | None]:
        raise self._refuse("list_jobs")

    async def cancel(self, queue: str, job_id: int) -> str | None:
        raise self._refuse("cancel")

    # -- policies and encrypted payloads ------------------------------------------------------

    async def ensure_policy(self, queue: str, row: Sequence[Any]) -> None:
        raise self._refuse("ensure_policies")

    async def apply_retention(self, *, min_interval: float | None) -> int | None:
        if min_interval is not None:
            return None  # the drain route's periodic run: skipped, nothing to apply it to
        raise self._refuse("apply_retention")

    async def live_payloads(self, queue: str, *, after: int, limit: int) -> list[tuple[int, Any]]:
        raise self._refuse("reencrypt")

    async def rewrite_payload(self, queue: str, job_id: int, old: Any, new: Any) -> bool:
        raise self._refuse("reencrypt")

    # -- pause --------------------------------------------------------------------------------

    async def pause(self, queue: str) -> bool:
        raise self._refuse("pause")

    async def resume(self, queue: str) -> bool:
        raise self._refuse("resume")

    async def paused(self, queues: Sequence[str]) -> set[str]:
        return set()

    # -- schedules ----------------------------------------------------------------------------

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
        raise self._refuse("schedule")

    async def unschedule(self, name: str) -> bool:
        raise self._refuse("unschedule")

    async def list_schedules(
        self, *, prefix: str | None, tenant: str | None
    ) -> Sequence[ScheduleInfo]:
        raise self._refuse("list_schedules")

    async def unschedule_tenant(self, tenant: str) -> int:
        raise self._refuse("unschedule_all")

    async def due_schedules(self, *, lease: float, batch: int) -> Sequence[DueSchedule]:
        return []

    async def advance_schedule(
        self, name: str, ran: datetime | None, next_run: datetime | None, claim_token: Any
    ) -> bool:
        raise self._refuse("run_schedules")

    # -- durable steps ------------------------------------------------------------------------

    async def load_steps(self, queue: str, job_id: int) -> dict[int, tuple[str, str, Any]]:
        raise self._refuse("steps")

    async def record_step(
        self,
        job: Job[Any],
        number: int,
        name: str,
        state: str,
        result: Any,
        code: str | None = None,
        started_at: datetime | None = None,
    ) -> str:
        raise self._refuse("steps")

    async def suspend(
        self,
        job: Job[Any],
        delay: float,
        waiting_for: str | None,
        number: int | None = None,
        name: str | None = None,
        started_at: datetime | None = None,
    ) -> str:
        raise self._refuse("steps")

    async def wait_event(
        self,
        job: Job[Any],
        event: str,
        key: str,
        timeout: float | None,  # noqa: ASYNC109 - the wait's stored deadline, in seconds
        number: int,
        name: str,
        started_at: datetime | None = None,
    ) -> tuple[str, Any]:
        raise self._refuse("steps")

    async def emit(self, event: str, key: str, data: Any = None) -> int:
        raise self._refuse("emit")

    async def spawn(
        self,
        job: Job[Any],
        number: int,
        name: str,
        queue: str,
        payloads: Sequence[Any],
        delay: float,
        max_attempts: int,
        started_at: datetime | None = None,
    ) -> tuple[str, list[int]]:
        raise self._refuse("steps")

    async def join(
        self,
        job: Job[Any],
        queue: str,
        ids: Sequence[int],
        number: int,
        name: str,
        started_at: datetime | None = None,
    ) -> str:
        raise self._refuse("steps")

    async def child_outcomes(
        self, queue: str, ids: Sequence[int]
    ) -> list[tuple[int, str, str | None, bool, Any]]:
        raise self._refuse("steps")

    async def cancel_children(self, queue: str, job_id: int) -> int:
        raise self._refuse("cancel(children=True)")

    async def job_workflow(self, queue: str, job_id: int) -> Any:
        return None

    async def job_result(self, queue: str, job_id: int) -> tuple[bool, Any]:
        raise self._refuse("result")
