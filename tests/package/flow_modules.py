"""Which drainpipe modules each flow of docs/architecture.md runs code in, measured: one call
of each flow on a fresh database (both job storages), traced with ``sys.setprofile``.

Not part of the suite (the name does not start with ``test_``); run it by its path when the
flows change, and update docs/architecture.md from what it prints:

    ./scripts/test tests/package/flow_modules.py -s     # or pytest with the usual PYTHONPATH

With ``FLOW_FUNCTIONS=1`` each call is printed too. Each line: the flow, how many modules ran
code, and those modules in the order they first did ("+" marks the bottom core: errors,
validation, models, codes, context, JSON, the kept cursor, telemetry's off switch, and
drainpipe's own HTTP stack, which sits below every app as a framework would; the rest are
the modules a reader follows). ``db/database.py`` is counted: it is where a flow's
statements meet the pool.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from standardwebhooks import Webhook

from drainpipe import AgentInboxes, Jobs, Principal, WebhookInbox, bearer_tokens
from drainpipe.errors import Retry
from drainpipe.testing import Clock

#: FLOW_FUNCTIONS=1 prints every function call too
FUNCTIONS = bool(os.environ.get("FLOW_FUNCTIONS"))
LIB = str(Path(__file__).resolve().parents[2] / "lib" / "drainpipe") + "/"
#: helpers every flow touches at the bottom of the import graph (docs/architecture.md)
CORE = {
    "errors.py",
    "validation.py",
    "models.py",
    "codes.py",
    "context.py",
    "telemetry/providers.py",
    "db/json.py",
    "db/poolers.py",
    "db/parking.py",
    "db/statement_shapes.py",
    # drainpipe's HTTP stack replaced Starlette, which was never counted: below every app
    "http.py",
    "http_routes.py",
    "http_guards.py",
    "http_connection.py",
    "http_websocket.py",
}
#: the tests' clock, not a module of the flow
IGNORED = {"backends/memory/clock.py", "testing.py"}
SECRET = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
TOKEN = "agent-token-0123456789abcdef"


async def traced(call: Callable[[], Awaitable[Any]]) -> tuple[Any, list[str]]:
    seen: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        path = frame.f_code.co_filename
        if event == "call" and path.startswith(LIB):
            module = path[len(LIB) :]
            if module not in seen and module not in IGNORED:
                seen.append(module)
            if FUNCTIONS and module not in IGNORED:
                print(f"    {module}:{frame.f_code.co_name}")

    sys.setprofile(profile)
    try:
        result = await call()
    finally:
        sys.setprofile(None)
    return result, seen


def show(flow: str, modules: list[str]) -> None:
    path = [m for m in modules if m not in CORE]
    marked = " > ".join(m if m not in CORE else f"+{m}" for m in modules)
    print(f"{flow}: {len(path)} modules on the path, {len(modules)} run code: {marked}")


async def ok(payload: Any, job: Any) -> None:
    return None


async def raises(payload: Any, job: Any) -> None:
    raise ValueError("fails")


async def retries(payload: Any, job: Any) -> None:
    raise Retry(after=60)


async def job_flows(jobs: Jobs, storage: str) -> None:
    await jobs.enqueue("emails", {"n": 0})  # the pool is open before the traced calls
    await jobs.drain("emails", ok)  # and the first drain's one-time set-up is done
    show(f"{storage} enqueue", (await traced(lambda: jobs.enqueue("emails", {})))[1])
    options: dict[str, Any] = {"max_attempts": 3, "dedupe_key": "k"}
    _, modules = await traced(lambda: jobs.enqueue("emails", {}, **options))
    show(f"{storage} enqueue (options)", modules)
    show(f"{storage} drain, successes", (await traced(lambda: jobs.drain("emails", ok)))[1])
    for handler in (raises, retries):
        await jobs.enqueue("emails", {})
        _, modules = await traced(lambda: jobs.drain("emails", handler))  # noqa: B023
        show(f"{storage} drain, {handler.__name__}", modules)


async def test_flows(fresh_database: Any) -> None:
    print()
    for storage in ("table", "pgmq"):
        jobs = Jobs(fresh_database(storage), {"emails": dict})
        try:
            await job_flows(jobs, storage)
        finally:
            await jobs.close()

    url = fresh_database("pgmq")
    clock = Clock()
    agents = AgentInboxes(url, lease_secret="lease-secret-of-the-flows-0123456789", now=clock)
    inbox_id = await agents.create("support", lease_seconds=60)
    await agents.subscribe(inbox_id, "billing")
    webhooks = WebhookInbox(url, source="billing", secrets=SECRET)
    await webhooks.store(id="warm", payload={"n": 0})
    body = json.dumps({"type": "invoice.paid", "n": 1})
    stamp = int(time.time())
    signature = Webhook(SECRET).sign("msg_1", datetime.fromtimestamp(stamp, UTC), body)
    headers = {"webhook-id": "msg_1", "webhook-timestamp": str(stamp)}
    headers |= {"webhook-signature": signature, "content-type": "application/json"}
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=webhooks), base_url="http://hooks"
    ) as http:
        answer, modules = await traced(lambda: http.post("/", content=body, headers=headers))
        assert answer.status_code == 202, answer.text
        show("webhook receive", modules)
    show("webhook process", (await traced(lambda: webhooks.process(lambda message: None)))[1])

    clock.advance(3600)  # the events fanned out above are due on the agents' clock
    app = agents.app(authorize=bearer_tokens({TOKEN: Principal("agent")}), budget=5.0)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://agents",
        headers={"authorization": f"Bearer {TOKEN}"},
    ) as http:
        next_url = f"/v1/agent/inbox/{inbox_id}/next"
        answer, modules = await traced(lambda: http.get(next_url, params={"max": 1}))
        [event] = answer.json()["events"]
        show("agent pull", modules)
        ack = {"lease_id": event["lease_id"], "outcome": "done"}
        answer, modules = await traced(lambda: http.post(f"/v1/events/{event['id']}/ack", json=ack))
        assert answer.status_code == 200, answer.text
        show("agent ack", modules)
    await webhooks.close()
    await agents.close()
