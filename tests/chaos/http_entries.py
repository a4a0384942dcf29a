"""Every HTTP entry the chaos fuzz sends requests to: ONE list, :data:`ENTRIES`.

An entry is an ASGI app built the way it is deployed, and a maker of plausible requests
for it (the fuzz mutates these, tests/chaos/http_fuzz.py). A new HTTP app joins the fuzz
with one more :class:`HttpEntry` here: a name, its path, ``build(env)`` returning the app
(``env`` holds ``DATABASE_URL`` and the secrets below), ``request(rng, env)`` returning a
:class:`Draft` that a well-behaved client could send (the fuzz then breaks it), and the
jobs backend its database needs (default pgmq).
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import json
import random
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from drainpipe.dev.functions import FunctionsApp
from drainpipe.serve import WithHealthCheck
from drainpipe.serverless import ASGIApp, LazyApp

ROOT = Path(__file__).resolve().parents[2]
CRON_SECRET = "chaos-cron-secret-0123456789abcdef0123456789abcdef"
WEBHOOK_KEY = b"drainpipe-chaos-webhook-key-01"
WEBHOOK_SECRET = "whsec_" + base64.b64encode(WEBHOOK_KEY).decode()
# a few keys only, so the fuzz replays, races and conflicts on the same key
IDEMPOTENCY_KEYS = [f"order-{n}" for n in range(6)]
# the Job Inbox's callers (functions/jobs_admin.py reads them from MANAGEMENT_TOKENS)
ADMIN_TOKEN = "chaos-admin-token-0123456789"
VIEWER_TOKEN = "chaos-viewer-token-0123456789"


@dataclasses.dataclass
class Draft:
    """A request before the fuzz breaks it. ``sign`` is set for webhooks: the fuzz signs the
    body it ends up with (half of the time), so broken bodies reach the parser too."""

    method: str
    path: str
    headers: list[tuple[str, str]]
    body: bytes = b""
    query: str = ""
    sign: bool = False


@dataclasses.dataclass(frozen=True)
class HttpEntry:
    name: str
    path: str
    build: Callable[[Mapping[str, str]], ASGIApp]
    request: Callable[[random.Random, Mapping[str, str]], Draft]
    #: the jobs backend of its database
    backend: str = "pgmq"
    #: reads each 2xx answer's body (ids, lease ids), so later requests can use real ones
    learn: Callable[[bytes], None] | None = None


def function_app(module_file: str) -> Callable[[Mapping[str, str]], ASGIApp]:
    """The app of ``functions/<file>`` built by its own ``build`` from ``env`` (as its
    ``LazyApp`` does from the environment on the first request)."""

    def build(env: Mapping[str, str]) -> ASGIApp:
        from drainpipe.dev.functions import load_function

        deployed = load_function(ROOT / "functions" / module_file)
        assert isinstance(deployed, LazyApp)
        module_build = deployed._build
        return LazyApp(module_build, deployed.needs, env=dict(env))

    return build


def sign(msg_id: str, stamp: str, body: bytes) -> str:
    try:
        signed = msg_id.encode() + b"." + stamp.encode() + b"." + body
    except UnicodeEncodeError:
        signed = b""
    return "v1," + base64.b64encode(hmac.new(WEBHOOK_KEY, signed, hashlib.sha256).digest()).decode()


def signed_headers(draft: Draft, rng: random.Random) -> None:
    """Standard Webhooks headers for the draft's (final) body, replacing any there."""
    names = {"webhook-id", "webhook-timestamp", "webhook-signature"}
    kept = [(k, v) for k, v in draft.headers if k not in names]
    msg_id = next((v for k, v in draft.headers if k == "webhook-id"), f"msg_{rng.randrange(50)}")
    stamp = str(int(time.time()) + rng.choice([0] * 8 + [-1, 3, -400, 400]))
    draft.headers = [
        *kept,
        ("webhook-id", msg_id),
        ("webhook-timestamp", stamp),
        ("webhook-signature", sign(msg_id, stamp, draft.body)),
    ]


# -- the entries' plausible requests -------------------------------------------------------


def idempotency_key(rng: random.Random) -> str:
    """Mostly a new key; a third of the time one of a few shared ones (replays, conflicts)."""
    if rng.random() < 0.3:
        return rng.choice(IDEMPOTENCY_KEYS)
    return f"order-{rng.getrandbits(64):x}"


def order_request(rng: random.Random, env: Mapping[str, str]) -> Draft:
    body = {"item": rng.choice(["book", "lamp", "ünïcode", ""]), "quantity": rng.randint(1, 3)}
    return Draft(
        "POST",
        "/api/orders",
        [("content-type", "application/json"), ("idempotency-key", idempotency_key(rng))],
        json.dumps(body).encode(),
    )


def drain_request(rng: random.Random, env: Mapping[str, str]) -> Draft:
    return Draft(
        rng.choice(["GET", "POST"]), "/api/drain", [("authorization", f"Bearer {CRON_SECRET}")]
    )


