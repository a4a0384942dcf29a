"""Idempotency keys for synchronous apps: ``begin``/``complete``/``release``, a WSGI
wrapper (Flask, Django, any WSGI app) and the three steps a framework hook needs
(:meth:`Idempotency.before`, :meth:`~Idempotency.after`, :meth:`~Idempotency.abandon`;
``drainpipe.contrib.django`` is built on them).

The options, checks and decisions are :class:`~drainpipe.idempotency.idempotency_rules.IdempotencyRules`,
shared with the async :class:`drainpipe.Idempotency`; ``begin``, ``complete``, ``release``,
``purge`` and the settling of a request come from :mod:`drainpipe.sync.idempotency_store`,
generated from the async :mod:`drainpipe.idempotency.store`. The same request answers the
same status, code, body and ``Idempotency-Replayed`` header under both.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Mapping
from http import HTTPStatus
from typing import Any

from ..errors import DrainpipeError
from ..http import Headers, Response, body_incomplete
from ..http_guards import body_too_large, declared_too_large
from ..idempotency.idempotency_rules import _Claim
from ..idempotency.keys import fingerprint
from ..models import Begin
from .idempotency_store import IdempotencyStore

__all__ = ["Begin", "Idempotency"]

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class Idempotency(IdempotencyStore):
    """The twin of :class:`drainpipe.Idempotency` on a DSN, a sync pool or a connection.

    Options as there; ``scope`` may be a callable, which gets the framework's request
    (the WSGI environ under :meth:`wrap_wsgi`, Django's ``HttpRequest`` in the middleware).
    """

    def close(self) -> None:
        """Close the pool opened for a DSN (a pool or connection you gave stays open)."""
        self.db.close()

    def __enter__(self) -> Idempotency:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- the steps around a request (for framework hooks) --------------------------------

    def before(
        self,
        method: str,
        path: str,
        headers: Mapping[str, str],
        body: bytes | Callable[[], bytes],
        original: Any = None,
        query: str = "",
    ) -> Response | _Claim | None:
        """None: run the handler without idempotency; a :class:`~drainpipe.http.Response`:
        answer it instead (a replay, or a Problem); otherwise a claim: run the handler,
        then call :meth:`after` (or :meth:`abandon` when it raises). ``body`` may be a
        function, called only when the key needs the fingerprint; a body over
        ``max_body_bytes`` → 413 ``BODY_TOO_LARGE``. ``query`` (the raw query string) is
        part of the fingerprint."""
        head = headers if isinstance(headers, Headers) else Headers(headers)
        key = self._key_of(method, head, path)
        if not isinstance(key, str):
            return key
        try:
            scope = self._scope_for(original, head)
            if declared_too_large(head, self.max_body_bytes):
                raise body_too_large(self.max_body_bytes)
            data = body() if callable(body) else body
            if len(data) > self.max_body_bytes:
                raise body_too_large(self.max_body_bytes)
            begun = self.begin(key, fingerprint(method, path, data, query), scope)
        except DrainpipeError as exc:
            return self._problem(exc, path)
        return self._answer(begun, key, scope, path)

    def after(
        self, claim: _Claim, status: int, body: bytes, content_type: str | None, path: str
    ) -> Response | None:
        """Store a 2xx-4xx response (release the key after a 1xx/5xx). None: send the
        handler's response; a Response: send that instead (too large to store: a 500)."""
        return self._settle(claim, status, body, content_type, path)

    def abandon(self, claim: _Claim) -> None:
        """Release the key after the handler raised (a retry runs it again)."""
        self._release_quietly(claim)

    def _scope_for(self, original: Any, headers: Headers) -> str:
        if self.scope is None:
            return self._scope_answer(self._default_scope(headers))
        if isinstance(self.scope, str):
            return self._scope_answer(self.scope)
        return self._scope_answer(self.scope(original))

    # -- WSGI ----------------------------------------------------------------------------

    def wrap_wsgi(self, app: WSGIApp) -> WSGIApp:
        """``app`` as WSGI middleware (``flask_app.wsgi_app = idem.wrap_wsgi(flask_app.wsgi_app)``):
        a POST with a key runs the app at most once; its response is buffered, stored,
        then sent. An app that raises releases the key and the exception propagates."""

        def middleware(
            environ: dict[str, Any], start_response: Callable[..., Any]
        ) -> Iterable[bytes]:
            method = str(environ.get("REQUEST_METHOD", "GET")).upper()
            path = _wsgi_path(environ)
            headers = _wsgi_headers(environ)
            body: bytes | None = None

            def read() -> bytes:
                nonlocal body
                body = _read_wsgi_body(environ, self.max_body_bytes)
                return body

            query = str(environ.get("QUERY_STRING") or "")
            try:
                decision = self.before(method, path, headers, read, environ, query)
            except DrainpipeError as exc:  # a body cut short
                return _send(self._problem(exc, path), start_response)
            if decision is None:
                return app(environ, start_response)
            if isinstance(decision, Response):
                return _send(decision, start_response)
            environ["wsgi.input"] = io.BytesIO(body or b"")
            try:
                status, response_headers, chunks = _run_wsgi(app, environ)
            except BaseException:
                self.abandon(decision)
                raise
            content_type = next(
                (value for name, value in response_headers if name.lower() == "content-type"), None
            )
            data = b"".join(chunks)
            refusal = self.after(decision, int(status.split(" ", 1)[0]), data, content_type, path)
            if refusal is not None:
                return _send(refusal, start_response)
            start_response(status, response_headers)
            return [data]

        return middleware


def _wsgi_path(environ: Mapping[str, Any]) -> str:
    """The request path as ASGI gives it (SCRIPT_NAME + PATH_INFO, decoded as servers do)."""
    raw = str(environ.get("SCRIPT_NAME", "")) + str(environ.get("PATH_INFO", "")) or "/"
    try:  # PEP 3333: the bytes as latin-1 text; the client meant UTF-8
        return raw.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return raw


def _wsgi_headers(environ: Mapping[str, Any]) -> Headers:
    pairs = [
        (name[5:].replace("_", "-"), str(value))
        for name, value in environ.items()
        if name.startswith("HTTP_")
    ]
    for name in ("CONTENT_TYPE", "CONTENT_LENGTH"):
        if environ.get(name):
            pairs.append((name.replace("_", "-"), str(environ[name])))
    return Headers(pairs)


def _read_wsgi_body(environ: Mapping[str, Any], max_bytes: int) -> bytes:
    """The body, read in pieces: 413 ``BODY_TOO_LARGE`` as soon as it passes ``max_bytes``
    (a declared length over it before anything is read), so the rest is never held."""
    stream = environ.get("wsgi.input")
    if stream is None:
        return b""
    length = str(environ.get("CONTENT_LENGTH") or "").strip()
    if not length:
        if not environ.get("wsgi.input_terminated"):
            return b""
        parts: list[bytes] = []
        size = 0
        while chunk := bytes(stream.read(65536)):
            size += len(chunk)
            if size > max_bytes:
                raise body_too_large(max_bytes)
            parts.append(chunk)
        return b"".join(parts)
    expected = int(length) if length.isdigit() else 0
    if expected > max_bytes:
        raise body_too_large(max_bytes)
    data = bytes(stream.read(expected))
    if len(data) < expected:
        raise body_incomplete()
    return data


def _run_wsgi(
    app: WSGIApp, environ: dict[str, Any]
) -> tuple[str, list[tuple[str, str]], list[bytes]]:
    """Run ``app`` to the end: its status line, headers and body chunks."""
    captured: dict[str, Any] = {}
    chunks: list[bytes] = []

    def start_response(
        status: str, headers: list[tuple[str, str]], exc_info: Any = None
    ) -> Callable[[bytes], None]:
        if exc_info is not None and captured:
            raise exc_info[1].with_traceback(exc_info[2])
        captured["status"], captured["headers"] = status, list(headers)
        return chunks.append

    result = app(environ, start_response)
    try:
        chunks.extend(bytes(chunk) for chunk in result)
    finally:
        close = getattr(result, "close", None)
        if close is not None:
            close()
    if "status" not in captured:
        raise RuntimeError("The wrapped WSGI app returned without calling start_response")
    return captured["status"], captured["headers"], chunks


def _send(response: Response, start_response: Callable[..., Any]) -> list[bytes]:
    try:
        reason = HTTPStatus(response.status).phrase
    except ValueError:
        reason = "Unknown"
    headers = [(name, value) for name, value in response.headers.items()]
    headers.append(("Content-Length", str(len(response.body))))
    start_response(f"{response.status} {reason}", headers)
    return [response.body]
