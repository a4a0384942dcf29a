"""Fixtures of the agent inbox tests: an ``AgentInboxes`` on a fresh database whose clock
the test moves, an inbox subscribed to the ``billing`` webhook source, and a way to store
webhooks into it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from drainpipe import AgentInboxes, WebhookInbox
from drainpipe.testing import Clock

SECRET = "lease-secret-of-the-tests-0123456789"


@dataclass
class Setup:
    agents: AgentInboxes
    webhooks: WebhookInbox
    clock: Clock
    inbox_id: str
    url: str
    stored: int = 0

    async def store(self, payload: Any = None, *, type: str = "invoice.paid", **extra: Any) -> None:
        """Store one webhook of the billing source (and move the clock past its arrival)."""
        self.stored += 1
        body = {"n": self.stored} if payload is None else payload
        await self.webhooks.store(id=f"m{self.stored}", payload=body, type=type, **extra)
        self.clock.advance(0.5)


@pytest.fixture
async def setup(db_url: str) -> AsyncIterator[Setup]:
    clock = Clock()
    agents = AgentInboxes(db_url, lease_secret=SECRET, now=clock)
    webhooks = WebhookInbox(db_url, source="billing", app="stripe")
    inbox_id = await agents.create("support", lease_seconds=60)
    await agents.subscribe(inbox_id, "billing")
    try:
        yield Setup(agents, webhooks, clock, inbox_id, db_url)
    finally:
        await agents.close()
        await webhooks.close()
