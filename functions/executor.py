"""Job executors over HTTP at ``/api/executor`` (``api/executor.py``; vercel.json rewrites
``/api/executor/:path*`` to it): ``POST /api/executor/claim`` and ``POST
/api/executor/settle`` (the lease id and the action in the body, never in the URL) over the
example app's queues (``jobs.executor_app``, docs/agent-inbox.md).

Environment: ``DATABASE_URL``; ``EXECUTOR_TOKENS``, comma separated ``token=queue|queue``
entries (``token=*`` for every queue; tokens of at least 16 characters, e.g. from
``python -c "import secrets; print(secrets.token_urlsafe(32))"``); optional
``EXECUTOR_LEASE_SECRET`` (signs lease ids, at least 16 characters; default: derived from the
token table, the same on every instance, and new when the table changes) and
``EXECUTOR_BUDGET`` (seconds a long-polled claim may use, default 25, under the function's
``maxDuration`` of 30). Until the required ones are set, requests get 503 ``NOT_CONFIGURED``.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Mapping

from drainpipe import Jobs
from drainpipe.console.mount import Mounted
from drainpipe.serverless import ASGIApp, Closer, Database, LazyApp, NotConfigured

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # no pathlib: cold start
if _ROOT not in sys.path:  # imported by its path (Vercel, drainpipe dev): find functions._app
    sys.path.insert(0, _ROOT)
from functions._app import QUEUES  # noqa: E402

MOUNT = "/api/executor"


def build(env: Mapping[str, str]) -> tuple[ASGIApp, Closer | None]:
    text = env.get("EXECUTOR_BUDGET") or "25"
    try:
        budget = float(text)
    except ValueError:
        budget = math.nan
    if not math.isfinite(budget) or not 1 < budget <= 900:
        raise NotConfigured(f"EXECUTOR_BUDGET must be seconds between 1 and 900, not {text!r}")
    # imported here: the executor's modules load on the first request, not at import
    from drainpipe.jobs.executor import executor_tokens

    tokens = executor_tokens(env["EXECUTOR_TOKENS"])  # ValueError: 503 NOT_CONFIGURED
    database = Database(env["DATABASE_URL"])
    jobs = Jobs(database, QUEUES)
    try:
        app = jobs.executor_app(
            tokens=tokens, budget=budget, lease_secret=env.get("EXECUTOR_LEASE_SECRET") or None
        )
    except ValueError as exc:  # an undeclared queue, a short secret: named, never shown
        raise NotConfigured(f"EXECUTOR_TOKENS / EXECUTOR_LEASE_SECRET: {exc}") from exc
    return Mounted(MOUNT, app), database.close


app = LazyApp(build, needs=("DATABASE_URL", "EXECUTOR_TOKENS"))
