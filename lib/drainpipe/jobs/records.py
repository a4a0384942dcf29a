"""The rules of the job record calls (get, list with signed cursors, cancel): their checks
and answers, without I/O. The calls are :mod:`drainpipe.jobs.record_calls` (and its
generated sync twin); every call validates its input here and answers with the contract's
errors.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from ..errors import DrainpipeError, invalid_request
from ..models import JOB_STATES, JobPage, JobRecord, Position
from ..validation import INT8_MAX, check_queue_name, positive_int
from .cursor import read_cursor, sign_cursor

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
    """The checks and answers of the record calls, without I/O: shared by
    :class:`~drainpipe.jobs.record_calls.RecordsMixin` and its sync twin."""

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
