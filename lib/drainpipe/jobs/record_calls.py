"""Job records on :class:`~drainpipe.jobs.Jobs`: ``get``, ``list_records``, ``list_jobs``
(signed cursors) and ``cancel``, over the checks of :mod:`drainpipe.jobs.records`.

Mixed into ``Jobs`` (as the schedules are) to keep ``client.py`` about enqueueing and
working. ``drainpipe.sync.records`` is generated from this module (``./scripts/sync-twin``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import invalid_request
from ..models import JobPage, JobRecord, Position
from .records import RecordsRules, with_workflow

if TYPE_CHECKING:
    from ..backends import QueueBackend
    from ..backends.driver import Driver

__all__ = ["RecordsMixin"]


class RecordsMixin(RecordsRules):
    """``get``, ``list_jobs``, ``list_records`` and ``cancel`` of :class:`Jobs`."""

    backend: QueueBackend
    driver: Driver

    async def _held(self, records: list[JobRecord]) -> list[JobRecord]:  # PauseMixin
        return records

    async def get(self, queue: str, job_id: int) -> JobRecord | None:
        """The job's record with its attempt history; None when unknown or purged."""
        job_id = self._get_args(queue, job_id)
        driver = self.driver
        record = await driver.get_record(queue, job_id)
        if record is None:
            return None
        record = with_workflow(record, await driver.job_workflow(queue, job_id))
        return (await self._held([record]))[0]

    async def list_records(
        self,
        queue: str | None = None,
        *,
        state: str | None = None,
        tenant: str | None = None,
        limit: int = 100,
        before: Position | None = None,
    ) -> tuple[list[JobRecord], Position | None]:
        """A raw keyset page, newest first (history empty): the records after ``before``
        and the position to pass for the next page (None on the last). ``list_jobs`` wraps
        it in signed cursors; an app with its own cursors (the management API) uses this."""
        name, wanted, who, size = self._list_records_args(queue, state, tenant, limit, before)
        records, after = await self.driver.list_records(
            name, state=wanted, tenant=who, limit=size, before=before
        )
        return await self._held(list(records)), after

    async def list_jobs(
        self,
        queue: str | None = None,
        *,
        state: str | None = None,
        tenant: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> JobPage:
        """Records newest first (``history`` empty; ``get`` fills it), ``limit`` 1..500.
        ``next_cursor`` is opaque and signed (see ``Jobs(cursor_secret=)``); it is valid
        for the same filters only (``invalid_request``, ``CURSOR_INVALID`` otherwise)."""
        name, wanted, who, before = self._list_jobs_args(queue, state, tenant, limit, cursor)
        records, after = await self.list_records(
            name, state=wanted, tenant=who, limit=limit, before=before
        )
        return self._page(records, after, name, wanted, who)

    async def cancel(self, queue: str, job_id: int, *, children: bool = False) -> bool:
        """Cancel a live job: True when it is now cancelled (a queued, retry_wait or waiting
        job never runs again; a leased one is fenced at once, its worker stops it at the
        next heartbeat), False when it had finished already; an unknown job is
        ``not_found``. ``children=True`` also cancels the live children its steps spawned.
        A cancel cannot undo what a running handler already did."""
        job_id = self._get_args(queue, job_id)
        if not isinstance(children, bool):
            raise invalid_request("children must be True or False")
        driver = self.driver
        answer = self._cancel_answer(await driver.cancel(queue, job_id), queue, job_id)
        if children:
            await driver.cancel_children(queue, job_id)
        return answer
