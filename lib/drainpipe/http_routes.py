"""Routing for drainpipe's apps with more than one route (the agent inbox, the executor):
path templates with ``{name}`` parameters, methods, a WebSocket route, and the guards every
app puts before routing.

    app = Router([
        Route("/v1/events/{event_id}/ack", ack, methods=["POST"]),
        WebSocketRoute("/v1/agent/inbox/{inbox_id}/stream", stream),
    ])

Before any route, a query string that is not UTF-8 is refused (400 ``QUERY_INVALID``; a
WebSocket upgrade is closed with 1008, which servers answer with a 403). A path no route
knows answers 404 ``ROUTE_NOT_FOUND``, a known path with another method 405
``METHOD_NOT_ALLOWED`` with an ``Allow`` header (both Problem Details), and a path that only
differs by a trailing slash from a route's is redirected to it (307, relative
``Location``). Paths are matched below the app's mount (``root_path``). ``GET`` routes
answer ``HEAD`` too. ASGI lifespan events are acknowledged.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import Any
from urllib.parse import quote

from .errors import DrainpipeError
from .http import Receive, Request, Response, Scope, Send, problem_response, serve_lifespan
from .http_guards import query_refusal
from .http_websocket import WebSocket

ROUTE_NOT_FOUND = "ROUTE_NOT_FOUND"
METHOD_NOT_ALLOWED = "METHOD_NOT_ALLOWED"

Endpoint = Callable[[Request], Awaitable[Response]]
WebSocketEndpoint = Callable[[WebSocket], Awaitable[None]]

_URL_SAFE = ":/%#?=@[]!$&'()*+,;"
_PARAMETER = re.compile(r"{([A-Za-z_][A-Za-z0-9_]*)}")


def compile_path(template: str) -> re.Pattern[str]:
    """The pattern of a path template: each ``{name}`` matches one non-empty segment."""
    pattern, end = "", 0
    for found in _PARAMETER.finditer(template):
        pattern += re.escape(template[end : found.start()]) + f"(?P<{found.group(1)}>[^/]+)"
        end = found.end()
    return re.compile(pattern + re.escape(template[end:]))


class Route:
    """An HTTP route: ``endpoint(request) -> Response`` for the ``methods`` given."""

    def __init__(self, path: str, endpoint: Endpoint, *, methods: Collection[str]) -> None:
        self.path = path
        self.pattern = compile_path(path)
        self.endpoint = endpoint
        upper = {method.upper() for method in methods}
        self.methods = frozenset(upper | {"HEAD"} if "GET" in upper else upper)

    def match(self, path: str) -> dict[str, str] | None:
        found = self.pattern.fullmatch(path)
        return None if found is None else found.groupdict()


class WebSocketRoute:
    """A WebSocket route: ``endpoint(websocket)`` accepts or refuses the socket itself."""

    def __init__(self, path: str, endpoint: WebSocketEndpoint) -> None:
        self.path = path
        self.pattern = compile_path(path)
        self.endpoint = endpoint

    def match(self, path: str) -> dict[str, str] | None:
        found = self.pattern.fullmatch(path)
        return None if found is None else found.groupdict()


def route_path(scope: Mapping[str, Any]) -> str:
    """The path below where the app is mounted (a mount keeps the full path in ``path`` and
    its prefix in ``root_path``)."""
    path = str(scope.get("path") or "/")
    root = str(scope.get("root_path") or "")
    if root and (path == root or path.startswith(root + "/")):
        return path[len(root) :] or "/"
    return path


class Router:
    """An ASGI app answering with the first route whose path and method match; see the
    module."""

    def __init__(self, routes: Sequence[Route | WebSocketRoute]) -> None:
        self.http = [route for route in routes if isinstance(route, Route)]
        self.websocket = [route for route in routes if isinstance(route, WebSocketRoute)]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await serve_lifespan(receive, send)
            return
        if kind not in ("http", "websocket"):
            return
        refusal = query_refusal(scope)
        if refusal is not None:
            if kind == "websocket":
                await send({"type": "websocket.close", "code": 1008})
                return
            await problem_response(refusal, str(scope.get("path") or "/"))(scope, receive, send)
            return
        if kind == "websocket":
            await self._websocket(scope, receive, send)
            return
        response = await self._http(scope, receive)
        await response(scope, receive, send)

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = route_path(scope)
        for route in self.websocket:
            params = route.match(path)
            if params is not None:
                websocket = WebSocket(scope, receive, send)
                websocket.path_params = params
                await route.endpoint(websocket)
                return
        # no such stream: closed before it is accepted (servers answer the upgrade with 403)
        await send({"type": "websocket.close", "code": 1000, "reason": ""})

    async def _http(self, scope: Scope, receive: Receive) -> Response:
        path = route_path(scope)
        method = str(scope.get("method") or "GET").upper()
        allowed: set[str] = set()
        for route in self.http:
            params = route.match(path)
            if params is None:
                continue
            if method in route.methods:
                request = Request.from_asgi(scope, receive)
                request.path_params = params
                return await route.endpoint(request)
            allowed |= route.methods
        instance = str(scope.get("path") or "/")
        if allowed:
            error = DrainpipeError(
                "invalid_request", f"Use {' or '.join(sorted(allowed))} here",
                code=METHOD_NOT_ALLOWED, status=405,
            )  # fmt: skip
            return problem_response(error, instance, headers={"Allow": ", ".join(sorted(allowed))})
        if path != "/":
            other = path[:-1] if path.endswith("/") else path + "/"
            if any(route.match(other) is not None for route in self.http):
                full = instance[:-1] if instance.endswith("/") else instance + "/"
                query = scope.get("query_string") or b""
                location = full + ("?" + bytes(query).decode("utf-8") if query else "")
                # percent-encoded: a header is latin-1, a path may hold any character
                return Response(307, headers={"Location": quote(location, safe=_URL_SAFE)})
        error = DrainpipeError("not_found", f"No route {path}", code=ROUTE_NOT_FOUND)
        return problem_response(error, instance)


__all__ = [
    "METHOD_NOT_ALLOWED",
    "ROUTE_NOT_FOUND",
    "Route",
    "Router",
    "WebSocketRoute",
    "compile_path",
    "route_path",
]
