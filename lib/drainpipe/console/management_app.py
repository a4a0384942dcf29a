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

This module is the app itself: its settings, who is asking, and which route answers. What
the job and audit routes do is :mod:`drainpipe.console.job_routes`; the console's routes
(``/queues``, pause and resume, the search filters, bulk actions, ``/metrics`` and, given
``agents``, ``/inboxes``) are :mod:`drainpipe.console.console_routes`; the page is
:mod:`drainpipe.console.page`; :class:`Mounted` is :mod:`drainpipe.console.mount`.

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

from ..errors import DrainpipeError
from ..http import (
    ProblemFormatter,
    Receive,
    Request,
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
    read_request_body,
)
from ..principals import Authorize, Principal
from ..validation import INT8_MAX
from .console_routes import Console
from .cursors import CursorSigner
from .job_routes import JobRoutes
from .mount import Mounted
from .page import page_response
from .problem_codes import (
    ADMIN_REQUIRED,
    JOB_NOT_FOUND,
    METHOD_NOT_ALLOWED,
    QUEUE_NOT_FOUND,
    ROUTE_NOT_FOUND,
    UNAUTHORIZED,
    not_found,
)

if TYPE_CHECKING:
    from ..agents import AgentInboxes
    from ..idempotency import Idempotency
    from ..jobs import Jobs

logger = logging.getLogger("drainpipe.admin")

_JOB_PATH = re.compile(r"^/jobs/(?P<queue>[^/]+)/(?P<id>[^/]+)(?:/(?P<action>cancel|replay))?$")
_QUEUE_PATH = re.compile(r"^/queues/(?P<queue>[^/]+)/(?P<action>pause|resume)$")
_BULK_PATH = re.compile(r"^/jobs/bulk/(?P<action>cancel|replay)$")
_API_HEADERS = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}


class ManagementApp:
    """The ASGI app :meth:`drainpipe.Jobs.management_app` builds; see the module.

    * ``authorize(request) -> Principal | None`` (plain or async) gets the request
      (:class:`drainpipe.http.Request`, read like a Starlette one); None answers 401.
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
        self.job_routes = JobRoutes(self)
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
        response = await self.handle(Request.from_asgi(scope, receive))
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

    async def handle(self, request: Request) -> Any:
        """Answer one request (a :class:`~drainpipe.http.Response`)."""
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
            return await self.job_routes.list_jobs(request, await self._principal(request))
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
                raise not_found(f'No queue "{queue}" is declared here', QUEUE_NOT_FOUND)
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
            return await self.job_routes.list_audit(request, principal)
        match = _JOB_PATH.match(path)
        if match is None:
            raise not_found(f"No route {path}", ROUTE_NOT_FOUND)
        action = match.group("action")
        self._allow(method, "POST" if action else "GET")
        principal = await self._principal(request)
        if action is not None:
            self._require_admin(principal)
        queue, job_id = self._job_address(match.group("queue"), match.group("id"))
        if action is None:
            return await self.job_routes.get_job(queue, job_id)
        if action == "cancel":
            return await self.job_routes.cancel(queue, job_id, principal)
        return await self.job_routes.replay(request, queue, job_id, principal)

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
            await read_request_body(request, MANAGEMENT_MAX_BODY_BYTES)

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
            raise not_found(f'No queue "{queue}" is declared here', QUEUE_NOT_FOUND)
        if not re.fullmatch(r"[0-9]{1,19}", raw_id) or int(raw_id) > INT8_MAX:
            raise not_found(f"No job {raw_id} in {queue}", JOB_NOT_FOUND)
        return queue, int(raw_id)

    # -- answers -------------------------------------------------------------------------

    def _body(self, data: Any, status: int = 200, **meta: Any) -> Response:
        return json_response(
            {"data": data, "meta": {"target": self.target, **meta}},
            status=status,
            headers=_API_HEADERS,
        )

    def _clock(self) -> datetime | None:
        return None if self.now is None else self.now()


def management_app(jobs: Jobs, **options: Any) -> ManagementApp:
    return ManagementApp(jobs, **options)


__all__ = ["ManagementApp", "Mounted", "management_app"]
