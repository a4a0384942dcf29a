"""Requests, responses and RFC 9457 Problem Details, without importing a web framework.

drainpipe has one HTTP stack, this module and the ``http_*`` modules beside it (routing:
:mod:`drainpipe.http_routes`, WebSockets: :mod:`drainpipe.http_websocket`); every app it
ships is an ASGI app built on them (docs/architecture.md, "One HTTP stack"). The
HTTP-facing objects (drain route, idempotency, webhook inbox) also take Starlette-style
requests (``method``, ``url.path``, ``headers``, ``body()``, ``stream()``) through
:func:`as_request`; given a Starlette request, their ``handle(request)`` methods return a
Starlette ``Response`` (:mod:`drainpipe.http_starlette`) so FastAPI routes can return it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, MutableMapping
from typing import Any

from .errors import DrainpipeError
from .http_connection import Connection

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ProblemFormatter = Callable[[dict[str, Any], DrainpipeError], dict[str, Any]]

PROBLEM_TYPE_BASE = "https://drainpipe.dev/problems/"
PROBLEM_CONTENT_TYPE = "application/problem+json"
TITLES = {
    "validation": "Validation failed",
    "invalid_request": "Invalid request",
    "unauthorized": "Unauthorized",
    "forbidden": "Forbidden",
    "not_found": "Not found",
    "conflict": "Conflict",
    "serialization": "Concurrent update, retry",
    "timeout": "Timed out",
    "network": "Database unreachable",
    "rate_limited": "Too many requests",
    "raised": "Request rejected",
    "invalid_input": "Invalid input",
    "unexpected": "Unexpected error",
}
# Kinds whose message may describe internals (or only restates the code): no ``detail``.
_HIDDEN_DETAIL = frozenset({"unexpected", "network", "invalid_request"})


class Headers(Mapping[str, str]):
    """Case-insensitive, read-only request headers (the last value of a repeated name wins)."""

    def __init__(self, items: Any = ()) -> None:
        pairs = items.items() if isinstance(items, Mapping) else items
        self._items: dict[str, str] = {}
        for key, value in pairs:
            k = key.decode("latin-1") if isinstance(key, bytes) else str(key)
            v = value.decode("latin-1") if isinstance(value, bytes) else str(value)
            self._items[k.lower()] = v

    def __getitem__(self, key: str) -> str:
        return self._items[key.lower()]

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key.lower() in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


class Request(Connection):
    """An HTTP request as drainpipe's apps read it: built from the ASGI scope by
    :meth:`from_asgi`, or from another framework's request by :func:`as_request`. It reads
    like a Starlette request too (``url.path``, ``query_params``, ``path_params``,
    ``cookies``, ``client``, ``state``): ``authorize(request)`` callables get this object."""

    def __init__(
        self,
        method: str,
        path: str,
        headers: Headers,
        stream: Callable[[], AsyncIterator[bytes]],
        original: Any = None,
        query: str = "",
        scope: Scope | None = None,
    ) -> None:
        self.method = method.upper()
        self.path = path
        self.query = query  # the raw query string, without "?"
        self.headers = headers
        self._stream = stream
        self._body: bytes | None = None
        self.original = original
        self.scope = scope if scope is not None else {"type": "http", "path": path}
        self.path_params: dict[str, str] = {}  # set by the router that matched the path

    def _path_and_query(self) -> tuple[str, str]:
        return self.path, self.query

    async def stream(self) -> AsyncIterator[bytes]:
        if self._body is not None:
            yield self._body
            return
        async for chunk in self._stream():
            yield chunk

    async def body(self) -> bytes:
        if self._body is None:
            self._body = b"".join([chunk async for chunk in self._stream()])
        return self._body

    @classmethod
    def from_asgi(cls, scope: Scope, receive: Receive) -> Request:
        async def chunks() -> AsyncIterator[bytes]:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    # a body cut short must never pass for the whole body (a handler would
                    # run on, or a fingerprint be taken of, half a request)
                    raise body_incomplete()
                chunk = message.get("body", b"")
                if chunk:
                    yield chunk
                if not message.get("more_body", False):
                    return

        query = scope.get("query_string") or b""
        return cls(
            scope.get("method", "GET"),
            scope.get("path", "/"),
            Headers(scope.get("headers", [])),
            chunks,
            query=query.decode("latin-1") if isinstance(query, bytes) else str(query),
            scope=scope,
        )


BODY_INCOMPLETE = "REQUEST_BODY_INCOMPLETE"


def body_incomplete() -> DrainpipeError:
    """The error for a request whose client disconnected before its body ended."""
    return DrainpipeError(
        "invalid_request",
        "The client disconnected before the request body ended",
        code=BODY_INCOMPLETE,
    )


def is_client_disconnect(exc: BaseException) -> bool:
    """True for Starlette's ``ClientDisconnect`` (checked by name: Starlette is optional)."""
    return type(exc).__name__ == "ClientDisconnect"


