"""The agent inbox's HTTP API (docs/reference.md, section 11), deployed as ``/api/agent_inbox`` with
vercel.json rewriting ``/v1/:path*`` to it: ``GET /v1/agent/inbox/{id}/next``, ``/events``,
``POST .../claim``, ``POST /v1/events/{id}/ack|release|extend``, ``GET /v1/events/{id}/raw``.

The WebSocket stream (``/v1/agent/inbox/{id}/stream``) needs a process that holds the
socket: Vercel functions do not, so it answers only where this file runs on uvicorn
(``drainpipe serve``, ``drainpipe dev``, examples/container).

Environment: ``DATABASE_URL``; ``AGENT_TOKEN`` (the bearer token agents send, at least 16
characters); ``AGENT_LEASE_SECRET`` (signs lease ids and cursors, at least 16 characters, the
same on every instance); optional ``AGENT_BUDGET`` (seconds a long poll may use, default 25,
under the function's ``maxDuration`` of 30) and ``AGENT_LISTEN=1`` where a process lives on
(``drainpipe serve``, ``drainpipe dev``: long polls then wake by NOTIFY; never on Vercel).

The inbox ``billing-agent`` is created and subscribed to the billing webhooks when a server
starts (ASGI lifespan startup: ``drainpipe dev`` and ``drainpipe serve`` print its id with
their routes), so webhooks that arrive before any agent calls reach it. Where no lifespan
runs, the first request creates it and logs its id.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import sys
from collections.abc import Mapping
from typing import Any

from drainpipe import AgentInboxes, Principal, bearer_tokens
from drainpipe.serverless import ASGIApp, Closer, Database, LazyApp, NotConfigured

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # no pathlib: cold start
if _ROOT not in sys.path:  # imported by its path (Vercel, drainpipe dev): find functions._app
    sys.path.insert(0, _ROOT)
from functions._app import ensure_agent_inbox  # noqa: E402

log = logging.getLogger("drainpipe.functions")


class _EnsureInbox:
    """Creates the example's inbox once: at server startup, else before the first request."""

    def __init__(self, agents: AgentInboxes, app: Any) -> None:
        self.agents, self.app = agents, app
        self.ready: asyncio.Lock | None = None
        self.inbox_id: str | None = None

    async def ensure(self) -> tuple[str, bool]:
        """The inbox's id, and whether this call created (or found) it."""
        if self.inbox_id is not None:
            return self.inbox_id, False
        self.ready = self.ready or asyncio.Lock()
        async with self.ready:
            if self.inbox_id is not None:
                return self.inbox_id, False
            self.inbox_id = await ensure_agent_inbox(self.agents)
            return self.inbox_id, True

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self.inbox_id is None and scope["type"] in ("http", "websocket"):
            inbox_id, now = await self.ensure()
            if now:
                log.info("agent inbox billing-agent is %s (subscribed to billing)", inbox_id)
        await self.app(scope, receive, send)


class _AgentInboxFunction(LazyApp):
    async def startup(self) -> str | None:
        """Build the app and create the inbox as the server starts; the line to show.
        Unconfigured (no ``AGENT_TOKEN`` ...), it does nothing: requests then say why."""
        app = await self.built()
        if not isinstance(app, _EnsureInbox):
            return None
        inbox_id, _ = await app.ensure()
        return f"agent inbox billing-agent is {inbox_id} (subscribed to billing)"


def build(env: Mapping[str, str]) -> tuple[ASGIApp, Closer | None]:
    text = env.get("AGENT_BUDGET") or "25"
    try:
        budget = float(text)
    except ValueError:
        budget = math.nan
    if not math.isfinite(budget) or not 1 < budget <= 900:
        raise NotConfigured(f"AGENT_BUDGET must be seconds between 1 and 900, not {text!r}")
    try:
        authorize = bearer_tokens({env["AGENT_TOKEN"]: Principal("agent")})
        database = Database(env["DATABASE_URL"])
        agents = AgentInboxes(
            database,
            lease_secret=env["AGENT_LEASE_SECRET"],
            listen=env.get("AGENT_LISTEN") == "1",
        )
    except ValueError as exc:  # the message names what is wrong, never the secret itself
        raise NotConfigured(f"AGENT_TOKEN / AGENT_LEASE_SECRET: {exc}") from exc
    return _EnsureInbox(agents, agents.app(authorize=authorize, budget=budget)), agents.close


app = _AgentInboxFunction(build, needs=("DATABASE_URL", "AGENT_TOKEN", "AGENT_LEASE_SECRET"))
