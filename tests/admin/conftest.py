"""The Job Inbox under test: a management app over real Postgres, its callers' tokens, and
jobs in the states the routes care about."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from drainpipe import Jobs, Principal, bearer_tokens
from drainpipe.console.management_app import ManagementApp

ADMIN = "admin-token-0123456789abcdef"
OTHER_ADMIN = "lead-token-0123456789abcdef"
VIEWER = "viewer-token-0123456789abcdef"
PRINCIPALS = {
    ADMIN: Principal("ops@example.com", "admin"),
    OTHER_ADMIN: Principal("lead@example.com", "admin"),
    VIEWER: Principal("intern@example.com"),
}
CURSOR_SECRET = "job-inbox-cursor-secret-for-tests"
QUEUES: dict[str, Any] = {"emails": dict[str, Any], "reports": dict[str, Any]}
# placed in every payload and every error text: no response of the app may carry it
PAYLOAD_MARKER = "PAYLOAD-MARKER-7f3a"
ERROR_MARKER = "ERROR-TEXT-MARKER-91c2"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@dataclass
class Inbox:
    jobs: Jobs
    app: ManagementApp
    http: httpx.AsyncClient
    url: str
    backend: str = "pgmq"

    def lock_statement(self, queue: str = "emails") -> str:
        """Locks a dead job's row where replay takes its lock (``%s``: the job id)."""
        if self.backend == "table":
            return "SELECT 1 FROM drainpipe.job_messages WHERE id = %s FOR UPDATE"
        return f"SELECT 1 FROM pgmq.a_{queue} WHERE msg_id = %s FOR UPDATE"

    async def dead_job(self, queue: str = "emails") -> int:
        """A job that failed its only attempt (its payload and error carry the markers); call
        it before other jobs of ``queue`` are enqueued (it claims the oldest)."""
        job_id = await self.jobs.enqueue(queue, {"secret": PAYLOAD_MARKER}, max_attempts=1)
        [job] = await self.jobs.claim(queue, lease=60)
        assert job.id == job_id
        assert await self.jobs.fail(job, RuntimeError(ERROR_MARKER)) == "dead"
        return job_id


def make_app(jobs: Jobs, **options: Any) -> ManagementApp:
    settings: dict[str, Any] = {
        "authorize": bearer_tokens(PRINCIPALS),
        "cursor_secret": CURSOR_SECRET,
        "target": "production",
        **options,
    }
    return jobs.management_app(**settings)


@pytest.fixture
async def inbox(db_url: str) -> AsyncIterator[Inbox]:
    jobs = Jobs(db_url, QUEUES)
    app = make_app(jobs)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://inbox") as http:
        yield Inbox(jobs, app, http, db_url)
    await jobs.close()
