"""The example app shared by the functions in this folder: its queues, handlers, and a
wrapper that builds a function's ASGI app from the environment on its first request.

Files starting with ``_`` are not deployed as functions (Vercel's convention). Function
modules import this one as ``_app`` (their folder on ``sys.path``, as under ``drainpipe
dev``), else as ``functions._app`` (the project root on ``sys.path``).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from typing import Any

from pydantic import BaseModel

from drainpipe.errors import DrainpipeError
from drainpipe.http import problem_response, serve_lifespan
from drainpipe.models import Job

log = logging.getLogger("drainpipe.functions")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
Closer = Callable[[], Awaitable[Any]]


# -- the example's queues -------------------------------------------------------------------


class Email(BaseModel):
    to: str
    subject: str = ""


QUEUES: dict[str, Any] = {"emails": Email}


async def send_email(payload: Email, job: Job[Email]) -> None:
    # a real app would call its mail provider here; raising would retry the job
    log.info(
        "emails: sending %r to %s (job %s, attempt %s)",
        payload.subject,
        payload.to,
        job.id,
        job.attempts,
    )


HANDLERS: dict[str, Callable[[Any, Job[Any]], Awaitable[Any]]] = {"emails": send_email}

# The webhook inbox that functions/billing_webhook.py fills; the drain route processes it.
BILLING_SOURCE = "billing"


async def handle_billing_event(message: Any) -> None:
    # a real app would update its records here; raising would retry the message
    log.info("billing: %s %s (attempt %s)", message.type, message.message_id, message.attempts)


# -- building a function from the environment -----------------------------------------------


class LazyApp:
    """An ASGI app built on the first request by ``build(os.environ)``.

    Importing a function module needs no configuration; until every name in ``needs`` is
    set (or while ``build`` raises ``ValueError``), requests get a 503 Problem with code
    ``NOT_CONFIGURED`` and the reason is logged. ``build`` returns the app and an async
    ``close`` for its resources (run by ``aclose()`` and on ASGI lifespan shutdown).
    """

    def __init__(
        self,
        build: Callable[[Mapping[str, str]], tuple[ASGIApp, Closer | None]],
        needs: Sequence[str],
    ) -> None:
        self._build = build
        self.needs = tuple(needs)
        self._app: ASGIApp | None = None
        self._close: Closer | None = None
        self._lock = asyncio.Lock()

    async def _get(self) -> ASGIApp | str:
        if self._app is not None:
            return self._app
        async with self._lock:
            if self._app is None:
                missing = [name for name in self.needs if not os.environ.get(name)]
                if missing:
                    return f"set {', '.join(missing)}"
                try:
                    self._app, self._close = self._build(os.environ)
                except ValueError as exc:
                    return str(exc)
            return self._app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await serve_lifespan(receive, send, self.aclose)
            return
        app = await self._get()
        if isinstance(app, str):
            log.warning("%s is not configured: %s", scope.get("path", "this function"), app)
            error = DrainpipeError(
                "network", "This function is not configured", code="NOT_CONFIGURED", status=503
            )
            await problem_response(error, scope.get("path"))(scope, receive, send)
            return
        await app(scope, receive, send)

    async def aclose(self) -> None:
        """Close what the built app holds (its database pool); the next request rebuilds."""
        close, self._close, self._app = self._close, None, None
        if close is not None:
            await close()
