"""Every HTTP entry the chaos fuzz sends requests to: ONE list, :data:`ENTRIES`.

An entry is an ASGI app built the way it is deployed, and a maker of plausible requests
for it (the fuzz mutates these, tests/chaos/http_fuzz.py). A new HTTP app joins the fuzz
with one more :class:`HttpEntry` here: a name, its path, ``build(env)`` returning the app
(``env`` holds ``DATABASE_URL`` and the secrets below) and ``request(rng, env)`` returning a
:class:`Draft` that a well-behaved client could send (the fuzz then breaks it).
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
CRON_SECRET = "chaos-cron-secret"
WEBHOOK_KEY = b"drainpipe-chaos-webhook-key-01"
WEBHOOK_SECRET = "whsec_" + base64.b64encode(WEBHOOK_KEY).decode()
# a few keys only, so the fuzz replays, races and conflicts on the same key
IDEMPOTENCY_KEYS = [f"order-{n}" for n in range(6)]


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


FUNCTION_REQUESTS = [order_request, drain_request, webhook_request]


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
            ["/api/drain/", "/api/_app", "/api/billing_webhook", "/", "/api", "/api/orders.py"]
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
    HttpEntry("serve", "/", serve_app, serve_request),
]


def entry_env(database_url: str) -> dict[str, str]:
    return {
        "DATABASE_URL": database_url,
        "CRON_SECRET": CRON_SECRET,
        "WEBHOOK_SECRET": WEBHOOK_SECRET,
        "DRAIN_BUDGET": "5",
    }


def by_name(name: str) -> HttpEntry:
    return next(entry for entry in ENTRIES if entry.name == name)


__all__ = ["ENTRIES", "Draft", "HttpEntry", "by_name", "entry_env", "signed_headers"]
