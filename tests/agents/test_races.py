"""Real connections racing: agents on separate pools never hold the same event, a 50-way
concurrent pull spreads events without duplicates, settlements racing a re-delivery leave
one winner, and a long poll wakes within 200 ms of an event's arrival."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import httpx
from psycopg_pool import AsyncConnectionPool

from drainpipe import AgentInboxes, Principal, WebhookInbox, bearer_tokens
from tests.agents.conftest import SECRET, Setup

TOKEN = "race-token-0123456789abcdef"


async def test_two_agents_racing_never_hold_the_same_event(setup: Setup) -> None:
    for _ in range(40):
        await setup.store()
    other = AgentInboxes(setup.url, lease_secret=SECRET, now=setup.clock)
    held: dict[str, list[str]] = {"a": [], "b": []}

    async def agent(name: str, agents: AgentInboxes) -> None:
        inbox = agents.inbox(setup.inbox_id)
        while events := await inbox.next(max=3):
            for event in events:
                held[name].append(event.id)
                assert event.lease_id is not None
                assert await agents.ack(event.id, event.lease_id)

    try:
        await other.settings(setup.inbox_id)  # both pools connected before the race
        await asyncio.gather(agent("a", setup.agents), agent("b", other))
    finally:
        await other.close()
    assert set(held["a"]).isdisjoint(held["b"])
    assert len(held["a"]) + len(held["b"]) == 40 == len(set(held["a"]) | set(held["b"]))
    assert held["a"] and held["b"]  # both got work: the hand-outs skip, they do not wait


async def test_a_fifty_way_concurrent_pull_spreads_events_without_duplicates(setup: Setup) -> None:
    for _ in range(120):
        await setup.store()
    pool = AsyncConnectionPool(
        setup.url, min_size=20, max_size=20, open=False, kwargs={"autocommit": True}
    )
    await pool.open()
    agents = AgentInboxes(pool, lease_secret=SECRET, now=setup.clock)
    app = agents.app(authorize=bearer_tokens({TOKEN: Principal("racer")}), budget=10)
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://agents",
            headers={"authorization": f"Bearer {TOKEN}"}, timeout=30,
        ) as client:  # fmt: skip

            async def pull() -> list[str]:
                answer = await client.get(f"/v1/agent/inbox/{setup.inbox_id}/next?max=2")
                assert answer.status_code == 200, answer.text
                return [event["id"] for event in answer.json()["events"]]

            results = await asyncio.gather(*(pull() for _ in range(50)))
    finally:
        await agents.close()
        await pool.close()
    counts = Counter(event for result in results for event in result)
    assert max(counts.values()) == 1  # no event handed to two pulls
    assert sum(counts.values()) == 100  # 50 pulls of 2, from 120 events
    assert sum(1 for result in results if len(result) == 2) == 50


async def test_an_ack_racing_the_redelivery_of_its_event_leaves_one_holder(setup: Setup) -> None:
    await setup.store()
    inbox = setup.agents.inbox(setup.inbox_id)
    for _ in range(5):
        [held] = await inbox.next()
        setup.clock.advance(61)  # its lease runs out
        late_ack, fresh = await asyncio.gather(
            setup.agents.ack(held.id, held.lease_id or ""), inbox.next()
        )
        if late_ack:
            assert fresh == []  # acked first: done, not handed out again
            return
        [again] = fresh  # handed out again first: the late ack changed nothing
        assert again.delivery == held.delivery + 1
        assert await setup.agents.release(again.id, again.lease_id or "")
        setup.clock.advance(1)


async def test_a_long_poll_answers_within_200_ms_of_an_arrival(db_url: str) -> None:
    agents = AgentInboxes(db_url, lease_secret=SECRET, listen=True)
    webhooks = WebhookInbox(db_url, source="billing")
    inbox_id = await agents.create("fast")
    await agents.subscribe(inbox_id, "billing")
    app = agents.app(authorize=bearer_tokens({TOKEN: Principal("poller")}), budget=25)
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://agents",
            headers={"authorization": f"Bearer {TOKEN}"}, timeout=30,
        ) as client:  # fmt: skip
            for round_ in range(3):
                poll = asyncio.create_task(client.get(f"/v1/agent/inbox/{inbox_id}/next?wait=10"))
                await asyncio.sleep(1.3)  # the poll is past its 1 s backoff steps by now
                assert not poll.done()
                await webhooks.store(id=f"arrival-{round_}", payload={"n": round_})
                stored_at = time.monotonic()
                answer = await poll
                took = time.monotonic() - stored_at
                assert answer.status_code == 200 and len(answer.json()["events"]) == 1
                assert took < 0.2, f"woke {took * 1000:.0f} ms after the arrival"
    finally:
        await agents.close()
        await webhooks.close()


async def test_acks_awaited_together_are_each_fenced_by_their_own_lease(setup: Setup) -> None:
    # one batch (agents/inboxes.py, one agent_ack_many_v1 call): a current lease, the same ack
    # twice, a lease re-delivered since, a forged lease and an unknown event
    for _ in range(4):
        await setup.store()
    inbox = setup.agents.inbox(setup.inbox_id)
    current, twice, stale = await inbox.next(max=3)
    setup.clock.advance(61)  # all three leases run out; stale's event goes to someone else
    [fresh] = (await inbox.claim([stale.id])).claimed
    assert fresh.delivery == stale.delivery + 1
    [forged_event] = await inbox.next()
    forged = (forged_event.lease_id or "")[:-3] + "AAA"
    ack = setup.agents.ack
    results = await asyncio.gather(
        ack(current.id, current.lease_id or "", outcome={"n": 1}),
        ack(twice.id, twice.lease_id or ""),
        ack(twice.id, twice.lease_id or ""),
        ack(stale.id, stale.lease_id or ""),
        ack(forged_event.id, forged),
        ack("evt_999999", current.lease_id or ""),
        return_exceptions=True,
    )
    assert results[:5] == [True, True, True, False, False]
    assert getattr(results[5], "code", None) == "EVENT_NOT_FOUND"
    # the stale ack changed nothing: the new holder still acks; the forged one too
    assert await ack(fresh.id, fresh.lease_id or "")
    assert await ack(forged_event.id, forged_event.lease_id or "")
    assert await ack(current.id, current.lease_id or "")  # a repeat, alone, still True
    assert await inbox.next() == []


async def test_ack_batches_racing_on_the_same_events_settle_each_once(setup: Setup) -> None:
    for _ in range(30):
        await setup.store()
    other = AgentInboxes(setup.url, lease_secret=SECRET, now=setup.clock)
    try:
        await other.settings(setup.inbox_id)
        events = []
        inbox = setup.agents.inbox(setup.inbox_id)
        while batch := await inbox.next(max=10):
            events += batch
        # two pools ack the same 30 events in opposite orders at once: no deadlock, each
        # ack True (a repeat with the same lease), and every event acked
        leases = [(e.id, e.lease_id or "") for e in events]
        a, b = await asyncio.wait_for(
            asyncio.gather(
                asyncio.gather(*(setup.agents.ack(i, lease) for i, lease in leases)),
                asyncio.gather(*(other.ack(i, lease) for i, lease in reversed(leases))),
            ),
            timeout=20,
        )
        assert all(a) and all(b) and len(a) == len(b) == 30
        setup.clock.advance(120)
        assert await inbox.next(max=10) == []
    finally:
        await other.close()


async def test_ack_batches_with_crossed_stale_leases_never_deadlock(setup: Setup) -> None:
    """Two holders, each with the current lease of one event and a stale lease of the
    other, ack both at once. Each batch's UPDATE locks its current event; the stale one is
    then answered without a lock (a stale lease never becomes current again), so neither
    batch waits for the other's row: no deadlock."""
    other = AgentInboxes(setup.url, lease_secret=SECRET, now=setup.clock)
    try:
        await other.settings(setup.inbox_id)
        x, y = setup.agents.inbox(setup.inbox_id), other.inbox(setup.inbox_id)
        for _ in range(12):
            await setup.store()
            await setup.store()
            [a_stale] = await x.next()  # delivery 1 of A to x, of B to y
            [b_stale] = await y.next()
            setup.clock.advance(61)  # both leases run out; each event goes to the other
            [b_current] = (await x.claim([b_stale.id])).claimed
            [a_current] = (await y.claim([a_stale.id])).claimed
            results = await asyncio.wait_for(
                asyncio.gather(
                    asyncio.gather(
                        setup.agents.ack(a_stale.id, a_stale.lease_id or ""),
                        setup.agents.ack(b_current.id, b_current.lease_id or ""),
                    ),
                    asyncio.gather(
                        other.ack(b_stale.id, b_stale.lease_id or ""),
                        other.ack(a_current.id, a_current.lease_id or ""),
                    ),
                ),
                timeout=20,
            )
            assert results == [[False, True], [False, True]]
    finally:
        await other.close()
