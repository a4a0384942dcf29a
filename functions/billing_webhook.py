"""Vercel entry point: the billing provider's webhooks, verified and stored in the inbox.

Environment: ``DATABASE_URL`` (the service-role connection) and ``WEBHOOK_SECRET`` (one
``whsec_`` secret, or several separated by spaces or commas while rotating). The inbox is
built on the first request, so importing this module needs neither; a request without them
gets a 500 Problem naming what is missing. The messages are processed by the drain route.
"""

from __future__ import annotations

import os
import re

from drainpipe.errors import DrainpipeError
from drainpipe.http import Receive, Request, Response, Scope, Send, problem_response, run_asgi
from drainpipe.inbox import WebhookInbox

SOURCE = "billing"
_inbox: WebhookInbox | None = None


def build_inbox() -> WebhookInbox:
    """The inbox this function serves; raises ``DrainpipeError`` when the env is incomplete."""
    missing = [name for name in ("DATABASE_URL", "WEBHOOK_SECRET") if not os.environ.get(name)]
    if missing:
        raise DrainpipeError("unexpected", f"Missing environment variables: {', '.join(missing)}")
    secrets = [s for s in re.split(r"[\s,]+", os.environ["WEBHOOK_SECRET"]) if s]
    return WebhookInbox(
        os.environ["DATABASE_URL"],
        source=SOURCE,
        secrets=secrets,
        keep_headers=("user-agent",),
    )


async def _handle(request: Request) -> Response:
    global _inbox
    if _inbox is None:
        try:
            _inbox = build_inbox()
        except DrainpipeError as error:
            return problem_response(error, request.path)
        except ValueError as exc:  # a malformed WEBHOOK_SECRET
            return problem_response(DrainpipeError("unexpected", str(exc)), request.path)
    response: Response = await _inbox.receive(request)
    return response


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    """The ASGI app Vercel serves."""
    await run_asgi(_handle, scope, receive, send)
