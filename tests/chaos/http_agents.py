"""The pull-protocol entries of the fuzz (listed in ``ENTRIES``, tests/chaos/http_entries.py):
the agent inbox (``functions/agent_inbox.py``) and the executor app (``jobs.executor_app``).

Both hand out leases: the fuzz seeds their database on the first request (webhooks for the
agent inbox's subscription, jobs for the executor) and learns event ids and lease ids from
the answers, so later requests settle real leases too, not only made-up ones.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import psycopg

from drainpipe import Jobs, WebhookInbox
from drainpipe.serverless import ASGIApp

AGENT_TOKEN = "chaos-agent-token-00001"
AGENT_LEASE_SECRET = "chaos-agent-lease-secret-01"
EXECUTOR_TOKEN = "chaos-executor-token-01"


class Seeded:
    """``app`` whose database gets some state once, after its first request (the agent
    inbox creates its inbox on that request)."""

    def __init__(
        self, app: ASGIApp, seed: Callable[[], Awaitable[None]], close: Any = None
    ) -> None:
        self.app, self.seed, self.close = app, seed, close
        self.lock: asyncio.Lock | None = None
        self.done = False

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)
        if not self.done and scope["type"] == "http":
            self.lock = self.lock or asyncio.Lock()
            async with self.lock:
                if not self.done:
                    self.done = True
                    await self.seed()

    async def aclose(self) -> None:
        for close in (getattr(self.app, "aclose", None), self.close):
            if close is not None:
                await close()


class Learned:
    """Ids seen in answers (bounded), and a way to pick a real one or a made-up one."""

    def __init__(self) -> None:
        self.inbox: str | None = None
        self.events: list[str] = []
        self.leases: dict[str, str] = {}  # lease id -> event id (or job lease for executor)

    def learn(self, body: bytes) -> None:
        try:
            document = json.loads(body)
        except ValueError:
            return
        if not isinstance(document, dict):
            return
        for key in ("events", "claimed", "jobs"):
            for item in document.get(key) or []:
                if not isinstance(item, dict):
                    continue
                if isinstance(item.get("id"), str) and item["id"] not in self.events:
                    self.events = [*self.events[-199:], item["id"]]
                if isinstance(item.get("lease_id"), str):
                    self.leases[item["lease_id"]] = str(item.get("id"))
                    if len(self.leases) > 200:
                        self.leases.pop(next(iter(self.leases)))

    def event(self, rng: random.Random) -> str:
        if self.events and rng.random() < 0.8:
            return rng.choice(self.events)
        return rng.choice(["evt_0", "evt_" + "f" * 32, "1", "..", "%00", "x" * 300])

    def lease(self, rng: random.Random) -> str:
        if self.leases and rng.random() < 0.8:
            return rng.choice(list(self.leases))
        return rng.choice(["lse_x", "lse_" + "a" * 60, "", "lse_..", "x" * 300])


AGENT = Learned()
EXECUTOR = Learned()


def agent_build(env: Mapping[str, str]) -> ASGIApp:
    from tests.chaos.http_entries import function_app

    app = function_app("agent_inbox.py")(env)
    global AGENT
    AGENT = Learned()

    async def seed() -> None:
        async with await psycopg.AsyncConnection.connect(
            env["DATABASE_URL"], autocommit=True
        ) as conn:
            cur = await conn.execute(
                "SELECT id FROM drainpipe.agent_inboxes WHERE name = 'billing-agent'"
            )
            row = await cur.fetchone()
            AGENT.inbox = None if row is None else str(row[0])
            inbox = WebhookInbox(conn, source="billing")  # fans out to the subscribed inbox
            for n in range(40):
                await inbox.store(id=f"seed_{n}", payload={"type": "invoice.paid", "n": n})

    return Seeded(app, seed)


def agent_request(rng: random.Random, env: Mapping[str, str]) -> Any:
    from tests.chaos.http_entries import Draft

    inbox = AGENT.inbox or "inb_" + "0" * 32
    if rng.random() < 0.1:
        inbox = rng.choice(["inb_x", "inb_" + "e" * 32, "..", "x" * 300])
    headers = [("authorization", f"Bearer {AGENT_TOKEN}"), ("content-type", "application/json")]
    base = f"/v1/agent/inbox/{inbox}"
    choice = rng.randrange(7)
    if choice == 0:
        query = f"max={rng.randint(1, 5)}&wait=0&ack={rng.choice(['manual', 'pickup'])}"
        return Draft("GET", f"{base}/next", headers, query=query)
    if choice == 1:
        return Draft("GET", f"{base}/events", headers, query=rng.choice(["", "limit=5"]))
    if choice == 2:
        ids = [AGENT.event(rng) for _ in range(rng.randint(1, 3))]
        return Draft("POST", f"{base}/claim", headers, json.dumps({"event_ids": ids}).encode())
    if choice == 6:
        return Draft("GET", f"/v1/events/{AGENT.event(rng)}/raw", headers)
    lease = AGENT.lease(rng)
    event = AGENT.leases.get(lease) or AGENT.event(rng)
    action = rng.choice(["ack", "release", "extend"])
    body: dict[str, Any] = {"lease_id": lease}
    if action == "ack":
        body["outcome"] = rng.choice(["done", "failed", "skipped", None])
    elif action == "release":
        body.update(delay_seconds=rng.choice([0, 1, 30]), error=rng.choice([None, "boom"]))
    else:
        body["seconds"] = rng.choice([30, 60, 0])
    return Draft("POST", f"/v1/events/{event}/{action}", headers, json.dumps(body).encode())


def agent_learn(body: bytes) -> None:
    AGENT.learn(body)


def executor_build(env: Mapping[str, str]) -> ASGIApp:
    global EXECUTOR
    EXECUTOR = Learned()
    jobs = Jobs(env["DATABASE_URL"], {"emails": dict[str, Any], "reports": dict[str, Any]})
    app = jobs.executor_app(
        tokens={EXECUTOR_TOKEN: ["emails"]}, budget=2.0, lease_secret=AGENT_LEASE_SECRET
    )

    async def seed() -> None:
        await jobs.enqueue_many("emails", [{"to": f"user{n}@example.com"} for n in range(150)])

    return Seeded(app, seed, jobs.close)


def executor_request(rng: random.Random, env: Mapping[str, str]) -> Any:
    from tests.chaos.http_entries import Draft

    headers = [("authorization", f"Bearer {EXECUTOR_TOKEN}"), ("content-type", "application/json")]
    choice = rng.randrange(6)
    if choice <= 2:
        body = {
            "queues": rng.choice([["emails"], ["emails"], ["reports"], []]),
            "max": rng.randint(1, 5),
            "wait": 0,
            "lease": rng.choice([30, 60, 5]),
        }
        return Draft("POST", "/claim", headers, json.dumps(body).encode())
    lease = EXECUTOR.lease(rng)
    document: dict[str, Any] = {"lease_id": lease}
    if choice == 3:
        document.update(action="complete", **rng.choice([{}, {"code": "SKIPPED_DUPLICATE"}]))
    elif choice == 4:
        document.update(action="fail", error="boom", retry_in=rng.choice([0.1, 5, None]))
    else:
        document.update(action="extend", seconds=30)
    if rng.random() < 0.05:  # an action that is not one
        document["action"] = rng.choice(["bogus", None, ["complete"], "COMPLETE"])
    if rng.random() < 0.03:  # the per-lease routes of earlier releases answer 410
        return Draft("POST", f"/jobs/{lease}/complete", headers, b"{}")
    return Draft("POST", "/settle", headers, json.dumps(document).encode())


def executor_learn(body: bytes) -> None:
    EXECUTOR.learn(body)
