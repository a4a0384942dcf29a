"""The agent inbox's Python calls on both twins: the same inbox, subscription, hand-out,
settlements, peek, claim and raw body, with the same answers and errors; the sync
twin's ``next(wait=...)`` long-polls by sleeping."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

import drainpipe
from drainpipe import DrainpipeError, sync
from drainpipe.testing import Clock
from tests.agents.conftest import SECRET
from tests.sync.conftest import InThread, Twin


class Agents:
    """An ``AgentInboxes`` of either twin, its inbox handles driven alike."""

    def __init__(self, twin: Twin, db_url: str, clock: Clock) -> None:
        self.is_sync = twin.is_sync
        if twin.is_sync:
            self.agents: Any = InThread(sync.AgentInboxes(db_url, lease_secret=SECRET, now=clock))
        else:
            self.agents = drainpipe.AgentInboxes(db_url, lease_secret=SECRET, now=clock)

    def inbox(self, inbox_id: str) -> Any:
        handle = self.agents.target.inbox(inbox_id) if self.is_sync else self.agents.inbox(inbox_id)
        return InThread(handle) if self.is_sync else handle


@pytest.fixture
async def agents(twin: Twin, db_url: str) -> AsyncIterator[tuple[Agents, Any, Clock]]:
    clock = Clock()
    made = Agents(twin, db_url, clock)
    webhooks = drainpipe.WebhookInbox(db_url, source="billing", app="stripe")
    yield made, webhooks, clock
    await made.agents.close()
    await webhooks.close()


async def test_the_agent_inbox_calls_answer_alike(
    agents: tuple[Agents, Any, Clock],
) -> None:
    made, webhooks, clock = agents
    inbox_id = await made.agents.create("support", lease_seconds=60)
    assert inbox_id == await made.agents.create("support", lease_seconds=60)
    subscription = await made.agents.subscribe(inbox_id, "billing", types=["invoice.paid"])
    assert subscription.startswith("sub_")
    for n in range(4):
        await webhooks.store(id=f"m{n}", payload={"n": n}, type="invoice.paid")
        clock.advance(0.5)
    inbox = made.inbox(inbox_id)

    first, second = await inbox.next(max=2)
    assert (first.delivery, first.ack, first.view) == (1, "manual", {"n": 0})
    assert await made.agents.ack(first.id, first.lease_id, {"done": True}) is True
    assert await made.agents.ack(first.id, first.lease_id) is True  # the same ack again
    extended = await made.agents.settle("extend", second.id, second.lease_id, seconds=120)
    assert (extended.ok, extended.state) == (True, "leased")
    assert await made.agents.release(second.id, second.lease_id, delay_seconds=0) is True
    assert await made.agents.extend(second.id, second.lease_id, 30) is False  # released
    with pytest.raises(DrainpipeError) as unknown:
        await made.agents.ack("evt_999999", first.lease_id)
    assert unknown.value.code == "EVENT_NOT_FOUND"

    page = await inbox.events(limit=2)
    assert [item.lease_id for item in page.items] == [None, None]
    assert page.next_cursor is not None
    rest = await inbox.events(limit=2, cursor=page.next_cursor)
    assert len(page.items) + len(rest.items) == 3  # the acked event is gone
    claimed = await inbox.claim([page.items[0].id, first.id, "evt_999999"])
    assert [c.id for c in claimed.claimed] == [page.items[0].id]
    assert (claimed.unavailable, claimed.not_found) == ([first.id], ["evt_999999"])
    assert await made.agents.raw(first.id) == b'{"n":0}'
    [overview] = await made.agents.overview()
    assert (overview.name, overview.counts["acked"]) == ("support", 1)

    with pytest.raises(DrainpipeError) as mode:
        await inbox.next(ack="later", max=1)
    assert mode.value.code == "INVALID_PARAMETER"
    with pytest.raises(DrainpipeError) as missing:
        await made.inbox("inb_nope").next()
    assert missing.value.code == "INBOX_NOT_FOUND"


async def test_an_idempotent_pull_repeats_until_settled_on_both_twins(
    agents: tuple[Agents, Any, Clock],
) -> None:
    made, webhooks, clock = agents
    inbox_id = await made.agents.create("support")
    await made.agents.subscribe(inbox_id, "billing")
    await webhooks.store(id="m1", payload={"n": 1})
    clock.advance(1)
    inbox = made.inbox(inbox_id)
    [event] = await inbox.next(idempotency_key="pull-1")
    [again] = await inbox.next(idempotency_key="pull-1")
    assert (again.id, again.lease_id) == (event.id, event.lease_id)
    await made.agents.ack(event.id, event.lease_id)
    with pytest.raises(DrainpipeError) as consumed:
        await inbox.next(idempotency_key="pull-1")
    assert consumed.value.code == "PULL_CONSUMED"


def test_a_sync_long_poll_returns_once_an_event_arrives(db_url: str) -> None:
    with sync.AgentInboxes(db_url, lease_secret=SECRET) as agents:
        inbox_id = agents.create("support")
        agents.subscribe(inbox_id, "billing")
        inbox = agents.inbox(inbox_id)
        started = time.monotonic()
        assert inbox.next(wait=0.3) == []  # waited, then nothing
        assert 0.25 < time.monotonic() - started < 2

        def store_soon() -> None:
            time.sleep(0.2)
            with sync.WebhookInbox(db_url, source="billing") as webhooks:
                webhooks.store(id="late", payload={"n": 1})

        storing = threading.Thread(target=store_soon)
        storing.start()
        [event] = inbox.next(wait=5)
        storing.join()
        assert event.view == {"n": 1}
        assert agents.ack(event.id, event.lease_id) is True
        # a budget caps the wait, leaving a second to answer in
        started = time.monotonic()
        assert inbox.next(wait=30, budget=1.2) == []
        assert time.monotonic() - started < 1


def test_a_forged_lease_is_refused_without_touching_the_event(db_url: str) -> None:
    async def store() -> None:
        webhooks = drainpipe.WebhookInbox(db_url, source="billing")
        await webhooks.store(id="m1", payload={})
        await webhooks.close()

    with sync.AgentInboxes(db_url, lease_secret=SECRET) as agents:
        inbox_id = agents.create("support")
        agents.subscribe(inbox_id, "billing")
        asyncio.run(store())
        [event] = agents.inbox(inbox_id).next()
        other = sync.AgentInboxes(db_url, lease_secret="another-secret-0123456789")
        assert other.ack(event.id, event.lease_id) is False
        other.close()
        assert agents.ack(event.id, event.lease_id) is True
