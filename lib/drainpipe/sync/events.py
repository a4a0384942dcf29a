# generated from lib/drainpipe/jobs/events.py by ./scripts/sync-twin: do not edit.
# Change the async source (or tools/sync_twin.py) and run ./scripts/sync-twin again.
"""Durable steps seen from outside a handler: emit an event its waiters wake on, read a job's
kept result (docs/steps.md). ``drainpipe.sync.events`` is generated from this module
(``./scripts/sync-twin``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..keyring import Keyring
    from .backend import SyncSqlBackend

__all__ = ["SyncEventsMixin"]


class SyncEventsMixin:
    """``emit`` and ``result`` of :class:`~drainpipe.Jobs`."""

    if TYPE_CHECKING:
        driver: SyncSqlBackend
        keyring: Keyring | None

        def _get_args(self, queue: str, job_id: Any) -> int: ...  # RecordsRules'

    def emit(self, event: str, key: str, data: Any = None) -> int:
        """Store event ``event`` with ``key`` (and JSON ``data``) and wake every job waiting
        on both (``job.wait_for``); the event's id. Events are kept ``event_retention``
        (7 days); one emitted before a job waits counts for it, if emitted after its enqueue."""
        from ..jobs.sealing import seal_event
        from ..jobs.steprules import check_event

        check_event(event, key)
        # with a keyring the data is sealed (docs/steps.md#events): the waiter opens it
        return self.driver.emit(event, key, seal_event(self.keyring, event, data))

    def result(self, queue: str, job_id: int) -> Any:
        """The kept return value of a job's handler (None when none was kept). For trusted
        code: a management response never carries it."""
        job_id = self._get_args(queue, job_id)
        kept, stored = self.driver.job_result(queue, job_id)
        if not kept:
            return None
        from ..jobs.steprules import StepRules

        return StepRules(self, queue).open_result(stored)