def as_request(request: Any) -> Request:
    """Our :class:`Request` for a Starlette/FastAPI request (or one of ours)."""
    if isinstance(request, Request):
        return request
    url = getattr(request, "url", None)
    path = getattr(url, "path", None) or str(url or "/")
    stream_fn = getattr(request, "stream", None)

    async def chunks() -> AsyncIterator[bytes]:
        try:
            if stream_fn is not None:
                async for chunk in stream_fn():
                    if chunk:
                        yield chunk
            else:
                yield await request.body()
        except Exception as exc:
            if is_client_disconnect(exc):
                raise body_incomplete() from exc
            raise

    query = getattr(url, "query", "") or ""
    return Request(
        request.method,
        path,
        Headers(getattr(request, "headers", {}).items()),
        chunks,
        request,
        query=str(query),
    )


class Response:
    """A complete HTTP response; an ASGI app itself."""

    def __init__(
        self,
        status: int = 200,
        body: bytes = b"",
        *,
        headers: Mapping[str, str] | None = None,
        content_type: str | None = None,
    ) -> None:
        self.status = status
        self.body = body
        self.headers: dict[str, str] = dict(headers or {})
        if content_type is not None:
            self.headers["content-type"] = content_type

    @property
    def content_type(self) -> str | None:
        for key, value in self.headers.items():
            if key.lower() == "content-type":
                return value
        return None

    def json(self) -> Any:
        return json.loads(self.body)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in self.headers.items()]
        raw.append((b"content-length", str(len(self.body)).encode()))
        await send({"type": "http.response.start", "status": self.status, "headers": raw})
        await send({"type": "http.response.body", "body": self.body})

    def to_starlette(self) -> Any:
        """This response as a Starlette one, for a route of a user's Starlette app."""
        from .http_starlette import starlette_response

        return starlette_response(self)


def json_response(
    value: Any, status: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    body = json.dumps(value, separators=(",", ":"), default=str).encode()
    return Response(status, body, headers=headers, content_type="application/json")


def utf8_json_response(value: Any) -> Response:
    """200 with ``value`` as JSON whose text stays UTF-8 (not ``\\u``-escaped; NaN refused):
    the bytes the agent inbox and the executor have always answered."""
    body = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return Response(200, body.encode(), content_type="application/json")


def problem_body(error: DrainpipeError, instance: str | None = None) -> dict[str, Any]:
    """The RFC 9457 body for an error (``detail`` hidden for unexpected/network/invalid_request)."""
    body: dict[str, Any] = {
        "type": PROBLEM_TYPE_BASE + error.kind.replace("_", "-"),
        "title": TITLES.get(error.kind, "Error"),
        "status": error.status,
        "kind": error.kind,
    }
    if error.kind not in _HIDDEN_DETAIL:
        body["detail"] = str(error)
    if instance is not None:
        body["instance"] = instance
    if error.code is not None:
        body["code"] = error.code
    if error.kind == "validation" and error.issues is not None:
        body["issues"] = error.issues
    return body


def request_path(request: Any) -> str:
    """The path of a request (a Problem's ``instance``), ours or Starlette's, read from its
    ASGI scope.

    Not ``request.url.path``: building Starlette's URL decodes the whole query string as
    UTF-8 and raises on any other byte, which HTTP servers pass on as received (a request
    with ``?q=%ff`` spelled as a raw byte would answer 500)."""
    return str(request.scope.get("path") or "/")


def problem_response(
    error: DrainpipeError,
    instance: str | None = None,
    *,
    problem: ProblemFormatter | None = None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    """A Problem Details response. ``problem`` may rewrite the body; the status and the
    ``Retry-After``/``WWW-Authenticate`` headers stay as they are."""
    body = problem_body(error, instance)
    if problem is not None:
        body = problem(body, error)
    all_headers = dict(headers or {})
    if error.status == 401 and not any(k.lower() == "www-authenticate" for k in all_headers):
        all_headers["WWW-Authenticate"] = 'Bearer realm="drainpipe", error="invalid_token"'
    return Response(
        error.status,
        json.dumps(body, separators=(",", ":"), default=str).encode(),
        headers=all_headers,
        content_type=PROBLEM_CONTENT_TYPE,
    )


def method_not_allowed(allow: str) -> Response:
    return Response(405, b"", headers={"Allow": allow})


async def run_asgi(
    handle: Callable[[Request], Awaitable[Response]], scope: Scope, receive: Receive, send: Send
) -> None:
    """Serve one ASGI HTTP request with ``handle``; lifespan events are acknowledged."""
    if scope["type"] == "lifespan":
        await serve_lifespan(receive, send)
        return
    if scope["type"] != "http":
        return
    response = await handle(Request.from_asgi(scope, receive))
    await response(scope, receive, send)


async def serve_lifespan(
    receive: Receive,
    send: Send,
    on_shutdown: Callable[[], Awaitable[Any]] | None = None,
    *,
    on_startup: Callable[[], Awaitable[Any]] | None = None,
) -> None:
    """Acknowledge ASGI lifespan startup and shutdown, running ``on_startup`` before the
    former and ``on_shutdown`` before the latter."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            if on_startup is not None:
                await on_startup()
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            if on_shutdown is not None:
                await on_shutdown()
            await send({"type": "lifespan.shutdown.complete"})
            return
