"""Durable steps seen from outside a handler: emit an event its waiters wake on, read a job's
kept result (docs/steps.md). ``drainpipe.sync.events`` is generated from this module
(``./scripts/sync-twin``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..backends.driver import Driver
    from ..keyring import Keyring

__all__ = ["EventsMixin"]


class EventsMixin:
    """``emit`` and ``result`` of :class:`~drainpipe.Jobs`."""

    if TYPE_CHECKING:
        driver: Driver
        keyring: Keyring | None

        def _get_args(self, queue: str, job_id: Any) -> int: ...  # RecordsRules'

    async def emit(self, event: str, key: str, data: Any = None) -> int:
        """Store event ``event`` with ``key`` (and JSON ``data``) and wake every job waiting
        on both (``job.wait_for``); the event's id. Events are kept ``event_retention``
        (7 days); one emitted before a job waits counts for it, if emitted after its enqueue."""
        from .sealing import seal_event
        from .steprules import check_event

        check_event(event, key)
        # with a keyring the data is sealed (docs/steps.md#events): the waiter opens it
        return await self.driver.emit(event, key, seal_event(self.keyring, event, data))

    async def result(self, queue: str, job_id: int) -> Any:
        """The kept return value of a job's handler (None when none was kept). For trusted
        code: a management response never carries it."""
        job_id = self._get_args(queue, job_id)
        kept, stored = await self.driver.job_result(queue, job_id)
        if not kept:
            return None
        from .steprules import StepRules  # the step runtime is not needed to open it

        return StepRules(self, queue).open_result(stored)
