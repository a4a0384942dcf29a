"""The agent inboxes in the console's overview (``GET /inboxes``, docs/reference.md section
15) over real Postgres: events of every state counted, open stream slots counted and ones
whose lease ran out not, the age of the oldest open event, viewers may read it, no token is
a 401, nothing of a body, an error text, a lease id or a stream holder comes out; through
the API and both ManagementClients."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import psycopg
import pytest

from drainpipe import AgentInboxes, DrainpipeError, Jobs, ManagementClient, WebhookInbox, sync
from drainpipe.agents import stream as agent_ops
from drainpipe.console.management_app import ManagementApp
from drainpipe.testing import Clock
from tests.admin.browser import ServedApp
from tests.admin.conftest import (
    ADMIN,
    ERROR_MARKER,
    PAYLOAD_MARKER,
    QUEUES,
    VIEWER,
    bearer,
    make_app,
)
from tests.admin.test_management_api import problem

LEASE_SECRET = "lease-secret-of-the-console-tests"
HOLDER_MARKER = "STREAM-HOLDER-MARKER-5d1e"
ZERO = {"pending": 0, "leased": 0, "acked": 0, "delivered": 0, "failed": 0, "expired": 0}


@dataclass
class Overview:
    app: ManagementApp
    http: httpx.AsyncClient
    agents: AgentInboxes
    clock: Clock
    url: str


def acquire_stream(url: str, inbox_id: str, seconds: float, clock: Clock) -> None:
    """Holds a stream slot the way an open WebSocket stream does (its holder's lease)."""
    with psycopg.connect(url, autocommit=True) as conn:
        [(slot,)] = conn.execute(
            agent_ops.STREAM_ACQUIRE,
            agent_ops.stream_acquire_params(inbox_id, HOLDER_MARKER, seconds, 4, clock()),
        ).fetchall()
        assert slot is not None


async def events_of_every_state(agents: AgentInboxes, url: str, clock: Clock) -> list[str]:
    """Inbox "support": one event in each state but expired, one open stream and one whose
    slot ran out; inbox "archive": one expired event. Bodies, outcomes and the error carry
    the markers. Returns the lease ids handed out."""
    support = await agents.create("support", lease_seconds=60, max_attempts=1)
    archive = await agents.create("archive", hold_seconds=1)
    await agents.subscribe(support, "billing", types=["invoice.paid"])
    await agents.subscribe(archive, "billing", types=["invoice.old"])
    webhooks = WebhookInbox(url, source="billing", app="stripe")
    try:
        for n in range(5):
            body = {"secret": PAYLOAD_MARKER, "n": n}
            await webhooks.store(id=f"m{n}", payload=body, type="invoice.paid")
        await webhooks.store(id="old", payload={"secret": PAYLOAD_MARKER}, type="invoice.old")
    finally:
        await webhooks.close()
    acquire_stream(url, archive, 1, clock)  # its holder went away: it stops counting
    clock.advance(5)  # past the arrivals (stored on the database's clock) and archive's hold
    acquire_stream(url, support, 60, clock)
    inbox = agents.inbox(support)
    leases = []
    [acked] = await inbox.next()
    assert acked.lease_id is not None
    assert await agents.ack(acked.id, acked.lease_id, {"note": PAYLOAD_MARKER})
    [failed] = await inbox.next()
    assert failed.lease_id is not None
    assert await agents.release(failed.id, failed.lease_id, error=ERROR_MARKER)
    [delivered] = await inbox.next(ack="pickup")
    assert delivered.lease_id is None  # settled at hand-out
    [leased] = await inbox.next()
    assert leased.lease_id is not None
    leases += [acked.lease_id, failed.lease_id, leased.lease_id]
    assert await agents.inbox(archive).next() == []  # marks its event expired
    return leases


@pytest.fixture
async def overview(db_url: str) -> AsyncIterator[Overview]:
    clock = Clock()
    agents = AgentInboxes(db_url, lease_secret=LEASE_SECRET, now=clock)
    jobs = Jobs(db_url, QUEUES)
    app = make_app(jobs, agents=agents)
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://inbox") as http:
            yield Overview(app, http, agents, clock, db_url)
    finally:
        await jobs.close()
        await agents.close()


async def test_every_state_and_open_streams_are_counted_metadata_only(
    overview: Overview,
) -> None:
    leases = await events_of_every_state(overview.agents, overview.url, overview.clock)
    answer = await overview.http.get("/inboxes", headers=bearer(VIEWER))
    assert answer.status_code == 200, answer.text
    assert answer.headers["cache-control"] == "no-store"
    body = answer.json()
    assert body["meta"] == {"target": "production"}
    archive, support = body["data"]  # by name
    assert set(support) == {"inbox", "name", "counts", "open_streams", "oldest_open_age_s"}
    assert support["name"] == "support" and support["inbox"].startswith("inb_")
    assert support["counts"] == {**ZERO, "pending": 1, "leased": 1, "acked": 1} | {
        "delivered": 1,
        "failed": 1,
    }
    assert support["open_streams"] == 1
    # the oldest open event arrived a little before the clock moved 5 s on
    assert 4 <= support["oldest_open_age_s"] <= 6
    assert archive["name"] == "archive"
    assert archive["counts"] == {**ZERO, "expired": 1}
    assert archive["open_streams"] == 0 and archive["oldest_open_age_s"] is None
    text = answer.text + repr(answer.headers)
    for secret in [PAYLOAD_MARKER, ERROR_MARKER, HOLDER_MARKER, *leases]:
        assert secret not in text
    # the same answer through the async client
    transport = httpx.ASGITransport(app=overview.app)
    async with ManagementClient("http://inbox", ADMIN, transport=transport) as client:
        assert await client.inboxes() == body["data"]


async def test_the_route_wants_a_token_and_reads_only(overview: Overview) -> None:
    problem(await overview.http.get("/inboxes"), 401, "UNAUTHORIZED")
    wrong = await overview.http.get("/inboxes", headers=bearer("not-a-token-0123456789"))
    problem(wrong, 401, "UNAUTHORIZED")
    problem(await overview.http.post("/inboxes", headers=bearer(ADMIN)), 405, "METHOD_NOT_ALLOWED")
    problem(
        await overview.http.delete("/inboxes", headers=bearer(ADMIN)), 405, "METHOD_NOT_ALLOWED"
    )
    empty = await overview.http.get("/inboxes", headers=bearer(VIEWER))
    assert empty.status_code == 200 and empty.json()["data"] == []
    head = await overview.http.head("/inboxes", headers=bearer(VIEWER))
    assert head.status_code == 200 and head.content == b""
    page = await overview.http.get("/")
    assert 'data-inboxes="1"' in page.text


async def test_without_agents_the_route_is_not_served(db_url: str) -> None:
    jobs = Jobs(db_url, QUEUES)
    app = make_app(jobs)
    try:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://inbox") as http:
            problem(await http.get("/inboxes", headers=bearer(VIEWER)), 404, "ROUTE_NOT_FOUND")
            assert 'data-inboxes=""' in (await http.get("/")).text
        async with ManagementClient("http://inbox", VIEWER, transport=transport) as client:
            with pytest.raises(DrainpipeError) as missing:
                await client.inboxes()
            assert missing.value.code == "ROUTE_NOT_FOUND"
        with pytest.raises(TypeError, match="agents"):
            make_app(jobs, agents=object())
    finally:
        await jobs.close()


def test_the_sync_client_reads_the_inboxes(fresh_database: Any) -> None:
    url = str(fresh_database("table"))
    clock = Clock()
    jobs = Jobs(url, QUEUES)
    agents = AgentInboxes(url, lease_secret=LEASE_SECRET, now=clock)
    served = ServedApp(make_app(jobs, agents=agents))
    try:
        inbox_id = served.run(agents.create("triage"))
        acquire_stream(url, inbox_id, 60, clock)
        with sync.ManagementClient(served.url, VIEWER, backoff=0) as client:
            assert client.inboxes() == [
                {
                    "inbox": inbox_id,
                    "name": "triage",
                    "counts": ZERO,
                    "open_streams": 1,
                    "oldest_open_age_s": None,
                }
            ]
    finally:
        served.run(jobs.close())
        served.run(agents.close())
        served.stop()
