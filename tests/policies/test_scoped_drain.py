"""Scoped executor tokens and policy queues on the drain route, over HTTP (uvicorn on
loopback, httpx), on real Postgres."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

import drainpipe
from drainpipe import Job, Jobs, QueuePolicy
from drainpipe.dev.server import start_server
from drainpipe.jobs.drain_tokens import EVERYTHING, DrainCredentials

EMAILS_TOKEN = "tok-emails-0123456789abcdef"
PUSH_TOKEN = "tok-push-0123456789abcdef"
QUEUES: dict[str, Any] = {"emails": dict[str, Any], "push": dict[str, Any], "audit": dict[str, Any]}


@asynccontextmanager
async def serve(app: Any) -> AsyncIterator[httpx.AsyncClient]:
    server = await start_server(app)
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            yield client
    finally:
        await server.stop()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_a_token_drains_only_its_queues_and_schedules_run_for_any(db_url: str) -> None:
    jobs = Jobs(db_url, QUEUES)
    ran: list[str] = []

    def handler(queue: str) -> Any:
        async def handle(payload: Any, job: Job[Any]) -> None:
            ran.append(queue)

        return handle

    route = jobs.drain_route(
        secret={EMAILS_TOKEN: ["emails"], PUSH_TOKEN: ["push", "audit"]},
        handlers={name: handler(name) for name in QUEUES},
        budget=5,
    )
    for queue in QUEUES:
        await jobs.enqueue(queue, {"q": queue})
    # written with a clock two minutes back, so its first run is due now
    earlier = Jobs(db_url, QUEUES, now=lambda: datetime.now(UTC) - timedelta(minutes=2))
    await earlier.schedule("every-minute", "* * * * *", "audit", {"from": "schedule"})
    await earlier.close()
    async with serve(route) as client:
        refused = await client.post("/", headers=bearer("tok-nobody-0123456789abcdef"))
        assert refused.status_code == 401
        assert (await client.post("/")).status_code == 401
        first = await client.post("/", headers=bearer(EMAILS_TOKEN))
        assert first.status_code == 200, first.text
        body = first.json()
        assert set(body["queues"]) == {"emails"} and ran == ["emails"]
        assert body["schedules"] == 1  # a valid token runs due schedules
        second = await client.post("/", headers={"authorization": "bearer " + PUSH_TOKEN})
        assert set(second.json()["queues"]) == {"push", "audit"}
    assert sorted(ran) == ["audit", "audit", "emails", "push"]
    await jobs.close()


def test_token_mappings_are_checked_when_the_route_is_built() -> None:
    jobs = Jobs("postgresql://postgres@127.0.0.1:1/x", QUEUES)
    handlers: dict[str, Any] = {"emails": lambda p, j: None}
    for secret, message in [
        ({}, "needs a secret"),
        ({"short": ["emails"]}, "16"),
        ({EMAILS_TOKEN: []}, "no queues"),
        ({EMAILS_TOKEN: "emails"}, "list"),
        ({EMAILS_TOKEN: ["push"]}, "push"),  # no handler for it on this route
    ]:
        with pytest.raises(ValueError, match=message):
            jobs.drain_route(secret=secret, handlers=handlers)


def test_every_token_is_compared_and_the_single_secret_drains_everything() -> None:
    scoped = DrainCredentials({EMAILS_TOKEN: ["emails"], PUSH_TOKEN: ["push"]}, QUEUES)
    assert scoped.scope(f"Bearer {EMAILS_TOKEN}") == frozenset({"emails"})
    assert scoped.scope(PUSH_TOKEN) == frozenset({"push"})
    assert scoped.scope(EMAILS_TOKEN[:-1]) is None
    assert scoped.scope(None) is None
    single = DrainCredentials("just-one-secret-0123456789abcdef0123456789abcdef", QUEUES)
    assert single.scope("Bearer just-one-secret-0123456789abcdef0123456789abcdef") is EVERYTHING


async def test_policy_queue_is_leased_by_policy_and_heartbeated_past_it(db_url: str) -> None:
    # the route beats every lease / 3: a 1.5 s lease outlasts a loaded machine's stall
    policy = QueuePolicy(lease=1.5, max_lease=2.0)
    jobs = Jobs(db_url, QUEUES, policies={"emails": policy})
    thief = Jobs(db_url, QUEUES)
    leases: list[float] = []
    stolen: list[Any] = []

    async def slow(payload: Any, job: Job[Any]) -> None:
        leases.append((job.visible_until - job.enqueued_at).total_seconds())
        await asyncio.sleep(4.5)  # past max_lease twice over
        stolen.extend(await thief.claim("emails", lease=1))

    await jobs.enqueue("emails", {"n": 1})
    route = jobs.drain_route(
        secret="route-secret-0123456789abcdef0123456789abcdef", handlers={"emails": slow}, budget=20
    )
    async with serve(route) as client:
        answer = await client.get(
            "/", headers=bearer("route-secret-0123456789abcdef0123456789abcdef")
        )
    assert answer.status_code == 200
    assert answer.json()["queues"]["emails"] == {"succeeded": 1, "failed": 0}
    assert leases and leases[0] < 5  # the policy's lease, not the 50 s of the budget
    assert stolen == []
    await jobs.close()
    await thief.close()


async def test_the_route_applies_retention_at_most_hourly(db_url: str) -> None:
    jobs = Jobs(db_url, QUEUES, policies={"emails": QueuePolicy(retention=60)})
    await jobs.ensure_policies()
    route = jobs.drain_route(
        secret="route-secret-0123456789abcdef0123456789abcdef", handlers={}, budget=1
    )
    assert drainpipe  # the package the route comes from
    await route.run()
    async with jobs.backend.db.connection() as conn:  # type: ignore[attr-defined]
        first = await (
            await conn.execute("SELECT last_run FROM drainpipe.job_retention_runs")
        ).fetchone()
    await route.run()
    async with jobs.backend.db.connection() as conn:  # type: ignore[attr-defined]
        second = await (
            await conn.execute("SELECT last_run FROM drainpipe.job_retention_runs")
        ).fetchone()
    assert first is not None and first[0] is not None and first == second
    await jobs.close()
