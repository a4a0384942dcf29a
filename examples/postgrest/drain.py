"""A drain function that speaks only HTTPS to Supabase: no database URL, no psycopg.

Every feature of a direct connection goes through drainpipe's API schema over PostgREST
(``drainpipe.PostgrestBackend``): due schedules run, the ``emails`` queue drains with fenced
completion, heartbeats and retries. Deploy it where your functions run (``api/drain.py``
on Vercel, with a cron calling it every minute) once the set-up in docs/postgrest.md is
done: ``drainpipe sql add jobs rest-api`` and ``drainpipe_api`` added to the exposed schemas.

Environment: ``SUPABASE_URL`` (``https://<ref>.supabase.co``), ``SUPABASE_SERVICE_ROLE_KEY``
and ``CRON_SECRET`` (sent as ``Authorization: Bearer <CRON_SECRET>``); optional
``DRAIN_BUDGET`` in seconds (default 50). Until they are set, requests get a 503
``NOT_CONFIGURED`` Problem naming what is missing. Everything is built on the first request,
so importing this file is cheap (httpx is imported on the first call to PostgREST).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from drainpipe.serverless import LazyApp, log_failure

if TYPE_CHECKING:
    from drainpipe.serverless import ASGIApp, Closer

log = logging.getLogger("drainpipe.example")

# a plain type keeps pydantic's import out of the cold start (a model class would not)
Email = dict[str, str]


async def send_email(payload: Email, job: Any) -> None:
    # a real app calls its mail provider here; raising retries the job
    log.info("emails: sending %r to %s (job %s)", payload.get("subject"), payload["to"], job.id)


def build(env: Mapping[str, str]) -> tuple[ASGIApp, Closer | None]:
    # imported here, on the first request: the cold start is this file's import alone
    from drainpipe import Jobs, PostgrestBackend

    backend = PostgrestBackend(env["SUPABASE_URL"], env["SUPABASE_SERVICE_ROLE_KEY"])
    jobs = Jobs(backend, {"emails": Email})
    route = jobs.drain_route(
        secret=env["CRON_SECRET"],
        handlers={"emails": send_email},
        budget=float(env.get("DRAIN_BUDGET") or 50),
        on_error=log_failure,
    )
    return route, backend.aclose


app = LazyApp(build, needs=("SUPABASE_URL", "SUPABASE_SERVICE_ROLE_KEY", "CRON_SECRET"))
