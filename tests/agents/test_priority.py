"""The priority order over the agent inbox's indexes: the events of priority above 0, then
0 (from the due index), then below 0, each oldest due first, across pulls that end inside a
step and pulls that span them, under releases that move due times, and racing pulls."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import psycopg

from tests.agents.conftest import Setup

SEVERITIES: list[Any] = [None, 2, -1, 2, 0, -3, 5, "x", -1, "7.5", 0]


async def ordered_inbox(setup: Setup, name: str) -> tuple[str, list[str]]:
    """An inbox ranked by data.severity with SEVERITIES stored in this order; returns its id
    and the event ids in the expected priority order."""
    inbox_id = await setup.agents.create(name, priority_path="data.severity", lease_seconds=30)
    await setup.agents.subscribe(inbox_id, "billing")
    for severity in SEVERITIES:
        await setup.store({"data": {"severity": severity}})
    ids = [item.id for item in (await setup.agents.inbox(inbox_id).events()).items]
    rank = [float(s) if isinstance(s, int | str) and s != "x" else 0.0 for s in SEVERITIES]
    expected = [ids[i] for i in sorted(range(len(ids)), key=lambda i: (-rank[i], i))]
    return inbox_id, expected


async def test_priority_pulls_take_above_zero_then_zero_then_below(setup: Setup) -> None:
    inbox_id, expected = await ordered_inbox(setup, "ranked")
    inbox = setup.agents.inbox(inbox_id)
    pulled: list[str] = []
    while batch := await inbox.next(order="priority", max=3):
        pulled += [event.id for event in batch]
    assert pulled == expected
    # one pull spanning all three steps
    other_id, other_expected = await ordered_inbox(setup, "ranked-at-once")
    spanning = await setup.agents.inbox(other_id).next(order="priority", max=10)
    assert [event.id for event in spanning] == other_expected[:10]


async def test_a_released_event_keeps_its_priority_and_goes_behind_its_equals(
    setup: Setup,
) -> None:
    inbox_id, expected = await ordered_inbox(setup, "ranked-released")
    inbox = setup.agents.inbox(inbox_id)
    [top] = await inbox.next(order="priority")
    assert top.id == expected[0]  # severity 7.5
    [second] = await inbox.next(order="priority")
    assert second.id == expected[1]  # severity 5
    assert await setup.agents.release(second.id, second.lease_id or "", delay_seconds=5)
    assert await setup.agents.release(top.id, top.lease_id or "")
    # the released 7.5 is due again at once: first again; the 5 waits out its delay
    again = await inbox.next(order="priority", max=10)
    assert [e.id for e in again] == [expected[0], *expected[2:]]
    assert again[0].delivery == 2
    setup.clock.advance(6)
    [late] = await inbox.next(order="priority", max=10)
    assert (late.id, late.delivery) == (expected[1], 2)


async def test_racing_priority_pulls_never_hand_out_an_event_twice(setup: Setup) -> None:
    inbox_id, expected = await ordered_inbox(setup, "ranked-racing")
    inbox = setup.agents.inbox(inbox_id)
    batches = await asyncio.gather(*(inbox.next(order="priority", max=2) for _ in range(8)))
    handed = Counter(event.id for batch in batches for event in batch)
    assert set(handed) == set(expected) and max(handed.values()) == 1


async def test_only_events_of_priority_other_than_zero_are_in_the_ranked_index(
    setup: Setup,
) -> None:
    await ordered_inbox(setup, "ranked-index")
    async with await psycopg.AsyncConnection.connect(setup.url) as conn:
        rows = await (
            await conn.execute(
                "SELECT indexname, indexdef FROM pg_indexes"
                " WHERE schemaname = 'drainpipe' AND tablename = 'agent_events'"
            )
        ).fetchall()
    indexes = dict(rows)
    assert "agent_events_priority_idx" not in indexes and "agent_events_inbox_idx" not in indexes
    assert "priority <> " in indexes["agent_events_ranked_idx"]
    assert "state = ANY" in indexes["agent_events_open_idx"]
