"""ManagementClient against the real app on real Postgres: pages, errors as DrainpipeError
with the server's kind/status/code, and replay's own retries with one key."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import psycopg
import pytest

from drainpipe import DrainpipeError, Jobs, ManagementClient
from drainpipe.console.management_app import ManagementApp
from tests.admin.conftest import ADMIN, QUEUES, VIEWER, make_app


class LosingTransport(httpx.AsyncBaseTransport):
    """Forwards to the app; the first ``lose`` answers to a replay are lost on the way back
    (the request did reach the server and ran)."""

    def __init__(self, app: ManagementApp, lose: int = 0) -> None:
        self.inner = httpx.ASGITransport(app=app)
        self.lose = lose
        self.keys: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        if request.url.path.endswith("/replay"):
            self.keys.append(request.headers["idempotency-key"])
            if self.lose:
                self.lose -= 1
                await response.aread()
                raise httpx.ReadError("connection reset", request=request)
        return response


@pytest.fixture
async def served(fresh_database: Any) -> AsyncIterator[tuple[Jobs, ManagementApp, str]]:
    url = fresh_database("table")
    jobs = Jobs(url, QUEUES)
    yield jobs, make_app(jobs), url
    await jobs.close()


def client(app: ManagementApp, token: str, **options: Any) -> ManagementClient:
    transport = options.pop("transport", None) or httpx.ASGITransport(app=app)
    return ManagementClient("http://inbox", token, transport=transport, backoff=0, **options)


async def test_list_walks_every_page_and_get_reads_one(
    served: tuple[Jobs, ManagementApp, str],
) -> None:
    jobs, app, _ = served
    ids = await jobs.enqueue_many("emails", [{"n": i} for i in range(7)])
    async with client(app, VIEWER) as viewer:
        listed = [job["id"] async for job in viewer.list(queue="emails", limit=3)]
        assert listed == sorted(ids, reverse=True)
        record = await viewer.get("emails", ids[0])
        assert record["id"] == ids[0] and record["history"] == []
        assert "token" not in repr(viewer) and VIEWER not in repr(viewer)


async def test_problems_raise_with_the_servers_kind_status_and_code(
    served: tuple[Jobs, ManagementApp, str],
) -> None:
    jobs, app, _ = served
    job_id = await jobs.enqueue("emails", {"n": 1})

    async def refusal(call: Any) -> tuple[str, int, str | None]:
        with pytest.raises(DrainpipeError) as caught:
            await call
        return caught.value.kind, caught.value.status, caught.value.code

    async with client(app, VIEWER) as viewer, client(app, ADMIN) as admin:
        async with client(app, "not-a-known-token-at-all") as stranger:
            assert await refusal(stranger.get("emails", job_id)) == (
                "unauthorized",
                401,
                "UNAUTHORIZED",
            )
        assert await refusal(viewer.cancel("emails", job_id)) == (
            "forbidden",
            403,
            "ADMIN_REQUIRED",
        )
        assert await refusal(viewer.get("emails", 987654)) == ("not_found", 404, "JOB_NOT_FOUND")
        assert await refusal(viewer.get("nope", 1)) == ("not_found", 404, "QUEUE_NOT_FOUND")
        assert await refusal(admin.replay("emails", job_id)) == ("conflict", 409, "JOB_NOT_DEAD")
        assert (await admin.cancel("emails", job_id))["state"] == "cancelled"
        with pytest.raises(DrainpipeError) as caught:
            [_ async for _ in viewer.list(limit=501)]
        assert (caught.value.kind, caught.value.code) == ("invalid_request", "LIMIT_TOO_LARGE")


async def test_replay_retries_a_lost_answer_with_the_same_key(
    served: tuple[Jobs, ManagementApp, str],
) -> None:
    jobs, app, url = served
    job_id = await jobs.enqueue("emails", {"n": 1}, max_attempts=1)
    [job] = await jobs.claim("emails", lease=60)
    await jobs.fail(job, "boom")
    transport = LosingTransport(app, lose=2)
    async with client(app, ADMIN, transport=transport) as admin:
        result = await admin.replay("emails", job_id)
        assert result["parent_id"] == job_id
        assert len(transport.keys) == 3 and len(set(transport.keys)) == 1
        # a new call is a new deliberate replay: a new key, refused (replayed already)
        with pytest.raises(DrainpipeError) as caught:
            await admin.replay("emails", job_id)
        assert caught.value.code == "JOB_ALREADY_REPLAYED"
        assert len(set(transport.keys)) == 2
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT outcome, idempotency_key FROM drainpipe.management_audit ORDER BY id"
        ).fetchall()
    assert rows == [("ok", transport.keys[0]), ("refused", transport.keys[-1])]


async def test_a_network_failure_without_retries_left_raises_network() -> None:
    async with ManagementClient("http://127.0.0.1:9", ADMIN, retries=0, timeout=2) as admin:
        with pytest.raises(DrainpipeError) as caught:
            await admin.replay("emails", 1)
        assert caught.value.kind == "network"
    with pytest.raises(ValueError, match="base_url"):
        ManagementClient("ftp://x", ADMIN)
