"""Acks queued when a pull starts ride with it: one call, one transaction
(``agent_ack_next_v1``), every ack still fenced by its own lease, and
the acks answered even when the pull that carried them fails or is cancelled."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from drainpipe import AgentInboxes, DrainpipeError
from drainpipe.agents import AgentInbox, Envelope
from drainpipe.agents import statements as ops

from .conftest import SECRET, Setup


def _count_statements(agents: AgentInboxes) -> list[str]:
    """Every statement ``agents`` sends from now on, pulls and ack batches alike (a pull
    fetches on the inboxes' database, an ack batch on the fetch it was built with)."""
    sent: list[str] = []
    pull_fetch, ack_fetch = agents._db.fetch, agents._acks._fetch

    async def pull_counted(statement: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        sent.append(statement)
        return await pull_fetch(statement, params)

    async def ack_counted(statement: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        sent.append(statement)
        return await ack_fetch(statement, params)

    agents._db.fetch = pull_counted  # type: ignore[method-assign]
    agents._acks._fetch = ack_counted
    return sent


async def test_acks_made_before_a_pull_go_in_its_call_each_fenced(setup: Setup) -> None:
    for _ in range(6):
        await setup.store()
    agents = setup.agents
    inbox = agents.inbox(setup.inbox_id)
    current, twice, stale = await inbox.next(max=3)
    setup.clock.advance(61)  # the leases run out; stale's event goes to someone else
    [fresh] = (await inbox.claim([stale.id])).claimed
    [current] = (await inbox.claim([current.id])).claimed
    [twice] = (await inbox.claim([twice.id])).claimed
    sent = _count_statements(agents)
    acks = [
        agents.ack(current.id, current.lease_id or "", outcome={"done": 1}),
        agents.ack(twice.id, twice.lease_id or ""),
        agents.ack(twice.id, twice.lease_id or ""),
        agents.ack(stale.id, stale.lease_id or ""),
        agents.ack("evt_999999", current.lease_id or ""),
    ]
    pulled = await inbox.next(max=10)
    results = await asyncio.gather(*acks, return_exceptions=True)
    assert sent == [ops.ACK_NEXT]  # the acks and the pull: one call
    assert results[:4] == [True, True, True, False]
    assert isinstance(results[4], DrainpipeError) and results[4].code == "EVENT_NOT_FOUND"
    # the pull handed out the three events nobody held, none of the acked ones
    assert len(pulled) == 3
    assert {e.id for e in pulled}.isdisjoint({current.id, twice.id, stale.id})
    # the stale ack changed nothing: its event's holder still acks it
    assert await agents.ack(fresh.id, fresh.lease_id or "")
    page = await inbox.events()
    assert sorted(e.id for e in page.items) == sorted(e.id for e in pulled)


async def test_an_agent_loop_with_riding_acks_makes_one_call_a_pull(setup: Setup) -> None:
    for _ in range(25):
        await setup.store()
    agents = setup.agents
    inbox = agents.inbox(setup.inbox_id)
    await agents.settings(setup.inbox_id)
    sent = _count_statements(agents)
    seen: list[str] = []
    acks: list[Any] = []
    events = await inbox.next(max=10)
    while events:
        seen += [e.id for e in events]
        acks += [agents.ack(e.id, e.lease_id or "") for e in events]
        events = await inbox.next(max=10)
    assert all(await asyncio.gather(*acks))
    assert len(seen) == len(set(seen)) == 25
    # pulls of 10, 10, 5 and the empty one; the last three carry the acks before them
    assert sent == [ops.NEXT, ops.ACK_NEXT, ops.ACK_NEXT, ops.ACK_NEXT]
    assert (await inbox.events()).items == []


async def test_a_failed_call_fails_the_pull_and_its_acks_and_changes_nothing(
    setup: Setup,
) -> None:
    for _ in range(4):
        await setup.store()
    agents = setup.agents
    inbox = agents.inbox(setup.inbox_id)
    held = await inbox.next(max=2)
    fetch = agents._db.fetch

    async def broken(statement: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        raise DrainpipeError("network", "the database went away")

    agents._db.fetch = broken  # type: ignore[method-assign]
    acks = [agents.ack(e.id, e.lease_id or "") for e in held]
    with pytest.raises(DrainpipeError) as caught:
        await inbox.next(max=10)
    assert caught.value.kind == "network"
    results = await asyncio.gather(*acks, return_exceptions=True)
    assert all(isinstance(r, DrainpipeError) and r.kind == "network" for r in results)
    agents._db.fetch = fetch  # type: ignore[method-assign]
    # nothing was sent: the events are still held, the other two still due
    assert [await agents.ack(e.id, e.lease_id or "") for e in held] == [True, True]
    assert len(await inbox.next(max=10)) == 2


async def test_a_cancelled_pull_still_answers_the_acks_it_carried(setup: Setup) -> None:
    for _ in range(3):
        await setup.store()
    agents = setup.agents
    inbox = agents.inbox(setup.inbox_id)
    held = await inbox.next(max=2)
    sent = _count_statements(agents)
    acks: list[Any] = []

    async def ack_and_pull() -> list[Any]:
        # the acks and the pull in one step of one task, as an agent's loop makes them
        acks.extend(agents.ack(e.id, e.lease_id or "") for e in held)
        return await inbox.next(max=10)

    pull = asyncio.create_task(ack_and_pull())
    for _ in range(2):  # the pull takes the acks; then its call starts
        await asyncio.sleep(0)
    assert sent == [ops.ACK_NEXT]
    pull.cancel()
    with pytest.raises(asyncio.CancelledError):
        await pull
    assert await asyncio.gather(*acks) == [True, True]
    # the call went through: the third event was handed out (its lease runs out as usual)
    assert await inbox.next(max=10) == []
    setup.clock.advance(61)
    [again] = await inbox.next(max=10)
    assert again.delivery == 2


async def test_agents_with_riding_acks_racing_never_hold_the_same_event(setup: Setup) -> None:
    for _ in range(60):
        await setup.store()
    others = [AgentInboxes(setup.url, lease_secret=SECRET, now=setup.clock) for _ in range(3)]
    handed: Counter[str] = Counter()

    async def agent(agents: AgentInboxes) -> int:
        inbox = agents.inbox(setup.inbox_id)
        acks: list[Any] = []
        events = await inbox.next(max=4)
        while events:
            handed.update(e.id for e in events)
            acks += [agents.ack(e.id, e.lease_id or "") for e in events]
            events = await inbox.next(max=4)
        return sum(await asyncio.gather(*acks))

    try:
        for other in others:
            await other.settings(setup.inbox_id)  # every pool connected before the race
        acked = await asyncio.wait_for(
            asyncio.gather(*(agent(a) for a in [setup.agents, *others])), timeout=30
        )
    finally:
        for other in others:
            await other.close()
    assert sum(acked) == 60 == len(handed)
    assert set(handed.values()) == {1}  # nobody was handed an event another held
    assert (await setup.agents.inbox(setup.inbox_id).events()).items == []


async def _ack_and_pull(
    agents: AgentInboxes, inbox: AgentInbox, held: list[Envelope]
) -> tuple[list[bool], list[Envelope]]:
    acks = [agents.ack(e.id, e.lease_id or "") for e in held]
    pulled = await inbox.next(max=10)
    return await asyncio.gather(*acks), pulled


async def test_riding_acks_with_crossed_stale_leases_never_deadlock(setup: Setup) -> None:
    """As two ack batches with crossed leases (test_races), but each batch rides with a
    pull: the pulls skip what is locked and never wait, so neither call waits for the
    other."""
    other = AgentInboxes(setup.url, lease_secret=SECRET, now=setup.clock)
    try:
        await other.settings(setup.inbox_id)
        x, y = setup.agents.inbox(setup.inbox_id), other.inbox(setup.inbox_id)
        for _ in range(8):
            for _ in range(4):
                await setup.store()
            [a_stale] = await x.next()
            [b_stale] = await y.next()
            setup.clock.advance(61)
            [b_current] = (await x.claim([b_stale.id])).claimed
            [a_current] = (await y.claim([a_stale.id])).claimed
            x_sent, y_sent = _count_statements(setup.agents), _count_statements(other)
            (x_acked, x_pulled), (y_acked, y_pulled) = await asyncio.wait_for(
                asyncio.gather(
                    _ack_and_pull(setup.agents, x, [a_stale, b_current]),
                    _ack_and_pull(other, y, [b_stale, a_current]),
                ),
                timeout=20,
            )
            assert x_sent == y_sent == [ops.ACK_NEXT]
            assert x_acked == y_acked == [False, True]
            assert len(x_pulled) + len(y_pulled) == 2
            for event in [*x_pulled, *y_pulled]:
                owner = setup.agents if event in x_pulled else other
                assert await owner.ack(event.id, event.lease_id or "")
    finally:
        await other.close()
