# generated from lib/drainpipe/jobs/pause_calls.py by ./scripts/sync-twin: do not edit.
# Change the async source (or tools/sync_twin.py) and run ./scripts/sync-twin again.
"""``pause``, ``resume`` and the hold marks of a record (docs/policies.md#pause), over the
rules of :mod:`drainpipe.jobs.pause`. ``drainpipe.sync.pause`` is generated from this module
(``./scripts/sync-twin``)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from ..jobs.pause import flow_holdable, holdable, with_flow_holds, with_holds
from ..models import JobRecord

if TYPE_CHECKING:
    from .backend import SyncSqlBackend

__all__ = ["SyncPauseMixin"]


class SyncPauseMixin:
    """``pause``, ``resume`` and the hold marks of :class:`~drainpipe.Jobs`."""

    backend: SyncSqlBackend
    driver: SyncSqlBackend
    if TYPE_CHECKING:

        def _check_queue(self, queue: str) -> str: ...  # JobRules'

        _now: Callable[[], datetime]  # JobRules'

    def pause(self, queue: str) -> bool:
        """Stop every claimer from taking ``queue``'s jobs (enqueues go on; leased jobs run
        to their end). True when the queue was running, False when it was paused already.
        A claim already running when the pause commits may still take its batch."""
        self._check_queue(queue)
        return self.driver.pause(queue)

    def resume(self, queue: str) -> bool:
        """Let claimers take ``queue``'s jobs again; True when it was paused."""
        self._check_queue(queue)
        return self.driver.resume(queue)

    def _held(self, records: list[JobRecord]) -> list[JobRecord]:
        """Mark the due records of paused queues, then those a flow limit holds (a round
        trip each, only when the records include a queued or retry_wait job)."""
        queues = holdable(records)
        if not queues:
            return records
        driver = self.driver
        records = with_holds(records, driver.paused(queues), self._now())
        # flow limits (docs/flow-control.md): one more round trip for the queued ones left
        waiting = flow_holdable(records)
        if waiting:
            records = with_flow_holds(records, driver.flow_holds(waiting))
        return records
