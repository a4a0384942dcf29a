"""The durable-step operations of :class:`~drainpipe.backends.driver.Driver` (docs/steps.md):
one protocol, so each has one typed signature (re-exported by :mod:`.capabilities`)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ..models import Job

__all__ = ["SupportsSteps"]


@runtime_checkable
class SupportsSteps(Protocol):
    """Durable steps, their events and kept results (docs/steps.md). Every write is fenced
    by the job's attempt: ``lost`` when the lease moved on, ``mismatch`` when the recorded
    step of that number has another name."""

    async def load_steps(self, queue: str, job_id: int) -> dict[int, tuple[str, str, Any]]:
        """The job's recorded steps: number → (name, state, stored result)."""
        ...

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
        """``recorded``, ``exists``, ``mismatch`` or ``lost``."""
        ...

    async def suspend(
        self,
        job: Job[Any],
        delay: float,
        waiting_for: str | None,
        number: int | None = None,
        name: str | None = None,
        started_at: datetime | None = None,
    ) -> str:
        """``suspended``, ``mismatch`` or ``lost``; the lease is released with it."""
        ...

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
        """(``taken`` | ``timeout`` | ``suspended`` | ``mismatch`` | ``lost``, data)."""
        ...

    async def emit(self, event: str, key: str, data: Any = None) -> int:
        """Store an event and wake its waiters; the event's id."""
        ...

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
        """Enqueue children of ``job`` and record the step, at most once."""
        ...

    async def join(
        self,
        job: Job[Any],
        queue: str,
        ids: Sequence[int],
        number: int,
        name: str,
        started_at: datetime | None = None,
    ) -> str:
        """``done`` (every child finished), ``suspended``, ``mismatch`` or ``lost``."""
        ...

    async def child_outcomes(
        self, queue: str, ids: Sequence[int]
    ) -> list[tuple[int, str, str | None, bool, Any]]:
        """(id, state, code, kept, result) of each child."""
        ...

    async def cancel_children(self, queue: str, job_id: int) -> int:
        """Cancel the live children the job's steps spawned; how many."""
        ...

    async def job_workflow(self, queue: str, job_id: int) -> Any:
        """The job's steps and what it waits for (None without steps)."""
        ...

    async def job_result(self, queue: str, job_id: int) -> tuple[bool, Any]:
        """(kept, the stored return value of the job's handler)."""
        ...
