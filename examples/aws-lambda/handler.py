"""One AWS Lambda function for drainpipe: a function URL serves the drain route
(``/drain``) and the billing webhook inbox (``/webhooks/billing``); an EventBridge
Scheduler schedule invokes it every minute with ``{"drainpipe": "drain"}`` to run one drain.

Environment (template.yaml sets it, from Secrets Manager): ``DATABASE_URL``,
``CRON_SECRET`` (for callers of ``/drain`` over HTTP; the schedule needs none, IAM lets
it invoke the function) and ``WEBHOOK_SECRET`` (the provider's ``whsec_`` secret).
Everything is built on the first event, so importing this file is cheap and needs no
configuration.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

from drainpipe.aws import lambda_handler

if TYPE_CHECKING:  # imported by build(), on the first event: the cold start stays small
    from drainpipe.jobs.drain_route import DrainRoute
    from drainpipe.webhooks import WebhookInbox

log = logging.getLogger("drainpipe.example")


# the payload schema: anything pydantic.TypeAdapter takes (a model class costs pydantic's
# import at cold start; a plain type like this one does not)
Email = dict[str, str]


async def send_email(payload: Email, job: Any) -> None:
    # a real app calls its mail provider here; raising retries the job
    log.info("emails: sending %r to %s (job %s)", payload["subject"], payload["to"], job.id)


async def handle_billing_event(message: Any) -> None:
    log.info("billing: %s %s", message.type, message.message_id)


_built: tuple[DrainRoute, WebhookInbox] | None = None


def build() -> tuple[DrainRoute, WebhookInbox]:
    """The drain route and the inbox, on one pool, built once per Lambda process."""
    global _built
    if _built is None:
        from drainpipe.db import Database
        from drainpipe.jobs import Jobs
        from drainpipe.webhooks import WebhookInbox

        env = os.environ
        database = Database(env["DATABASE_URL"])
        jobs = Jobs(database, {"emails": Email})
        inbox = WebhookInbox(
            database, source="billing", secrets=env["WEBHOOK_SECRET"].replace(",", " ").split()
        )
        route = jobs.drain_route(
            secret=env["CRON_SECRET"],
            handlers={"emails": send_email},
            # an HTTP call's budget; a scheduled drain takes the invocation's remaining time
            budget=float(env.get("DRAIN_BUDGET") or 50),
            inboxes=[(inbox, handle_billing_event)],
        )
        _built = route, inbox
    return _built


def drain_route() -> DrainRoute:
    return build()[0]


async def app(scope: Any, receive: Any, send: Any) -> None:
    """``/drain`` and ``/webhooks/billing``; anything else is a 404 Problem."""
    if scope["type"] != "http":
        return
    path = scope.get("path", "/").rstrip("/")
    if path == "/drain":
        await drain_route()(scope, receive, send)
    elif path == "/webhooks/billing":
        await build()[1].app(scope, receive, send)
    else:
        from drainpipe.errors import DrainpipeError
        from drainpipe.http import problem_response

        error = DrainpipeError("not_found", f"Nothing is served at {scope.get('path')}")
        await problem_response(error, scope.get("path"))(scope, receive, send)


# template.yaml: Handler: handler.handler
handler = lambda_handler(app, route=drain_route, reserve=10.0)
