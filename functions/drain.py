"""``/api/drain``: the drain route, called every minute by Vercel Cron (see vercel.json).

It runs due schedules, drains the ``emails`` queue, then processes the ``billing`` webhook
inbox that ``/api/billing-webhook`` fills.

Environment: ``DATABASE_URL`` and ``CRON_SECRET`` (Vercel Cron sends it as
``Authorization: Bearer <CRON_SECRET>``); ``DRAIN_BUDGET``, seconds one call may spend
claiming jobs (default 50; keep it under the function's maxDuration).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

from drainpipe.db import Database
from drainpipe.inbox import WebhookInbox
from drainpipe.jobs import Jobs

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:  # Vercel imports this file by its path: make ``_app.py`` importable
    sys.path.insert(0, _HERE)
from _app import (  # noqa: E402
    BILLING_SOURCE,
    HANDLERS,
    QUEUES,
    ASGIApp,
    Closer,
    LazyApp,
    handle_billing_event,
)


def build(env: Mapping[str, str]) -> tuple[ASGIApp, Closer | None]:
    try:
        budget = float(env.get("DRAIN_BUDGET") or 50)
    except ValueError:
        raise ValueError(
            f"DRAIN_BUDGET must be a number of seconds, not {env['DRAIN_BUDGET']!r}"
        ) from None
    database = Database(env["DATABASE_URL"])  # one pool for the queues and the inbox
    jobs = Jobs(database, QUEUES)
    inbox = WebhookInbox(database, source=BILLING_SOURCE)
    route = jobs.drain_route(
        secret=env["CRON_SECRET"],
        handlers=HANDLERS,
        budget=budget,
        inboxes=[(inbox, handle_billing_event)],
    )
    return route, database.close


app = LazyApp(build, needs=("DATABASE_URL", "CRON_SECRET"))
