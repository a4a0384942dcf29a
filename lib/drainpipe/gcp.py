"""Google Cloud entry: drainpipe's ASGI apps as ``functions-framework`` HTTP functions
(Cloud Run functions, Cloud Functions gen 2), with Cloud Scheduler as the cron caller.

functions-framework hands each HTTP function a Flask request and serves it from several
threads (gunicorn's ``THREADS``). :func:`asgi_handler` turns an ASGI app into a plain
function ``handle(flask_request) -> flask.Response``: every request runs on one event loop
in a background thread of the process, so the app's pools are opened once per instance and
shared by all threads::

    import functions_framework
    from drainpipe.gcp import asgi_handler

    handle = asgi_handler(app)

    @functions_framework.http
    def drain(request):
        return handle(request)

Cloud Scheduler authenticates with the drain route's bearer secret in ``Authorization``
(``--headers=Authorization="Bearer $CRON_SECRET"``). With OIDC instead (the function
deployed ``--no-allow-unauthenticated``, the job given ``--oidc-service-account-email``),
Cloud Run checks the token before the request reaches the function and ``Authorization``
holds that token; then send the secret in another header and pass
``secret_header="X-Drain-Secret"``: when a request carries it, its value replaces
``Authorization`` for the app (without it, ``Authorization`` reaches the app as sent).
drainpipe does not verify Google's tokens itself: the platform's invoker check does.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from .http import Message, Receive, Scope, Send

if TYPE_CHECKING:
    import flask

log = logging.getLogger("drainpipe.gcp")

ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
DEFAULT_TIMEOUT = 3600.0  # Cloud Run functions' longest HTTP request


class _BackgroundLoop:
    """One event loop in a daemon thread, started on first use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None

    def get(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name="drainpipe-gcp-loop", daemon=True
                )
                thread.start()
                self._loop = loop
            return self._loop

    def run(self, coroutine: Awaitable[Any], timeout: float | None) -> Any:
        future = asyncio.run_coroutine_threadsafe(_as_coroutine(coroutine), self.get())
        return future.result(timeout)


async def _as_coroutine(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


_shared_loop = _BackgroundLoop()


class AsgiHandler:
    """Serves Flask requests with an ASGI app; see :func:`asgi_handler`."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        secret_header: str | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        loop: _BackgroundLoop | None = None,
    ) -> None:
        if not callable(app):
            raise TypeError("asgi_handler needs an ASGI app")
        if secret_header is not None and (
            not isinstance(secret_header, str)
            or not secret_header.strip()
            or secret_header.strip().lower() == "authorization"
        ):
            raise ValueError("secret_header names a header other than Authorization")
        self.app = app
        self.secret_header = None if secret_header is None else secret_header.strip().lower()
        self.timeout = timeout
        self._loop = loop or _shared_loop
        atexit.register(self.close)

    def scope(self, request: flask.Request) -> Scope:
        """The ASGI HTTP scope of a Flask (werkzeug) request."""
        headers = [
            (name.lower().encode("latin-1"), value.encode("latin-1", "replace"))
            for name, value in request.headers.items()
        ]
        secret = None if self.secret_header is None else request.headers.get(self.secret_header)
        if secret is not None:
            # Authorization held the platform's (already verified) OIDC token: the app
            # sees the secret there instead, and never the token
            headers = [(name, value) for name, value in headers if name != b"authorization"]
            headers.append((b"authorization", secret.encode("latin-1", "replace")))
        environ = request.environ
        server_port = str(environ.get("SERVER_PORT") or "")
        return {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": str(environ.get("SERVER_PROTOCOL", "HTTP/1.1")).split("/")[-1],
            "method": request.method.upper(),
            "scheme": request.scheme,
            "path": request.path,
            "raw_path": request.path.encode("utf-8", "surrogateescape"),
            "query_string": request.query_string,
            "root_path": "",
            "headers": headers,
            "client": (request.remote_addr or "", 0),
            "server": (
                str(environ.get("SERVER_NAME", "")),
                int(server_port) if server_port.isdigit() else None,
            ),
        }

    def __call__(self, request: flask.Request) -> flask.Response:
        import flask

        body = request.get_data(cache=False)
        status, headers, content = self._loop.run(
            _call_asgi(self.app, self.scope(request), body), self.timeout
        )
        response = flask.Response(content, status=status)
        response.headers.clear()  # the app's headers, exactly (no Flask default type)
        for name, value in headers:
            response.headers.add(name, value)
        return response

    def close(self) -> None:
        """Close what the app holds (``aclose()``: its pools); run at interpreter exit."""
        close = getattr(self.app, "aclose", None)
        if close is None:
            return
        with contextlib.suppress(Exception):
            self._loop.run(close(), 10.0)


async def _call_asgi(app: ASGIApp, scope: Scope, body: bytes) -> tuple[int, list[Any], bytes]:
    """Run one HTTP exchange; (status, [(name, value)], body). A 500 when the app raises
    before answering (logged), like every ASGI server."""
    sent_body = False
    disconnect = asyncio.Event()
    status = 500
    headers: list[tuple[str, str]] = []
    chunks: list[bytes] = []
    started = False

    async def receive() -> Message:
        nonlocal sent_body
        if not sent_body:
            sent_body = True
            return {"type": "http.request", "body": body, "more_body": False}
        await disconnect.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        nonlocal status, started
        if message["type"] == "http.response.start":
            started = True
            status = int(message["status"])
            headers.extend(
                (bytes(name).decode("latin-1"), bytes(value).decode("latin-1"))
                for name, value in message.get("headers") or []
            )
        elif message["type"] == "http.response.body":
            chunks.append(bytes(message.get("body") or b""))
            if not message.get("more_body"):
                disconnect.set()

    try:
        await app(scope, receive, send)
    except Exception:
        log.exception("the ASGI app raised while serving %s", scope.get("path"))
        if not started:
            return 500, [("content-type", "text/plain; charset=utf-8")], b"Internal Server Error"
        raise
    finally:
        disconnect.set()
    return status, headers, b"".join(chunks)


def asgi_handler(
    app: ASGIApp, *, secret_header: str | None = None, timeout: float | None = DEFAULT_TIMEOUT
) -> AsgiHandler:
    """A function ``handle(flask_request) -> flask.Response`` serving ``app`` (any
    drainpipe ASGI app: the drain route, ``inbox.app``, ``Idempotency.wrap(app)``, a
    function's lazy app) for functions-framework. ``secret_header``: read the route's
    secret from this header instead of ``Authorization`` (for OIDC-authenticated Cloud
    Scheduler calls, see the module docstring). ``timeout``: seconds one request may take
    before the calling thread gives up (the app's task is not cancelled).
    """
    return AsgiHandler(app, secret_header=secret_header, timeout=timeout)
