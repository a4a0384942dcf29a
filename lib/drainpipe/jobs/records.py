"""Job records on :class:`~drainpipe.jobs.Jobs`: get, list (signed cursors), cancel, and
the dead-job calls (list_dead, retry_dead, replay with lineage, purge_archive).

Mixed into ``Jobs`` (as the schedules are) to keep ``client.py`` about enqueueing and
working. Every call validates its input and answers with the contract's errors.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ..errors import DrainpipeError, invalid_request
from ..models import JOB_STATES, JobPage, JobRecord, Position
from ..validation import INT8_MAX, check_queue_name, positive_int
from .cursor import read_cursor, sign_cursor

if TYPE_CHECKING:
    from ..backends import QueueBackend
    from ..backends.driver import Driver

SEVEN_DAYS = timedelta(days=7)
THIRTY_DAYS = timedelta(days=30)
MAX_LIST_LIMIT = 500
LIMIT_TOO_LARGE = "LIMIT_TOO_LARGE"
LIMIT_INVALID = "LIMIT_INVALID"


def check_limit(limit: Any) -> int:
    """``limit`` in 1..500, else ``invalid_request`` (``LIMIT_INVALID``/``LIMIT_TOO_LARGE``)."""
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise invalid_request("limit must be an integer from 1 to 500", code=LIMIT_INVALID)
    if limit < 1:
        raise invalid_request(f"limit must be at least 1, not {limit}", code=LIMIT_INVALID)
    if limit > MAX_LIST_LIMIT:
        raise invalid_request(
            f"limit must be at most {MAX_LIST_LIMIT}, not {limit}", code=LIMIT_TOO_LARGE
        )
    return limit


def check_state(state: Any) -> str | None:
    if state is None:
        return None
    if state not in JOB_STATES:
        raise invalid_request(f"state must be one of {', '.join(JOB_STATES)}, not {state!r}")
    return str(state)


def check_tenant(tenant: Any) -> str | None:
    if tenant is None:
        return None
    if not isinstance(tenant, str) or not tenant or len(tenant) > 200 or "\x00" in tenant:
        raise invalid_request("tenant must be a non-empty string of at most 200 characters")
    return tenant


class RecordsRules:
    """The checks and answers of the record calls, without I/O: shared by the async
    :class:`RecordsMixin` and the sync twin's."""

    _cursor_key: bytes

    def _check_queue(self, queue: str) -> str:  # provided by JobRules
        raise NotImplementedError

    def _check_list_queue(self, queue: Any) -> str | None:
        if queue is None:
            return None
        if not isinstance(queue, str):
            raise invalid_request("queue must be a string")
        return self._check_queue(queue)

    def _get_args(self, queue: str, job_id: Any) -> int:
        self._check_queue(queue)
        return positive_int(job_id, "job_id", minimum=0, maximum=INT8_MAX)

    def _list_records_args(
        self, queue: Any, state: Any, tenant: Any, limit: Any, before: Any
    ) -> tuple[str | None, str | None, str | None, int]:
        name = self._check_list_queue(queue)
        wanted = check_state(state)
        who = check_tenant(tenant)
        size = check_limit(limit)
        if before is not None:
            if not isinstance(before, Position):
                raise invalid_request("before must be a Position (from list_records)")
            check_queue_name(before.queue)
            positive_int(before.id, "before.id", minimum=0, maximum=INT8_MAX)
        return name, wanted, who, size

    def _list_jobs_args(
        self, queue: Any, state: Any, tenant: Any, limit: Any, cursor: Any
    ) -> tuple[str | None, str | None, str | None, Position | None]:
        name = self._check_list_queue(queue)
        wanted = check_state(state)
        who = check_tenant(tenant)
        check_limit(limit)
        before = None
        if cursor is not None:
            before = read_cursor(self._cursor_key, cursor, queue=name, state=wanted, tenant=who)
        return name, wanted, who, before

    def _page(
        self,
        records: list[JobRecord],
        after: Position | None,
        name: str | None,
        wanted: str | None,
        who: str | None,
    ) -> JobPage:
        next_cursor = (
            None
            if after is None
            else sign_cursor(self._cursor_key, after, queue=name, state=wanted, tenant=who)
        )
        return JobPage(items=records, next_cursor=next_cursor)

    def _cancel_answer(self, result: str | None, queue: str, job_id: int) -> bool:
        if result is None:
            raise DrainpipeError(
                "not_found", f'No job {job_id} in queue "{queue}"', code="JOB_NOT_FOUND"
            )
        return result == "cancelled"


def with_workflow(record: JobRecord, workflow: Any) -> JobRecord:
    """``record`` with its steps and ``waiting_for``. Its attempts come counted already: the
    record functions leave the resumptions out, so ``get``, ``list_jobs``, the
    console and PostgREST agree."""
    if workflow is None:
        return record
    _suspensions, _last_fence, waiting_for, steps = workflow
    return replace(
        record,
        steps=steps,
        waiting_for=waiting_for if record.state == "waiting" else None,
    )


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
