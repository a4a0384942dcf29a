"""``/api/billing-webhook``: the billing provider's webhooks, verified and stored once.

Environment: ``DATABASE_URL`` (the service role's connection string) and ``WEBHOOK_SECRET``
(one ``whsec_`` secret, or several separated by spaces or commas while rotating). The inbox
is built on the first request, so importing this file needs neither; until both are set,
requests get a 503 Problem with code ``NOT_CONFIGURED``. The stored messages are processed
by the drain route (``functions/drain.py``).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from pathlib import Path

from drainpipe.inbox import WebhookInbox

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:  # Vercel imports this file by its path: make ``_app.py`` importable
    sys.path.insert(0, _HERE)
from _app import BILLING_SOURCE, ASGIApp, Closer, LazyApp  # noqa: E402


def build(env: Mapping[str, str]) -> tuple[ASGIApp, Closer | None]:
    """The inbox's ASGI app; a malformed secret raises ``ValueError`` (→ 503, logged)."""
    secrets = [secret for secret in re.split(r"[\s,]+", env["WEBHOOK_SECRET"]) if secret]
    inbox = WebhookInbox(
        env["DATABASE_URL"],
        source=BILLING_SOURCE,
        secrets=secrets,
        keep_headers=("user-agent",),
    )
    return inbox.app, inbox.close


app = LazyApp(build, needs=("DATABASE_URL", "WEBHOOK_SECRET"))
