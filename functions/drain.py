"""The drain route's app, deployed as ``/api/drain`` (``api/drain.py``) and called every
minute by Vercel Cron (see vercel.json; on the Hobby plan, daily or from GitHub Actions).

It runs due schedules, drains the ``emails`` queue, then processes the ``billing`` webhook
inbox that ``/api/billing-webhook`` fills. Each failing job or message is logged (queue,
job id, attempt, the error's first line, the traceback).

Environment: ``DATABASE_URL`` and ``CRON_SECRET`` (Vercel Cron sends it as
``Authorization: Bearer <CRON_SECRET>``); ``DRAIN_BUDGET``, seconds one call may spend
claiming jobs (default 50; keep it under the function's ``maxDuration``, 60 in vercel.json).
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Mapping

from drainpipe import Jobs, WebhookInbox
from drainpipe.serverless import ASGIApp, Closer, Database, LazyApp, NotConfigured, log_failure

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # no pathlib: cold start
if _ROOT not in sys.path:  # imported by its path (Vercel, drainpipe dev): find functions._app
    sys.path.insert(0, _ROOT)
from functions._app import BILLING_SOURCE, HANDLERS, QUEUES, handle_billing_event  # noqa: E402


def build(env: Mapping[str, str]) -> tuple[ASGIApp, Closer | None]:
    text = env.get("DRAIN_BUDGET") or "50"
    try:
        budget = float(text)
    except ValueError:
        budget = math.nan
    if not math.isfinite(budget) or budget <= 0:
        raise NotConfigured(f"DRAIN_BUDGET must be a positive number of seconds, not {text!r}")
    database = Database(env["DATABASE_URL"])  # one pool for the queues and the inbox
    jobs = Jobs(database, QUEUES)
    inbox = WebhookInbox(database, source=BILLING_SOURCE)
    route = jobs.drain_route(
        secret=env["CRON_SECRET"],
        handlers=HANDLERS,
        budget=budget,
        inboxes=[(inbox, handle_billing_event)],
        on_error=log_failure,
    )
    return route, database.close


app = LazyApp(build, needs=("DATABASE_URL", "CRON_SECRET"))
