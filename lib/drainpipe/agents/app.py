"""``agents.app(authorize=..., budget=25.0)``: the agent inbox over HTTP and WebSocket
(drainpipe's own HTTP stack, :mod:`drainpipe.http_routes`), with RFC 9457 Problem Details
and stable codes.

Who may do what: ``authorize(request)`` answers a :class:`drainpipe.Principal` (or None →
401). An inbox outside ``Principal.inboxes`` → 403 ``INBOX_FORBIDDEN``; an event outside
it → 404 ``EVENT_NOT_FOUND``, exactly as for an event that does not exist, so its
existence is not revealed (the SQL takes the principal's inboxes and finds nothing).
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Awaitable, Callable, Collection
from typing import TYPE_CHECKING, Any

from ..errors import DrainpipeError
from ..http import Request, Response, problem_response, request_path, utf8_json_response
from ..http_guards import (
    AGENT_MAX_BODY_BYTES,
    check_origins,
    cross_site_refusal,
    read_request_body,
)
from ..principals import Principal
from .statements import INBOX_FORBIDDEN, RESERVE, bad_parameter

if TYPE_CHECKING:
    from .inboxes import AgentInboxes

log = logging.getLogger("drainpipe.agents")

Handler = Callable[[Request, Principal], Awaitable[Response]]

UNAUTHORIZED = "UNAUTHORIZED"
INVALID_BODY = "INVALID_BODY"


async def principal_of(authorize: Any, request: Any) -> Principal:
    """The caller, or 401."""
    found = authorize(request)
    if inspect.isawaitable(found):
        found = await found
    if found is None:
        raise DrainpipeError("unauthorized", "A bearer token is required", code=UNAUTHORIZED)
    if not isinstance(found, Principal):
        raise TypeError("authorize(request) must return a drainpipe.Principal or None")
    return found


def scope_of(principal: Principal) -> list[str] | None:
    """The inboxes a principal may touch, for the SQL (None: every one)."""
    return None if principal.inboxes == "*" else sorted(principal.inboxes)


def check_inbox(principal: Principal, inbox_id: str) -> None:
    if not principal.may_use_inbox(inbox_id):
        raise DrainpipeError("forbidden", "This token may not use that inbox", code=INBOX_FORBIDDEN)


async def _json_body(request: Request) -> dict[str, Any]:
    # read as a capped stream: 413 BODY_TOO_LARGE past 128 KiB, the rest never held
    raw = await read_request_body(request, AGENT_MAX_BODY_BYTES)
    try:
        body = json.loads(raw or b"{}")
    except (ValueError, RecursionError):  # also JSON nested past Python's recursion limit
        raise DrainpipeError("invalid_request", "The body is not JSON", code=INVALID_BODY) from None
    if not isinstance(body, dict):
        raise DrainpipeError("invalid_request", "The body must be a JSON object", code=INVALID_BODY)
    return body


def _query(request: Request, name: str) -> str | None:
    values = request.query_params.getlist(name)
    if len(values) > 1:
        raise bad_parameter(name, f"{name} may be given once")
    return values[0] if values else None


def build_app(
    agents: AgentInboxes,
    *,
    authorize: Any,
    budget: float = 25.0,
    allowed_origins: Collection[str] | None = None,
) -> Any:
    from ..http_routes import Route, Router, WebSocketRoute
    from .stream import stream_endpoint

    if not callable(authorize):
        raise TypeError("authorize must be a callable: authorize(request) -> Principal | None")
    if (
        not isinstance(budget, int | float)
        or isinstance(budget, bool)
        or not RESERVE < budget <= 900
    ):
        raise ValueError(f"budget must be seconds, more than {RESERVE:g} and at most 900")
    origins = check_origins(allowed_origins)

    def route(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                refusal = cross_site_refusal(request.method, request.headers, origins)
                if refusal is not None:
                    raise refusal
                principal = await principal_of(authorize, request)
                return await handler(request, principal)
            except DrainpipeError as error:
                if error.status >= 500:
                    log.warning("agent inbox %s: %s", request_path(request), error)
                return problem_response(error, request_path(request))

        return endpoint

    async def next_events(request: Request, principal: Principal) -> Response:
        inbox_id = request.path_params["inbox_id"]
        check_inbox(principal, inbox_id)
        events = await agents.inbox(inbox_id).pull(
            order=_query(request, "order"),
            max=_query(request, "max") or 1,
            wait=_query(request, "wait") or 0,
            ack=_query(request, "ack"),
            filters=(
                _query(request, "type"),
                _query(request, "source"),
                _query(request, "subscription"),
                _query(request, "correlation"),
            ),
            principal=principal.actor,
            key=request.headers.get("idempotency-key"),
            budget=float(budget),
        )
        return utf8_json_response({"events": [event.to_json() for event in events]})

    async def peek(request: Request, principal: Principal) -> Response:
        inbox_id = request.path_params["inbox_id"]
        check_inbox(principal, inbox_id)
        page = await agents.inbox(inbox_id).events(
            cursor=_query(request, "cursor") or None,
            limit=_query(request, "limit") or 50,  # type: ignore[arg-type]
            type=_query(request, "type"),
            source=_query(request, "source"),
            subscription=_query(request, "subscription"),
            correlation=_query(request, "correlation"),
        )
        return utf8_json_response(
            {"events": [item.to_json() for item in page.items], "next_cursor": page.next_cursor}
        )

    async def claim(request: Request, principal: Principal) -> Response:
        inbox_id = request.path_params["inbox_id"]
        check_inbox(principal, inbox_id)
        body = await _json_body(request)
        ids = body.get("event_ids")
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise bad_parameter("event_ids", "event_ids must be a list of event ids")
        result = await agents.inbox(inbox_id).claim(ids)
        return utf8_json_response(
            {
                "claimed": [event.to_json() for event in result.claimed],
                "unavailable": result.unavailable,
                "not_found": result.not_found,
            }
        )

    def settlement(op: str) -> Handler:
        async def settle(request: Request, principal: Principal) -> Response:
            body = await _json_body(request)
            fields: dict[str, Any] = {}
            if op == "ack":
                fields["outcome"] = body.get("outcome")
            elif op == "release":
                fields["delay_seconds"] = body.get("delay_seconds", 0)
                fields["error"] = body.get("error")
            else:
                if "seconds" not in body:
                    raise bad_parameter("seconds", "seconds is required (1..3600)")
                fields["seconds"] = body["seconds"]
            result = await agents.settle(
                op,  # type: ignore[arg-type]
                request.path_params["event_id"],
                body.get("lease_id"),
                inboxes=scope_of(principal),
                **fields,
            )
            if not result.ok:
                raise DrainpipeError(
                    "conflict",
                    "That lease is no longer the event's current one; nothing changed",
                    code="LEASE_LOST",
                )
            return utf8_json_response(result.to_json())

        return settle

    async def raw(request: Request, principal: Principal) -> Response:
        event_id = request.path_params["event_id"]
        body = await agents.raw(event_id, inboxes=scope_of(principal))
        filename = event_id if event_id.replace("_", "").isalnum() else "event"
        return Response(
            200,
            body,
            headers={
                "content-type": "application/octet-stream",
                "content-disposition": f'attachment; filename="{filename}.json"',
                "x-content-type-options": "nosniff",
                "cache-control": "no-store",
            },
        )

    inbox_path = "/v1/agent/inbox/{inbox_id}"
    event_path = "/v1/events/{event_id}"
    routes: list[Any] = [
        Route(f"{inbox_path}/next", route(next_events), methods=["GET"]),
        Route(f"{inbox_path}/events", route(peek), methods=["GET"]),
        Route(f"{inbox_path}/claim", route(claim), methods=["POST"]),
        Route(f"{event_path}/ack", route(settlement("ack")), methods=["POST"]),
        Route(f"{event_path}/release", route(settlement("release")), methods=["POST"]),
        Route(f"{event_path}/extend", route(settlement("extend")), methods=["POST"]),
        Route(f"{event_path}/raw", route(raw), methods=["GET"]),
        WebSocketRoute(
            f"{inbox_path}/stream",
            lambda websocket: stream_endpoint(agents, authorize, websocket, origins),
        ),
    ]
    return Router(routes)
