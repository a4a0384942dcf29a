"""The Job Inbox at ``/api/jobs`` (``api/jobs.py``): the management API of the example app's
queues and its admin page (open ``/api/jobs`` in a browser and paste a token).

Environment: ``DATABASE_URL``; ``MANAGEMENT_TOKENS``, comma separated ``token=actor:role``
entries (role ``viewer`` or ``admin``; tokens of at least 16 characters, e.g. from
``python -c "import secrets; print(secrets.token_urlsafe(32))"``); optional
``MANAGEMENT_TARGET`` (what the audit log and cursors name, default ``VERCEL_ENV`` or
``default``) and ``MANAGEMENT_CURSOR_SECRET`` (default: derived from the token table, the
same on every instance). Until the required ones are set, requests get 503 ``NOT_CONFIGURED``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from drainpipe import Jobs, bearer_tokens
from drainpipe.console.config import derived_cursor_secret, management_tokens
from drainpipe.console.mount import Mounted
from drainpipe.serverless import ASGIApp, Closer, Database, LazyApp

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # no pathlib: cold start
if _ROOT not in sys.path:  # imported by its path (Vercel, drainpipe dev): find functions._app
    sys.path.insert(0, _ROOT)
from functions._app import QUEUES  # noqa: E402

MOUNT = "/api/jobs"


def build(env: Mapping[str, str]) -> tuple[ASGIApp, Closer | None]:
    tokens = management_tokens(env["MANAGEMENT_TOKENS"])  # ValueError: 503 NOT_CONFIGURED
    database = Database(env["DATABASE_URL"])
    jobs = Jobs(database, QUEUES)
    app = jobs.management_app(
        authorize=bearer_tokens(tokens),
        cursor_secret=env.get("MANAGEMENT_CURSOR_SECRET") or derived_cursor_secret(tokens),
        target=env.get("MANAGEMENT_TARGET") or env.get("VERCEL_ENV") or "default",
    )
    return Mounted(MOUNT, app), database.close


app = LazyApp(build, needs=("DATABASE_URL", "MANAGEMENT_TOKENS"))
