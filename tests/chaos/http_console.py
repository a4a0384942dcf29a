"""The console's entry of the fuzz (listed in ``ENTRIES``, tests/chaos/http_entries.py): the
Job Inbox's management app with everything the console adds switched on, so each of its
routes gets thousands of requests of its own, not a share of the ``jobs-admin`` entry's.

``GET /queues``, pause and resume, ``GET /jobs`` with the search filters, bulk cancel and
replay, ``GET /metrics`` (with the metrics token, a caller's token, or none) and
``GET /inboxes`` (the app is given an :class:`~drainpipe.AgentInboxes`). The database is
seeded after the first request: queued and dead jobs in two queues, jobs with a dedupe key,
and an agent inbox subscribed to a webhook source with events in it.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from typing import Any

from drainpipe import AgentInboxes, Jobs, WebhookInbox, bearer_tokens
from drainpipe.console.config import management_tokens
from drainpipe.console.management_app import Mounted
from drainpipe.db import Database
from drainpipe.serverless import ASGIApp

from .http_agents import AGENT_LEASE_SECRET, Seeded

METRICS_TOKEN = "chaos-metrics-token-0123456789"
CONSOLE_QUEUES: dict[str, Any] = {"emails": dict[str, Any], "reports": dict[str, Any]}
CODES = ["HANDLER_ERROR", "CANCELLED", "LEASE_LOST", "SKIPPED_DUPLICATE", "lower", "A" * 65, ""]
TIMES = [
    "2020-01-01", "2030-01-01T00:00:00Z", "2026-12-03T08:00:00+01:00", "yesterday",
    "9999-12-31T23:59:59Z", "0001-01-01", "2026-13-01", "1e9", "",
]  # fmt: skip
IDS = ["1", "2", "0", "-1", "9223372036854775807", "9223372036854775808", "1.5", "x", ""]


def console_build(env: Mapping[str, str]) -> ASGIApp:
    """The management app at ``/api/jobs`` with the agent inboxes and a metrics token."""
    from tests.chaos.http_entries import MANAGEMENT_TOKENS

    db = Database(env["DATABASE_URL"])
    jobs = Jobs(db, CONSOLE_QUEUES)
    agents = AgentInboxes(db, lease_secret=AGENT_LEASE_SECRET)
    app = jobs.management_app(
        authorize=bearer_tokens(management_tokens(MANAGEMENT_TOKENS)),
        cursor_secret="chaos-console-cursor-secret-0123456789",
        target="chaos",
        agents=agents,
        metrics_token=METRICS_TOKEN,
    )

    async def seed() -> None:
        # emails as the example app's handler takes them: the serve entry drains this queue
        await jobs.enqueue_many("emails", [{"to": f"user{n}@example.com"} for n in range(40)])
        await jobs.enqueue_many("reports", [{"n": n} for n in range(10)], max_attempts=1)
        for n in range(5):
            await jobs.enqueue("emails", {"to": f"dedupe{n}@example.com"}, dedupe_key=f"k{n}")
        for job in await jobs.claim("reports", batch=6, lease=60):
            await jobs.fail(job, "boom")  # dead: one attempt each
        inbox_id = await agents.create("console-chaos", lease_seconds=60)
        await agents.subscribe(inbox_id, "console-billing")
        box = WebhookInbox(db, source="console-billing")
        for n in range(10):
            await box.store(id=f"console_{n}", payload={"n": n})

    async def close() -> None:
        await agents.close()
        await jobs.close()
        await db.close()

    return Seeded(Mounted("/api/jobs", app), seed, close)


def _search_query(rng: random.Random) -> str:
    """``GET /jobs``'s filters: each key's valid values and the ones it must refuse (400)."""
    pairs: list[tuple[str, str]] = []
    for key, values in (
        ("code", CODES),
        ("since", TIMES),
        ("until", TIMES),
        ("id", IDS),
        ("dedupe_key", ["k1", "k", "x" * 256, "é"]),
        ("queue", ["emails", "reports", "nosuchqueue"]),
        ("state", ["queued", "dead", "running", "bogus"]),
        ("limit", ["1", "5", "500", "0", "x"]),
    ):
        if rng.random() < 0.3:
            pairs.append((key, rng.choice(values)))
    if rng.random() < 0.05:
        pairs.append(("cursor", rng.choice(["", "abc", "x" * 400])))
    return "&".join(f"{key}={value}" for key, value in pairs)


def console_request(rng: random.Random, env: Mapping[str, str]) -> Any:
    """One of the console's requests, as an admin (mostly), a viewer or a stranger."""
    from tests.chaos.http_entries import ADMIN_TOKEN, VIEWER_TOKEN, Draft, idempotency_key

    token = rng.choice([ADMIN_TOKEN, ADMIN_TOKEN, ADMIN_TOKEN, VIEWER_TOKEN, "not-a-token"])
    headers = [("authorization", f"Bearer {token}")]
    choice = rng.randrange(8)
    if choice == 0:
        return Draft("GET", rng.choice(["/api/jobs/queues", "/api/jobs/inboxes"]), headers)
    if choice == 1:
        metrics_headers = rng.choice([[("authorization", f"Bearer {METRICS_TOKEN}")], headers, []])
        return Draft("GET", "/api/jobs/metrics", metrics_headers)
    if choice == 2:
        queue = rng.choice(["emails", "reports", "nosuchqueue", "", "x" * 300])
        action = rng.choice(["pause", "resume", "resume"])
        return Draft("POST", f"/api/jobs/queues/{queue}/{action}", headers)
    if choice <= 4:
        return Draft("GET", "/api/jobs/jobs", headers, query=_search_query(rng))
    keys = ["queue", "state", "tenant", "code", "since", "until"]
    chosen = rng.sample(keys, rng.randrange(0, 4))
    values = {
        "queue": ["emails", "reports", "nosuchqueue"],
        "state": ["queued", "dead", "bogus"],
        "tenant": ["t1", ""],
        "code": CODES,
        "since": TIMES,
        "until": TIMES,
    }
    body = {
        "filter": {key: rng.choice(values[key]) for key in chosen},
        "expected": rng.choice([0, 0, 1, 4, 6, 40, 10_001, -1]),
    }
    key = ("idempotency-key", idempotency_key(rng))
    return Draft(
        "POST",
        f"/api/jobs/jobs/bulk/{rng.choice(['cancel', 'replay'])}",
        [*headers, key, ("content-type", "application/json")],
        json.dumps(body).encode(),
    )
