"""The Job Inbox management API (docs/reference.md §10): an ASGI app over a :class:`~drainpipe.Jobs`.

    app = jobs.management_app(authorize=drainpipe.bearer_tokens({...}),
                              cursor_secret=os.environ["CURSOR_SECRET"], target="production")

| route (relative to the mount) | who | answer |
| --- | --- | --- |
| ``GET /jobs?limit=&cursor=&queue=&state=&tenant=`` | viewer | records without history |
| ``GET /jobs/{queue}/{id}`` | viewer | one record with its attempt history |
| ``POST /jobs/{queue}/{id}/cancel`` | admin | 200 the record; 409 ``JOB_NOT_CANCELLABLE`` |
| ``POST /jobs/{queue}/{id}/replay`` | admin | ``Idempotency-Key`` required; 201 ``{id, parent_id}`` |
| ``GET /audit?limit=&cursor=`` | admin | the audit log, newest first |
| ``GET /`` | anyone | the admin page (it holds no data; its calls authenticate) |

The console's routes (``/queues``, pause and resume, the search filters, bulk actions,
``/metrics`` and, given ``agents``, ``/inboxes``) are :mod:`drainpipe.admin.console`.

Bodies are ``{"data": ..., "meta": {...}}``; errors are Problem Details with a ``code``.
Nothing this app answers carries a payload, an error text or a lease token: the records it
reads have no such fields, and Problems of unexpected errors carry no detail.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import re
from collections.abc import Callable, Collection, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..errors import DrainpipeError, invalid_request
from ..http import (
    ProblemFormatter,
    Receive,
    Response,
    Scope,
    Send,
    json_response,
    problem_response,
    request_path,
    serve_lifespan,
)
from ..http_guards import (
    MANAGEMENT_MAX_BODY_BYTES,
    check_origins,
    cross_site_refusal,
    query_refusal,
    read_starlette_body,
)
from ..jobs.replays import refused as replay_refused
from ..models import Position
from ..ops import management as ops
from ..ops.console import JobFilter
from ..principals import Authorize, Principal
from ..validation import INT8_MAX, MAX_NAME_LENGTH, text_fault
from .console import SEARCH_KEYS as _SEARCH_KEYS
from .console import Console, records_json
from .cursors import CursorSigner
from .page import page_response
from .records import STATES, audit_json, record_json

if TYPE_CHECKING:
    from ..agents import AgentInboxes
    from ..idempotency import Idempotency
    from ..jobs import Jobs

logger = logging.getLogger("drainpipe.admin")

ADMIN_REQUIRED = "ADMIN_REQUIRED"
UNAUTHORIZED = "UNAUTHORIZED"
LIMIT_TOO_LARGE = "LIMIT_TOO_LARGE"
LIMIT_INVALID = "LIMIT_INVALID"
STATE_INVALID = "STATE_INVALID"
QUEUE_UNKNOWN = "QUEUE_UNKNOWN"
FILTER_INVALID = "FILTER_INVALID"
QUEUE_NOT_FOUND = "QUEUE_NOT_FOUND"
JOB_NOT_FOUND = "JOB_NOT_FOUND"
ROUTE_NOT_FOUND = "ROUTE_NOT_FOUND"
METHOD_NOT_ALLOWED = "METHOD_NOT_ALLOWED"
JOB_NOT_CANCELLABLE = "JOB_NOT_CANCELLABLE"
JOB_NOT_DEAD = "JOB_NOT_DEAD"
JOB_ALREADY_REPLAYED = "JOB_ALREADY_REPLAYED"
MAX_LIMIT = 500
MAX_TENANT_LENGTH = 200  # as Jobs.list_records takes it
DEFAULT_LIMIT = 100

_JOB_PATH = re.compile(r"^/jobs/(?P<queue>[^/]+)/(?P<id>[^/]+)(?:/(?P<action>cancel|replay))?$")
_QUEUE_PATH = re.compile(r"^/queues/(?P<queue>[^/]+)/(?P<action>pause|resume)$")
_BULK_PATH = re.compile(r"^/jobs/bulk/(?P<action>cancel|replay)$")
_API_HEADERS = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}


def _not_found(message: str, code: str) -> DrainpipeError:
    return DrainpipeError("not_found", message, code=code)


def _conflict(message: str, code: str) -> DrainpipeError:
    return DrainpipeError("conflict", message, code=code)


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


class ManagementApp:
    """The ASGI app :meth:`drainpipe.Jobs.management_app` builds; see the module.

    * ``authorize(request) -> Principal | None`` (plain or async) gets Starlette's request;
      None answers 401.
    * ``cursor_secret``: the HMAC key of the page cursors (at least 16 bytes); every instance
      serving the same ``target`` must share it, or a cursor from one fails on another.
    * ``target``: the name of what this app manages (``"production"``); bound into cursors,
      stored with every audit row, and the audit log shows only its own target's rows.
    * ``now``: the clock sent to SQL (``p_now``) for cancels, replays and audit times
      (default: the database's).
    * ``problem``: rewrites Problem bodies (status and auth headers stay).
    * ``idempotency_ttl``: how long a replay's Idempotency-Key is remembered (default 24 h).
    * ``page_refresh``: seconds between the admin page's refreshes of its list (default 15).
    * ``allowed_origins``: origins (``https://admin.example.com``) whose pages may send
      writes carrying cookies; default: the request's own host. A write with a ``Cookie``
      header from elsewhere → 403 ``CROSS_SITE_REQUEST``; request bodies over 64 KiB → 413
      ``BODY_TOO_LARGE`` (docs/reference.md, "Hardening").
    * ``metrics_token``: a bearer token (16+ characters) that may read ``GET /metrics`` and
      nothing else, for a Prometheus scraper (a viewer's token works too).
    * ``agents``: an :class:`~drainpipe.AgentInboxes` whose inboxes the overview shows
      too, read-only (``GET /inboxes``, viewer); without it that route is not served. The
      app does not close it (``aclose`` closes the jobs client only).
    """

    def __init__(
        self,
        jobs: Jobs,
        *,
        authorize: Authorize,
        cursor_secret: str | bytes,
        target: str,
        now: Callable[[], datetime] | None = None,
        problem: ProblemFormatter | None = None,
        idempotency_ttl: float = 24 * 3600,
        page_refresh: float = 15,
        allowed_origins: Collection[str] | None = None,
        metrics_token: str | None = None,
        agents: AgentInboxes | None = None,
    ) -> None:
        if not callable(authorize):
            raise TypeError("authorize must be a callable(request) -> Principal | None")
        db = getattr(jobs.backend, "db", None)
        if db is None or not hasattr(db, "fetch"):
            raise TypeError(
                "management_app needs jobs on a Postgres connection (a DSN, pool or"
                " connection), not a PostgREST or in-memory backend"
            )
        from ..agents import AgentInboxes
        from ..idempotency import Idempotency

        if agents is not None and not isinstance(agents, AgentInboxes):
            raise TypeError("agents must be a drainpipe.AgentInboxes or None")
        self.agents = agents
        self.jobs = jobs
        self.db = db
        self.authorize = authorize
        self.cursors = CursorSigner(cursor_secret, target)
        self.target = target
        self.now = now
        self.problem = problem
        if not isinstance(page_refresh, int | float) or not 1 <= page_refresh <= 3600:
            raise ValueError("page_refresh must be from 1 to 3600 seconds")
        self.page_refresh = page_refresh
        self.allowed_origins = check_origins(allowed_origins)
        self.console = Console(self, metrics_token)
        self.idempotency: Idempotency = Idempotency(
            db,
            required=True,
            ttl=idempotency_ttl,
            scope=self._idempotency_scope,
            problem=problem,
            now=now,
        )

    # -- ASGI ----------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await serve_lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        from starlette.requests import Request as StarletteRequest

        request = StarletteRequest(scope, receive)
        response = await self.handle(request)
        await response(scope, receive, send)

    async def aclose(self) -> None:
        """Close what the jobs client opened (its pool); ``drainpipe dev`` calls this."""
        await self.jobs.close()

    @staticmethod
    def route_path(scope: Mapping[str, Any]) -> str:
        """The path below where the app is mounted (Starlette's ``Mount`` keeps the full path
        in ``path`` and the prefix in ``root_path``)."""
        path = str(scope.get("path") or "/")
        root = str(scope.get("root_path") or "")
        if root and path.startswith(root):
            path = path[len(root) :]
        return path or "/"

    async def handle(self, request: Any) -> Any:
        """Answer one Starlette request (an ours-or-Starlette response, both ASGI apps)."""
        path = self.route_path(request.scope)
        instance = request_path(request)
        try:
            await self._guard(request)
            response = await self._route(request, path)
        except DrainpipeError as exc:
            response = self._problem(exc, instance)
        except Exception:
            # the reason goes to the log; the caller gets no detail (it may name internals)
            logger.exception("Job Inbox: %s %s failed", request.method, instance)
            response = self._problem(DrainpipeError("unexpected", "Unexpected error"), instance)
        if request.method.upper() == "HEAD" and isinstance(response, Response):
            response.body = b""  # the headers of the GET, no body
        return response

    def _problem(
        self, error: DrainpipeError, instance: str, headers: Mapping[str, str] | None = None
    ) -> Response:
        response = problem_response(error, instance, problem=self.problem, headers=headers)
        meta = getattr(error, "meta", None)
        if isinstance(meta, dict):  # what the caller needs to act on it (BULK_COUNT_CHANGED)
            body = json.loads(response.body)
            body["meta"] = meta
            response.body = json.dumps(body, separators=(",", ":")).encode()
        response.headers.update(_API_HEADERS)
        return response

    async def _route(self, request: Any, path: str) -> Any:
        method = request.method.upper()
        if path == "/":
            self._allow(method, "GET")
            root = str(request.scope.get("root_path") or "")
            return page_response(
                base=root,
                target=self.target,
                refresh_seconds=self.page_refresh,
                inboxes=self.agents is not None,
                head=method == "HEAD",
            )
        if path == "/jobs":
            self._allow(method, "GET")
            return await self._list_jobs(request, await self._principal(request))
        if path == "/queues":
            self._allow(method, "GET")
            await self._principal(request)
            return await self.console.queues()
        if path == "/inboxes" and self.agents is not None:
            self._allow(method, "GET")
            await self._principal(request)
            return await self.console.inboxes(self.agents)
        if path == "/metrics":
            self._allow(method, "GET")
            if not self.console.metrics_allowed(request):
                await self._principal(request)
            return await self.console.metrics()
        console_match = _QUEUE_PATH.match(path)
        if console_match is not None:
            self._allow(method, "POST")
            principal = await self._principal(request)
            self._require_admin(principal)
            queue = console_match.group("queue")
            if queue not in self.jobs.queue_names:
                raise _not_found(f'No queue "{queue}" is declared here', QUEUE_NOT_FOUND)
            pause = console_match.group("action") == "pause"
            return await self.console.pause(queue, principal, pause=pause)
        console_match = _BULK_PATH.match(path)
        if console_match is not None:
            self._allow(method, "POST")
            principal = await self._principal(request)
            self._require_admin(principal)
            return await self.console.bulk(request, console_match.group("action"), principal)
        if path == "/audit":
            self._allow(method, "GET")
            principal = await self._principal(request)
            self._require_admin(principal)
            return await self._list_audit(request, principal)
        match = _JOB_PATH.match(path)
        if match is None:
            raise _not_found(f"No route {path}", ROUTE_NOT_FOUND)
        action = match.group("action")
        self._allow(method, "POST" if action else "GET")
        principal = await self._principal(request)
        if action is not None:
            self._require_admin(principal)
        queue, job_id = self._job_address(match.group("queue"), match.group("id"))
        if action is None:
            return await self._get_job(queue, job_id)
        if action == "cancel":
            return await self._cancel(queue, job_id, principal)
        return await self._replay(request, queue, job_id, principal)

    async def _guard(self, request: Any) -> None:
        """Before any route: a query string that is not UTF-8 and a cookie-carrying write
        from another origin are refused, and a body is read as a capped stream (no route
        reads more than a small JSON body)."""
        refusal = query_refusal(request.scope) or cross_site_refusal(
            request.method, request.headers, self.allowed_origins
        )
        if refusal is not None:
            raise refusal
        if request.method.upper() not in ("GET", "HEAD"):
            await read_starlette_body(request, MANAGEMENT_MAX_BODY_BYTES)

    @staticmethod
    def _allow(method: str, allowed: str) -> None:
        if method == allowed or (allowed == "GET" and method == "HEAD"):
            return
        raise DrainpipeError(
            "invalid_request", f"Use {allowed} here", code=METHOD_NOT_ALLOWED, status=405
        )

    # -- who is asking -------------------------------------------------------------------

    async def _principal(self, request: Any) -> Principal:
        found = self.authorize(request)
        if inspect.isawaitable(found):
            found = await found
        if found is None:
            raise DrainpipeError(
                "unauthorized", "Send a valid token as Authorization: Bearer", code=UNAUTHORIZED
            )
        if not isinstance(found, Principal):
            raise TypeError("authorize(request) must return a drainpipe.Principal or None")
        request.state.principal = found
        return found

    @staticmethod
    def _require_admin(principal: Principal) -> None:
        if not principal.is_admin:
            raise DrainpipeError(
                "forbidden", "Only an administrator may do this", code=ADMIN_REQUIRED
            )

    def _idempotency_scope(self, request: Any) -> str:
        # keys are the actor's own (a token rotation keeps them), per target
        principal: Principal = request.state.principal
        who = f"{self.target}\x00{principal.actor}".encode()
        return "job-inbox:" + hashlib.sha256(who).hexdigest()

    def _job_address(self, queue: str, raw_id: str) -> tuple[str, int]:
        if queue not in self.jobs.queue_names:
            raise _not_found(f'No queue "{queue}" is declared here', QUEUE_NOT_FOUND)
        if not re.fullmatch(r"[0-9]{1,19}", raw_id) or int(raw_id) > INT8_MAX:
            raise _not_found(f"No job {raw_id} in {queue}", JOB_NOT_FOUND)
        return queue, int(raw_id)

    # -- reads ---------------------------------------------------------------------------

    def _body(self, data: Any, status: int = 200, **meta: Any) -> Response:
        return json_response(
            {"data": data, "meta": {"target": self.target, **meta}},
            status=status,
            headers=_API_HEADERS,
        )

    async def _list_jobs(self, request: Any, principal: Principal) -> Response:
        params = request.query_params
        limit = parse_limit(params.get("limit"))
        queue = _filter_text(params.get("queue"), "queue")
        if queue is not None and queue not in self.jobs.queue_names:
            raise invalid_request(f'No queue "{queue}" is declared here', code=QUEUE_UNKNOWN)
        state = _filter_text(params.get("state"), "state")
        if state is not None and state not in STATES:
            raise invalid_request(f"state must be one of {', '.join(STATES)}", code=STATE_INVALID)
        tenant = _filter_text(params.get("tenant"), "tenant", MAX_TENANT_LENGTH)
        filters = {"queue": queue, "state": state, "tenant": tenant}
        search = self.console.search_filter(
            params, JobFilter(queue=queue, state=state, tenant=tenant)
        )
        if search is not None:  # the console's filters: bound into the cursor too
            filters.update({key: params.get(key) or None for key in _SEARCH_KEYS})
        before = None
        cursor = params.get("cursor")
        if cursor:
            text = self.cursors.open(cursor, "jobs", filters, principal.actor)
            before = _parse_position(text)
        if search is None:
            records, position = await self.jobs.list_records(
                queue, state=state, tenant=tenant, limit=limit, before=before
            )
        else:
            records, position = await self.console.search(search, limit, before)
        next_cursor = (
            None
            if position is None
            else self.cursors.sign("jobs", filters, principal.actor, _position_text(position))
        )
        data = records_json(records, await self.console.causes(records))
        return self._body(
            data,
            next_cursor=next_cursor,
            limit=limit,
            count=len(data),
            actor=principal.actor,
            role=principal.role,
            queues=self.jobs.queue_names,
        )

    async def _get_job(self, queue: str, job_id: int) -> Response:
        record = await self.jobs.get(queue, job_id)
        if record is None:
            raise _not_found(f"No job {job_id} in {queue}", JOB_NOT_FOUND)
        causes = await self.console.causes([record])
        return self._body(
            record_json(record, history=True, cause=causes.get((record.queue, record.id)))
        )

    async def _list_audit(self, request: Any, principal: Principal) -> Response:
        params = request.query_params
        limit = parse_limit(params.get("limit"))
        before = None
        cursor = params.get("cursor")
        if cursor:
            text = self.cursors.open(cursor, "audit", {}, principal.actor)
            if not re.fullmatch(r"[0-9]{1,19}", text) or int(text) > INT8_MAX:
                raise invalid_request("This cursor is not valid here", code="CURSOR_INVALID")
            before = int(text)
        rows = await self.db.fetch(
            ops.LIST_AUDIT, ops.list_audit_params(self.target, limit + 1, before)
        )
        entries = ops.parse_list_audit(rows)
        next_cursor = None
        if len(entries) > limit:
            entries = entries[:limit]
            next_cursor = self.cursors.sign("audit", {}, principal.actor, str(entries[-1].id))
        data = [audit_json(entry) for entry in entries]
        return self._body(data, next_cursor=next_cursor, limit=limit, count=len(data))

    # -- writes --------------------------------------------------------------------------

    def _clock(self) -> datetime | None:
        return None if self.now is None else self.now()

    async def _cancel(self, queue: str, job_id: int, principal: Principal) -> Response:
        await self._cancel_one(queue, job_id, principal)
        return await self._get_job(queue, job_id)

    async def _cancel_one(self, queue: str, job_id: int, principal: Principal) -> None:
        """The audited cancel of one job (the single route's and each of a bulk call's)."""
        rows = await self.db.fetch(
            ops.AUDITED_CANCEL,
            ops.audited_cancel_params(self.target, principal.actor, queue, job_id, self._clock()),
        )
        outcome = ops.parse_audited_cancel(rows)
        if outcome is None:
            raise _not_found(f"No job {job_id} in {queue}", JOB_NOT_FOUND)
        if outcome == "refused":
            raise _conflict(
                f"Job {job_id} already ended; only a live job can be cancelled",
                JOB_NOT_CANCELLABLE,
            )

    async def _replay(self, request: Any, queue: str, job_id: int, principal: Principal) -> Any:
        async def replay() -> Response:
            # runs once per Idempotency-Key: a repeat is answered from storage, unaudited
            key = request.headers.get(self.idempotency.header)
            try:
                return await self._replay_once(queue, job_id, principal, key)
            except DrainpipeError as exc:
                if exc.status >= 500:
                    raise  # the key is released: a retry with it runs again
                return self._problem(exc, request_path(request))

        return await self.idempotency.handle(request, replay)

    async def _replay_once(
        self, queue: str, job_id: int, principal: Principal, key: str | None
    ) -> Response:
        # the application's check runs first, on the record as it is now; its refusal is
        # audited by the same statement that would have replayed (docs/job-inbox.md)
        refusal = await self.jobs.replay_refusal(queue, job_id)
        rows = await self.db.fetch(
            ops.AUDITED_REPLAY_V2,
            ops.audited_replay_v2_params(
                self.target,
                principal.actor,
                queue,
                job_id,
                key,
                refusal,
                self.jobs.replay_rules(queue),
                self._clock(),
            ),
        )
        result = ops.parse_audited_replay(rows)
        if result is None:
            raise _not_found(f"No job {job_id} in {queue}", JOB_NOT_FOUND)
        if result.outcome == "refused":
            if result.code == JOB_ALREADY_REPLAYED:
                raise _conflict(
                    f"Job {job_id} was replayed already; replay its child if that died too",
                    JOB_ALREADY_REPLAYED,
                )
            if result.code is not None and result.code != JOB_NOT_DEAD:
                raise replay_refused(queue, job_id, result.code)
            raise _conflict(f"Job {job_id} is not dead; only a dead job is replayed", JOB_NOT_DEAD)
        return self._body({"id": result.new_job_id, "parent_id": job_id}, status=201)


def _parse_position(text: str) -> Position:
    try:
        return Position.parse(text)
    except (ValueError, DrainpipeError):
        raise invalid_request("This cursor is not valid here", code="CURSOR_INVALID") from None


def _position_text(position: Position) -> str:
    return str(position)


def management_app(jobs: Jobs, **options: Any) -> ManagementApp:
    return ManagementApp(jobs, **options)


class Mounted:
    """``app`` served below ``prefix`` when the platform hands it the full path (Vercel gives
    the function at ``/api/jobs`` every path under it through a rewrite): ``root_path``
    becomes the prefix, so routes and the page's links are relative to it."""

    def __init__(self, prefix: str, app: Any) -> None:
        self.prefix = "/" + prefix.strip("/")
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not scope.get("root_path"):
            path = str(scope.get("path") or "/")
            if path == self.prefix or path.startswith(self.prefix + "/"):
                scope = dict(scope, root_path=self.prefix)
        await self.app(scope, receive, send)

    async def aclose(self) -> None:
        close = getattr(self.app, "aclose", None)
        if close is not None:
            await close()
