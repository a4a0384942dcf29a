"""The billing provider's webhooks, verified and stored once; deployed as
``/api/billing-webhook`` (``api/billing_webhook.py``, rewritten in vercel.json).

Environment: ``DATABASE_URL`` (the service role's connection string) and ``WEBHOOK_SECRET``
(one ``whsec_`` secret, or several separated by spaces or commas while rotating). The inbox
is built on the first request, so importing this file needs neither; until both are set,
requests get a 503 Problem with code ``NOT_CONFIGURED`` naming the missing variable. The
stored messages are processed by the drain route (``functions/drain.py``).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping

from drainpipe import WebhookInbox
from drainpipe.serverless import ASGIApp, Closer, LazyApp, NotConfigured

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # no pathlib: cold start
if _ROOT not in sys.path:  # imported by its path (Vercel, drainpipe dev): find functions._app
    sys.path.insert(0, _ROOT)
from functions._app import BILLING_SOURCE  # noqa: E402


def build(env: Mapping[str, str]) -> tuple[ASGIApp, Closer | None]:
    """The inbox's ASGI app; a malformed secret answers 503 ``NOT_CONFIGURED`` (logged)."""
    secrets = [secret for secret in re.split(r"[\s,]+", env["WEBHOOK_SECRET"]) if secret]
    try:
        inbox = WebhookInbox(
            env["DATABASE_URL"],
            source=BILLING_SOURCE,
            secrets=secrets,
            keep_headers=("user-agent",),
        )
    except ValueError as exc:  # the message says what is wrong, never the secret itself
        raise NotConfigured(f"WEBHOOK_SECRET: {exc}") from exc
    return inbox.app, inbox.close


app = LazyApp(build, needs=("DATABASE_URL", "WEBHOOK_SECRET"))
