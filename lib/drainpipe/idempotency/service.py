"""Idempotency keys: a retried request runs its handler once; later ones get its response.

    idem = Idempotency(db, ttl=24 * 3600, lock=60, required=False, header="Idempotency-Key")
    response = await idem.handle(request, handler)   # Starlette/FastAPI route
    app = idem.wrap(asgi_app)                        # ASGI middleware

The decisions live in SQL (``drainpipe.begin_idempotent`` and friends, ``sql/idempotency.sql``);
this module reads the key, computes the fingerprint and scope, stores or replays responses
and renders the contract's Problem Details. Safe methods (GET, HEAD, OPTIONS, TRACE) are
idempotent by definition and pass through untouched.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from ..errors import DrainpipeError
from ..http import (
    Message,
    Receive,
    Request,
    Response,
    Scope,
    Send,
    as_request,
)
from ..http_guards import read_capped, read_request_body
from ..models import Begin as Begin  # re-exported: drainpipe.Begin lives here for users
from ..telemetry import active_telemetry
from .idempotency_rules import _Claim
from .keys import fingerprint
from .responses import _read_response, _stored_status, _to_starlette
from .store import IdempotencyStore

ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
# The server may offer these; under wrap() the inner app must send its body through us.
_BYPASSING_EXTENSIONS = ("http.response.pathsend", "http.response.zerocopysend")


class Idempotency(IdempotencyStore):
    """Stripe-style idempotency keys on your Postgres (the ``idempotency`` SQL module).

    * ``ttl``: seconds or a ``timedelta`` a key lives from its first request (default 24 h);
      afterwards the same key is a new request.
    * ``lock``: seconds a running request holds its key (default 60); after that a retry
      takes the key over and runs again, and the first holder can no longer store its result.
    * ``required``: a request without the header gets 400 ``IDEMPOTENCY_KEY_MISSING``;
      otherwise it runs without idempotency.
    * ``header``: the key's header name (matched case-insensitively).
    * ``scope``: a string, or ``scope(request) -> str`` (plain or async; it receives the
      request given to ``handle``, our :class:`~drainpipe.http.Request` under ``wrap``).
      Default: the caller, from the ``Authorization`` header, stored as a keyed hash
      (HMAC-SHA256 under ``scope_key``). A request with a key and no caller (no header, or
      the function answers None or "") → 400 ``IDEMPOTENCY_SCOPE_REQUIRED``.
    * ``anonymous``: callers without credentials share one scope instead of that 400 (a
      public endpoint: anyone who sends another's key, path, query and body gets its answer).
    * ``scope_key``: the HMAC key of the default scope (16+ bytes, the same on every
      instance); default ``$DRAINPIPE_SCOPE_KEY``. Required when ``scope`` is not given.
    * ``max_body_bytes``: the largest request body read (413 ``BODY_TOO_LARGE`` as soon as
      it is passed, before fingerprinting) and response body stored (default 1 MiB). A larger
      2xx-4xx response releases the key and answers 500 ``IDEMPOTENCY_RESPONSE_TOO_LARGE``
      instead (it is logged), because passing it through unstored would silently run a retry
      twice.
    """

    # -- HTTP ----------------------------------------------------------------------------

    async def handle(self, request: Any, handler: Callable[[], Awaitable[Any]]) -> Any:
        """Run ``handler`` (``async () -> Response``) at most once per key; see the module.

        Given a Starlette request, every answer is a Starlette ``Response`` (the handler's
        own object when it is passed through or stored; a streaming response is read in
        full and rebuilt). Given our :class:`~drainpipe.http.Request`, answers are ours.
        A handler that raises releases the key and the exception propagates.
        """
        if (otel := active_telemetry()) is None:
            return await self._handle(request, handler)
        with otel.span("drainpipe.idempotency", {"drainpipe.idempotency.header": self.header}):
            return await self._handle(request, handler)

    async def _handle(self, request: Any, handler: Callable[[], Awaitable[Any]]) -> Any:
        ours = as_request(request)
        native = ours is request

        async def read_body() -> bytes:
            # a capped stream, kept for the handler: Starlette's ``_body``, our ``_body``
            if native:
                return await _read_ours(ours, self.max_body_bytes)
            return await read_request_body(request, self.max_body_bytes)

        decision = await self._prepare(ours, request, read_body)
        if decision is None:
            return await handler()
        if isinstance(decision, Response):
            return decision if native else _to_starlette(decision)
        try:
            response = await handler()
            # a streaming body is read here: if it fails, the handler failed
            status, body, content_type, response = await _read_response(response)
        except BaseException:
            await self._release_quietly(decision)
            raise
        failure = await self._settle(decision, status, body, content_type, ours.path)
        if failure is not None:
            return failure if native else _to_starlette(failure)
        return response

    def wrap(self, app: ASGIApp) -> ASGIApp:
        """``app`` as ASGI middleware: its responses are buffered, stored, then sent.

        An app that raises before its response is whole releases the key (the server
        answers 500); one that raises after (a failing background task) still has its
        response stored and sent, and the exception propagates afterwards."""

        async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            if (otel := active_telemetry()) is None:
                await idempotent(scope, receive, send)
                return
            with otel.span("drainpipe.idempotency", {"drainpipe.idempotency.header": self.header}):
                await idempotent(scope, receive, send)

        async def idempotent(scope: Scope, receive: Receive, send: Send) -> None:
            request = Request.from_asgi(scope, receive)

            async def read_body() -> bytes:
                return await _read_ours(request, self.max_body_bytes)

            decision = await self._prepare(request, request, read_body)
            if decision is None:  # the body was not read: the app gets the original stream
                await app(scope, receive, send)
                return
            if isinstance(decision, Response):
                await decision(scope, receive, send)
                return
            await self._run_wrapped(app, scope, receive, send, request, decision)

        return middleware

    async def _run_wrapped(
        self,
        app: ASGIApp,
        scope: Scope,
        receive: Receive,
        send: Send,
        request: Request,
        claim: _Claim,
    ) -> None:
        body = await request.body()
        body_sent = False

        async def replay_receive() -> Message:
            nonlocal body_sent
            if not body_sent:
                body_sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        start: Message | None = None
        chunks: list[bytes] = []
        size = 0
        finished = False  # the app sent its last body chunk

        async def capture(message: Message) -> None:
            nonlocal start, size, finished
            if message["type"] == "http.response.start":
                start = message
            elif message["type"] == "http.response.body":
                finished = finished or not message.get("more_body", False)
                chunk = bytes(message.get("body", b""))
                size += len(chunk)
                # a storable response over the cap is never sent, so its rest is dropped;
                # a 1xx/5xx one is passed through unstored, whole
                if size <= self.max_body_bytes or not _stored_status(start):
                    chunks.append(chunk)

        inner_scope = dict(scope)
        extensions = dict(scope.get("extensions") or {})
        for name in _BYPASSING_EXTENSIONS:
            extensions.pop(name, None)
        inner_scope["extensions"] = extensions
        try:
            await app(inner_scope, replay_receive, capture)
        except Exception:
            if start is None or not finished:
                await self._release_quietly(claim)
                raise
            # the response was whole when the app raised (a Starlette background task runs
            # after it): unwrapped, the client would have it, so a retry must replay it
            # rather than run the request again. The error still reaches the server's log.
            await self._send_settled(claim, start, chunks, size, scope, receive, send, request)
            raise
        except BaseException:
            await self._release_quietly(claim)
            raise
        if start is None:
            await self._release_quietly(claim)
            raise RuntimeError("The wrapped app returned without sending a response")
        await self._send_settled(claim, start, chunks, size, scope, receive, send, request)

    async def _send_settled(
        self,
        claim: _Claim,
        start: Message,
        chunks: list[bytes],
        size: int,
        scope: Scope,
        receive: Receive,
        send: Send,
        request: Request,
    ) -> None:
        """Store (or release) the captured response, then send it (or the too-large 500)."""
        status = int(start["status"])
        content_type = None
        for name, value in start.get("headers", []):
            if bytes(name).lower() == b"content-type":
                content_type = bytes(value).decode("latin-1")
        data = b"".join(chunks)
        failure = await self._settle(claim, status, data, content_type, request.path, size=size)
        if failure is not None:
            await failure(scope, receive, send)
            return
        await send(start)
        await send({"type": "http.response.body", "body": data, "more_body": False})

    # -- shared steps --------------------------------------------------------------------

    async def _prepare(
        self, request: Request, original: Any, read_body: Callable[[], Awaitable[bytes]]
    ) -> Response | _Claim | None:
        """None: run without idempotency (the body is then unread); a Response: answer it;
        a claim: run the handler, then settle."""
        key = self._key_of(request.method, request.headers, request.path)
        if not isinstance(key, str):
            return key  # None (no idempotency) or the Problem to answer
        try:
            scope = await self._scope_for(original, request)
            body = await read_body()  # after the scope: an anonymous refusal reads nothing
            fp = fingerprint(request.method, request.path, body, request.query)
            begun = await self.begin(key, fp, scope)
        except DrainpipeError as exc:
            return self._problem(exc, request.path)
        return self._answer(begun, key, scope, request.path)

    async def _scope_for(self, original: Any, request: Request) -> str:
        if self.scope is None:
            return self._scope_answer(self._default_scope(request.headers))
        if isinstance(self.scope, str):
            return self._scope_answer(self.scope)
        value = self.scope(original)
        if inspect.isawaitable(value):
            value = await value
        return self._scope_answer(value)


async def _read_ours(request: Request, max_bytes: int) -> bytes:
    """Our request's body as a capped stream (413 past ``max_bytes``), kept for re-reads."""
    cached = request._body
    if cached is not None:
        return cached
    data = await read_capped(request.stream(), max_bytes, request.headers)
    request._body = data
    return data