def webhook_request(rng: random.Random, env: Mapping[str, str]) -> Draft:
    event = {"type": rng.choice(["invoice.paid", "customer.created"]), "data": {"n": rng.random()}}
    return Draft(
        "POST",
        "/api/billing-webhook",
        [("content-type", "application/json"), ("webhook-id", f"msg_{rng.randrange(50)}")],
        json.dumps(event).encode(),
        sign=True,
    )


MANAGEMENT_TOKENS = f"{ADMIN_TOKEN}=ops@example.com:admin,{VIEWER_TOKEN}=oncall@example.com:viewer"


def jobs_admin_request(rng: random.Random, env: Mapping[str, str]) -> Draft:
    """The Job Inbox (``functions/jobs_admin.py``): lists, a record, cancel, replay, audit."""
    token = rng.choice([ADMIN_TOKEN, ADMIN_TOKEN, VIEWER_TOKEN])
    headers = [("authorization", f"Bearer {token}")]
    job = f"emails/{rng.choice([1, 2, 3, rng.randrange(1, 10**6)])}"
    choice = rng.randrange(9)
    if choice >= 7:
        return console_request(rng, env)  # the console's routes
    if choice == 0:
        return Draft("GET", "/api/jobs", [])  # the admin page
    if choice == 1:
        query = rng.choice(["", "limit=5", "queue=emails&state=dead", "limit=500&state=queued"])
        return Draft("GET", "/api/jobs/jobs", headers, query=query)
    if choice == 2:
        return Draft("GET", f"/api/jobs/jobs/{job}", headers)
    if choice == 3:
        return Draft("POST", f"/api/jobs/jobs/{job}/cancel", headers)
    if choice == 4:
        key = ("idempotency-key", idempotency_key(rng))
        return Draft("POST", f"/api/jobs/jobs/{job}/replay", [*headers, key])
    return Draft("GET", "/api/jobs/audit", headers, query=rng.choice(["", "limit=3"]))


from .http_agents import (  # noqa: E402 - they build Drafts of this module
    AGENT_LEASE_SECRET,
    AGENT_TOKEN,
    agent_build,
    agent_learn,
    agent_request,
    executor_build,
    executor_learn,
    executor_request,
)
from .http_console import console_build, console_request  # noqa: E402 - same

FUNCTION_REQUESTS = [
    order_request,
    drain_request,
    webhook_request,
    jobs_admin_request,
    console_request,
]


def serve_app(env: Mapping[str, str]) -> ASGIApp:
    """``drainpipe serve``: the health check in front of every function of ``api/``, as
    ``drainpipe dev`` serves them (each built from ``env``, not from ``os.environ``)."""
    functions = FunctionsApp.load(ROOT / "api")
    for route, app in functions.apps.items():
        assert isinstance(app, LazyApp)
        functions.apps[route] = LazyApp(app._build, app.needs, env=dict(env))
    return WithHealthCheck(functions)


def serve_request(rng: random.Random, env: Mapping[str, str]) -> Draft:
    if rng.random() < 0.15:
        return Draft(rng.choice(["GET", "HEAD", "POST"]), "/healthz", [])
    draft = rng.choice(FUNCTION_REQUESTS)(rng, env)
    if rng.random() < 0.2:  # paths Vercel would 404, and the rewrite's source
        draft.path = rng.choice(
            [
                "/api/drain/",
                "/api/_app",
                "/api/billing_webhook",
                "/",
                "/api",
                "/api/orders.py",
                "/api/jobs/",
                "/api/jobs/../orders",
            ]
        )
    return draft


ENTRIES: list[HttpEntry] = [
    HttpEntry("orders", "/api/orders", function_app("orders.py"), order_request),
    HttpEntry("drain", "/api/drain", function_app("drain.py"), drain_request),
    HttpEntry(
        "billing-webhook",
        "/api/billing-webhook",
        function_app("billing_webhook.py"),
        webhook_request,
    ),
    HttpEntry("jobs-admin", "/api/jobs", function_app("jobs_admin.py"), jobs_admin_request),
    # the console's routes on their own, /inboxes and the metrics token on, on table
    HttpEntry("console", "/api/jobs", console_build, console_request, "table"),
    HttpEntry("agent-inbox", "/v1", agent_build, agent_request, learn=agent_learn),
    HttpEntry("executor", "/", executor_build, executor_request, learn=executor_learn),
    HttpEntry("serve", "/", serve_app, serve_request, "table"),  # every function, on table
]


def entry_env(database_url: str) -> dict[str, str]:
    return {
        "DATABASE_URL": database_url,
        "CRON_SECRET": CRON_SECRET,
        "WEBHOOK_SECRET": WEBHOOK_SECRET,
        "DRAIN_BUDGET": "5",
        "MANAGEMENT_TOKENS": MANAGEMENT_TOKENS,
        "AGENT_TOKEN": AGENT_TOKEN,
        "AGENT_LEASE_SECRET": AGENT_LEASE_SECRET,
        "AGENT_BUDGET": "2",
        "DRAINPIPE_SCOPE_KEY": "chaos-idempotency-scope-key-0123",
    }


def by_name(name: str) -> HttpEntry:
    return next(entry for entry in ENTRIES if entry.name == name)


__all__ = ["ENTRIES", "Draft", "HttpEntry", "by_name", "entry_env", "signed_headers"]
