"""drainpipe on Cloud Run functions (Cloud Functions gen 2): two HTTP functions from this
file, ``drain`` (called every minute by Cloud Scheduler) and ``billing_webhook`` (the
provider's webhooks). Deploy commands: README.md.

Environment: ``DATABASE_URL``, ``CRON_SECRET`` (Cloud Scheduler sends it as
``Authorization: Bearer ...``, or as ``X-Drain-Secret`` when it authenticates with OIDC),
``WEBHOOK_SECRET`` (``whsec_...``), ``DRAIN_BUDGET`` (seconds, default 50; keep it under
the function's timeout). Everything is built on the first request, so importing this file
(the cold start) needs no configuration.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import functions_framework

from drainpipe.gcp import asgi_handler
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
    """The drain route and the inbox on one pool, once per instance."""
    global _built
    if _built is None:
        from drainpipe.db import Database
        from drainpipe.jobs import Jobs

        env = os.environ
        database = Database(env["DATABASE_URL"])
        jobs = Jobs(database, {"emails": Email})
        inbox = WebhookInbox(
            database, source="billing", secrets=env["WEBHOOK_SECRET"].replace(",", " ").split()
        )
        route = jobs.drain_route(
            secret=env["CRON_SECRET"],
            handlers={"emails": send_email},
            budget=float(env.get("DRAIN_BUDGET") or 50),
            inboxes=[(inbox, handle_billing_event)],
        )
        _built = route, inbox
    return _built


async def drain_app(scope: Any, receive: Any, send: Any) -> None:
    await build()[0](scope, receive, send)


async def webhook_app(scope: Any, receive: Any, send: Any) -> None:
    await build()[1].app(scope, receive, send)


# With OIDC, Authorization carries Google's token (checked by Cloud Run before the request
# arrives) and the route's secret comes in X-Drain-Secret; without OIDC, send the secret
# in Authorization and X-Drain-Secret is not needed (its absence leaves Authorization).
serve_drain = asgi_handler(drain_app, secret_header="X-Drain-Secret")  # noqa: S106 - a name
serve_webhook = asgi_handler(webhook_app)


@functions_framework.http
def drain(request: Any) -> Any:
    return serve_drain(request)


@functions_framework.http
def billing_webhook(request: Any) -> Any:
    return serve_webhook(request)
