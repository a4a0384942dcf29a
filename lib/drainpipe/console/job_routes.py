"""The Job Inbox's routes over jobs and the audit log (docs/reference.md §10): what each one
reads or writes, once the app has routed the request and knows who asks.

| route (relative to the mount) | method |
| --- | --- |
| ``GET /jobs?limit=&cursor=&queue=&state=&tenant=`` | :meth:`JobRoutes.list_jobs` |
| ``GET /jobs/{queue}/{id}`` | :meth:`JobRoutes.get_job` |
| ``POST /jobs/{queue}/{id}/cancel`` | :meth:`JobRoutes.cancel` |
| ``POST /jobs/{queue}/{id}/replay`` | :meth:`JobRoutes.replay` |
| ``GET /audit?limit=&cursor=`` | :meth:`JobRoutes.list_audit` |

Every write is audited by the statement that makes it (one row per cancel or replay, refused
ones too). The console's bulk actions go through :meth:`JobRoutes.cancel_one` and
:meth:`JobRoutes.replay_once`, so each job of a bulk call gets the single route's rules and
audit row.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from ..errors import DrainpipeError, invalid_request
from ..http import Response, request_path
from ..jobs.replays import refused as replay_refused
from ..models import Position
from ..validation import INT8_MAX, MAX_NAME_LENGTH, text_fault
from . import management_statements as ops
from .console_routes import SEARCH_KEYS, records_json
from .console_statements import JobFilter
from .problem_codes import (
    CURSOR_INVALID,
    FILTER_INVALID,
    JOB_ALREADY_REPLAYED,
    JOB_NOT_CANCELLABLE,
    JOB_NOT_DEAD,
    JOB_NOT_FOUND,
    LIMIT_INVALID,
    LIMIT_TOO_LARGE,
    QUEUE_UNKNOWN,
    STATE_INVALID,
    conflict,
    not_found,
)
from .record_json import STATES, audit_json, record_json

if TYPE_CHECKING:
    from ..principals import Principal
    from .management_app import ManagementApp

MAX_LIMIT = 500
MAX_TENANT_LENGTH = 200  # as Jobs.list_records takes it
DEFAULT_LIMIT = 100


def parse_limit(raw: str | None) -> int:
    """``limit`` of a list route: 1..500, default 100 (400 ``LIMIT_INVALID``/``_TOO_LARGE``)."""
    if raw is None or raw == "":
        return DEFAULT_LIMIT
    if not re.fullmatch(r"[0-9]{1,18}|-[0-9]{1,18}", raw.strip()):
        raise invalid_request("limit must be an integer from 1 to 500", code=LIMIT_INVALID)
    value = int(raw)
    if value < 1:
        raise invalid_request("limit must be at least 1", code=LIMIT_INVALID)
    if value > MAX_LIMIT:
        raise invalid_request(f"limit must be at most {MAX_LIMIT}", code=LIMIT_TOO_LARGE)
    return value


def _filter_text(value: str | None, name: str, longest: int = MAX_NAME_LENGTH) -> str | None:
    if value is None or value == "":
        return None
    if len(value) > longest or text_fault(value) is not None:
        raise invalid_request(
            f"{name} must be at most {longest} characters of text", code=FILTER_INVALID
        )
    return value


def _parse_position(text: str) -> Position:
    try:
        return Position.parse(text)
    except (ValueError, DrainpipeError):
        raise invalid_request("This cursor is not valid here", code=CURSOR_INVALID) from None


class JobRoutes:
    """The job and audit routes of one :class:`~drainpipe.console.management_app.ManagementApp` (its
    jobs client, connection, cursors, console and idempotency store)."""

    def __init__(self, app: ManagementApp) -> None:
        self.app = app

    # -- reads ---------------------------------------------------------------------------

    async def list_jobs(self, request: Any, principal: Principal) -> Response:
        app = self.app
        params = request.query_params
        limit = parse_limit(params.get("limit"))
        queue = _filter_text(params.get("queue"), "queue")
        if queue is not None and queue not in app.jobs.queue_names:
            raise invalid_request(f'No queue "{queue}" is declared here', code=QUEUE_UNKNOWN)
        state = _filter_text(params.get("state"), "state")
        if state is not None and state not in STATES:
            raise invalid_request(f"state must be one of {', '.join(STATES)}", code=STATE_INVALID)
        tenant = _filter_text(params.get("tenant"), "tenant", MAX_TENANT_LENGTH)
        filters = {"queue": queue, "state": state, "tenant": tenant}
        search = app.console.search_filter(
            params, JobFilter(queue=queue, state=state, tenant=tenant)
        )
        if search is not None:  # the console's filters: bound into the cursor too
            filters.update({key: params.get(key) or None for key in SEARCH_KEYS})
        before = None
        cursor = params.get("cursor")
        if cursor:
            text = app.cursors.open(cursor, "jobs", filters, principal.actor)
            before = _parse_position(text)
        if search is None:
            records, position = await app.jobs.list_records(
                queue, state=state, tenant=tenant, limit=limit, before=before
            )
        else:
            records, position = await app.console.search(search, limit, before)
        next_cursor = (
            None
            if position is None
            else app.cursors.sign("jobs", filters, principal.actor, str(position))
        )
        data = records_json(records, await app.console.causes(records))
        return app._body(
            data,
            next_cursor=next_cursor,
            limit=limit,
            count=len(data),
            actor=principal.actor,
            role=principal.role,
            queues=app.jobs.queue_names,
        )

    async def get_job(self, queue: str, job_id: int) -> Response:
        app = self.app
        record = await app.jobs.get(queue, job_id)
        if record is None:
            raise not_found(f"No job {job_id} in {queue}", JOB_NOT_FOUND)
        causes = await app.console.causes([record])
        return app._body(
            record_json(record, history=True, cause=causes.get((record.queue, record.id)))
        )

    async def list_audit(self, request: Any, principal: Principal) -> Response:
        app = self.app
        params = request.query_params
        limit = parse_limit(params.get("limit"))
        before = None
        cursor = params.get("cursor")
        if cursor:
            text = app.cursors.open(cursor, "audit", {}, principal.actor)
            if not re.fullmatch(r"[0-9]{1,19}", text) or int(text) > INT8_MAX:
                raise invalid_request("This cursor is not valid here", code=CURSOR_INVALID)
            before = int(text)
        rows = await app.db.fetch(
            ops.LIST_AUDIT, ops.list_audit_params(app.target, limit + 1, before)
        )
        entries = ops.parse_list_audit(rows)
        next_cursor = None
        if len(entries) > limit:
            entries = entries[:limit]
            next_cursor = app.cursors.sign("audit", {}, principal.actor, str(entries[-1].id))
        data = [audit_json(entry) for entry in entries]
        return app._body(data, next_cursor=next_cursor, limit=limit, count=len(data))

    # -- writes --------------------------------------------------------------------------

    async def cancel(self, queue: str, job_id: int, principal: Principal) -> Response:
        await self.cancel_one(queue, job_id, principal)
        return await self.get_job(queue, job_id)

    async def cancel_one(self, queue: str, job_id: int, principal: Principal) -> None:
        """The audited cancel of one job (the single route's and each of a bulk call's)."""
        app = self.app
        rows = await app.db.fetch(
            ops.AUDITED_CANCEL,
            ops.audited_cancel_params(app.target, principal.actor, queue, job_id, app._clock()),
        )
        outcome = ops.parse_audited_cancel(rows)
        if outcome is None:
            raise not_found(f"No job {job_id} in {queue}", JOB_NOT_FOUND)
        if outcome == "refused":
            raise conflict(
                f"Job {job_id} already ended; only a live job can be cancelled",
                JOB_NOT_CANCELLABLE,
            )

    async def replay(self, request: Any, queue: str, job_id: int, principal: Principal) -> Any:
        app = self.app

        async def replay() -> Response:
            # runs once per Idempotency-Key: a repeat is answered from storage, unaudited
            key = request.headers.get(app.idempotency.header)
            try:
                return await self.replay_once(queue, job_id, principal, key)
            except DrainpipeError as exc:
                if exc.status >= 500:
                    raise  # the key is released: a retry with it runs again
                return app._problem(exc, request_path(request))

        return await app.idempotency.handle(request, replay)

    async def replay_once(
        self, queue: str, job_id: int, principal: Principal, key: str | None
    ) -> Response:
        """The audited replay of one dead job (the single route's and each of a bulk call's)."""
        app = self.app
        # the application's check runs first, on the record as it is now; its refusal is
        # audited by the same statement that would have replayed (docs/job-inbox.md)
        refusal = await app.jobs.replay_refusal(queue, job_id)
        rows = await app.db.fetch(
            ops.AUDITED_REPLAY_V2,
            ops.audited_replay_v2_params(
                app.target,
                principal.actor,
                queue,
                job_id,
                key,
                refusal,
                app.jobs.replay_rules(queue),
                app._clock(),
            ),
        )
        result = ops.parse_audited_replay(rows)
        if result is None:
            raise not_found(f"No job {job_id} in {queue}", JOB_NOT_FOUND)
        if result.outcome == "refused":
            if result.code == JOB_ALREADY_REPLAYED:
                raise conflict(
                    f"Job {job_id} was replayed already; replay its child if that died too",
                    JOB_ALREADY_REPLAYED,
                )
            if result.code is not None and result.code != JOB_NOT_DEAD:
                raise replay_refused(queue, job_id, result.code)
            raise conflict(f"Job {job_id} is not dead; only a dead job is replayed", JOB_NOT_DEAD)
        return app._body({"id": result.new_job_id, "parent_id": job_id}, status=201)
