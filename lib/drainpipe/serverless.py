"""What a function entry point (``api/*.py`` on Vercel, or any serverless handler) needs.

* :class:`LazyApp`: an ASGI app built from the environment on its first request, so that
  importing the function file needs no configuration and costs little; until the
  configuration is complete, requests get a 503 Problem naming what is missing.
* :class:`Database`: one connection pool to share between the objects of a function
  (queues, an inbox, idempotency keys), closed on ASGI lifespan shutdown.
* :class:`Request`, :class:`Response`, :func:`json_response`, :func:`problem_response`
  and :func:`validation_problem`: a plain ASGI function's request and answers (Problem
  Details for its own checks), without importing a web framework.
* :func:`log_failure`: an ``on_error`` for ``drain_route``/``work``/``drain`` that logs
  each failure with its queue, job id and attempt (and the traceback) through ``logging``.

Importing this module loads neither psycopg nor pydantic nor a web framework.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any

from .db import Database
from .errors import DrainpipeError, validation_error
from .http import Request, Response, json_response, problem_response, serve_lifespan

if TYPE_CHECKING:
    from .models import Job

__all__ = [
    "ASGIApp",
    "Closer",
    "Database",
    "LazyApp",
    "NotConfigured",
    "Receive",
    "Request",
    "Response",
    "Scope",
    "Send",
    "json_response",
    "log_failure",
    "not_configured",
    "problem_response",
    "validation_problem",
]

log = logging.getLogger("drainpipe.functions")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
Closer = Callable[[], Awaitable[Any]]
Build = Callable[[Mapping[str, str]], tuple[ASGIApp, Closer | None]]

NOT_CONFIGURED = "NOT_CONFIGURED"


class NotConfigured(ValueError):
    """Raised by a ``build`` function when a setting is missing or malformed; the message
    names the variable (never its value) and becomes the 503 Problem's ``detail``."""


class LazyApp:
    """An ASGI app built on the first request by ``build(os.environ)``.

    Until every name in ``needs`` is set (or while ``build`` raises ``ValueError``, such as
    :class:`NotConfigured`), requests get a 503 Problem: ``kind`` ``network`` (the status
    the contract gives it: the server cannot serve yet, a retry may succeed once the
    deployment is fixed), ``code`` ``NOT_CONFIGURED``, title "Function not configured" and
    a ``detail`` naming the missing variables. The reason is logged at ERROR on each such
    request. Concurrent first requests build once. ``build`` returns the app and an async
    ``close`` for its resources, run by :meth:`aclose` and on ASGI lifespan shutdown.
    """

    def __init__(
        self,
        build: Build,
        needs: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
    ) -> None:
        if not callable(build):
            raise TypeError("LazyApp needs a build(env) function")
        if isinstance(needs, str):
            raise TypeError("needs is a sequence of variable names, not one string")
        self._build = build
        self.needs = tuple(needs)
        self._env = env
        self._app: ASGIApp | None = None
        self._close: Closer | None = None
        self._lock: asyncio.Lock | None = None  # made in the loop that serves requests

    def missing(self) -> list[str]:
        """The names of ``needs`` that are unset or empty right now."""
        env = os.environ if self._env is None else self._env
        return [name for name in self.needs if not env.get(name)]

    async def built(self) -> ASGIApp | str:
        """The app, built now if no request has built it yet; or, while it cannot be built,
        the reason (the unset variables, or the message of ``build``'s ``ValueError``).
        For work a server does when it starts (ASGI lifespan startup), before any request."""
        return await self._get()

    async def _get(self) -> ASGIApp | str:
        if self._app is not None:
            return self._app
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._app is None:
                missing = self.missing()
                if missing:
                    names = ", ".join(missing)
                    return f"set {names} in this function's environment"
                env = os.environ if self._env is None else self._env
                try:
                    self._app, self._close = self._build(env)
                except ValueError as exc:
                    return str(exc)
            return self._app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await serve_lifespan(receive, send, self.aclose)
            return
        app = await self._get()
        if isinstance(app, str):
            path = scope.get("path")
            log.error("%s is not configured: %s", path or "this function", app)
            if scope["type"] == "websocket":  # no HTTP answer on a socket: refuse the handshake
                await send({"type": "websocket.close", "code": 1011})
                return
            await not_configured(app, path)(scope, receive, send)
            return
        await app(scope, receive, send)

    async def aclose(self) -> None:
        """Close what the built app holds (its database pool); the next request rebuilds."""
        close, self._close, self._app = self._close, None, None
        if close is not None:
            await close()


def not_configured(reason: str, instance: str | None = None) -> Response:
    """The 503 ``NOT_CONFIGURED`` Problem; ``reason`` (variable names, never values) is
    its ``detail`` even though ``network`` Problems normally hide theirs."""
    error = DrainpipeError("network", reason, code=NOT_CONFIGURED, status=503)

    def explain(body: dict[str, Any], _: DrainpipeError) -> dict[str, Any]:
        return {**body, "title": "Function not configured", "detail": reason}

    return problem_response(error, instance, problem=explain)


def validation_problem(
    message: str,
    issues: list[dict[str, Any]] | None = None,
    *,
    code: str | None = None,
    instance: str | None = None,
) -> Response:
    """A 422 ``validation`` Problem for a function's own input checks (``issues`` default
    to one naming the whole body)."""
    return problem_response(validation_error(message, issues, code=code), instance)


def log_failure(error: BaseException, job: Job[Any] | None = None) -> None:
    """``on_error`` that logs one line per failure (queue, job id, attempt, the error's
    first line) at ERROR, with the traceback attached for the platform's log viewer."""
    first_line = (str(error).strip().splitlines() or [""])[0]
    text = f"{type(error).__name__}: {first_line}" if first_line else type(error).__name__
    if job is None:
        log.error("drainpipe: %s", text, exc_info=error)
        return
    log.error(
        "drainpipe: %s job %s failed (attempt %s/%s): %s",
        job.queue,
        job.id,
        job.attempts,
        job.max_attempts,
        text,
        exc_info=error,
    )


def __dir__() -> list[str]:
    return __all__
