"""The record calls of :class:`drainpipe.sync.Jobs` (``get``, ``list_jobs``,
``list_records``, ``cancel``): the checks and answers of
:class:`~drainpipe.jobs.records.RecordsRules`, run on the sync backend."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..errors import invalid_request
from ..jobs.pause import flow_holdable, holdable, with_flow_holds, with_holds
from ..jobs.records import RecordsRules, with_workflow
from ..models import JobPage, JobRecord, Position

if TYPE_CHECKING:
    from .backend import SyncSqlBackend


class SyncRecordsMixin(RecordsRules):
    """Job records as :class:`drainpipe.Jobs` has them (docs/reference.md section 8)."""

    if TYPE_CHECKING:
        backend: SyncSqlBackend
        _now: Callable[[], datetime]  # JobRules'

    def get(self, queue: str, job_id: int) -> JobRecord | None:
        """The job's record with its attempt history; None when unknown or purged."""
        job_id = self._get_args(queue, job_id)
        record = self.backend.get_record(queue, job_id)
        if record is None:
            return None
        record = with_workflow(record, self.backend.job_workflow(queue, job_id))
        return self._held([record])[0]

    def _held(self, records: list[JobRecord]) -> list[JobRecord]:
        """Mark the due records of paused queues, then those a flow limit holds (a round
        trip each, only when one is queued or in retry_wait)."""
        queues = holdable(records)
        if not queues:
            return records
        records = with_holds(records, self.backend.paused(queues), self._now())
        waiting = flow_holdable(records)
        return with_flow_holds(records, self.backend.flow_holds(waiting)) if waiting else records

    def list_records(
        self,
        queue: str | None = None,
        *,
        state: str | None = None,
        tenant: str | None = None,
        limit: int = 100,
        before: Position | None = None,
    ) -> tuple[list[JobRecord], Position | None]:
        """A raw keyset page, newest first, and the position of the next page (or None)."""
        name, wanted, who, size = self._list_records_args(queue, state, tenant, limit, before)
        records, after = self.backend.list_records(
            name, state=wanted, tenant=who, limit=size, before=before
        )
        return self._held(records), after

    def list_jobs(
        self,
        queue: str | None = None,
        *,
        state: str | None = None,
        tenant: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> JobPage:
        """Records newest first, ``limit`` 1..500, with a signed ``next_cursor``."""
        name, wanted, who, before = self._list_jobs_args(queue, state, tenant, limit, cursor)
        records, after = self.list_records(
            name, state=wanted, tenant=who, limit=limit, before=before
        )
        return self._page(records, after, name, wanted, who)

    def cancel(self, queue: str, job_id: int, *, children: bool = False) -> bool:
        """True: a live job is now cancelled; False: it was terminal; unknown: not_found.
        ``children=True`` also cancels the live children its steps spawned."""
        job_id = self._get_args(queue, job_id)
        if not isinstance(children, bool):
            raise invalid_request("children must be True or False")
        answer = self._cancel_answer(self.backend.cancel(queue, job_id), queue, job_id)
        if children:
            self.backend.cancel_children(queue, job_id)
        return answer

    def emit(self, event: str, key: str, data: Any = None) -> int:
        """Store an event and wake the jobs waiting on its name and key (``Jobs.emit``)."""
        from ..jobs.steprules import check_event  # here: not needed before an emit

        check_event(event, key)
        return self.backend.emit(event, key, data)

    def result(self, queue: str, job_id: int) -> Any:
        """A job handler's kept return value (None when none); for trusted code."""
        job_id = self._get_args(queue, job_id)
        kept, stored = self.backend.job_result(queue, job_id)
        if not kept:
            return None
        from ..jobs.steprules import StepRules  # opened as the async twin opens it

        return StepRules(self, queue).open_result(stored)
