"""``agents.ack`` returns its batch's future, which is also a coroutine: every way of running
an ``async def`` works on it, and ``asyncio.gather`` waits on it without a task per ack."""

from __future__ import annotations

import asyncio
import inspect

import pytest

from drainpipe import AgentInboxes, DrainpipeError

from .conftest import SECRET, Setup


async def _pulled(setup: Setup, count: int) -> list[tuple[str, str]]:
    for _ in range(count):
        await setup.store()
    events = await setup.agents.inbox(setup.inbox_id).next(max=count)
    assert len(events) == count
    return [(event.id, event.lease_id or "") for event in events]


async def _states(setup: Setup) -> list[str]:
    return [item.ack or "-" for item in (await setup.agents.inbox(setup.inbox_id).events()).items]


async def test_an_ack_runs_as_a_coroutine_in_every_way_an_async_def_does(setup: Setup) -> None:
    (a_id, a_lease), (b_id, b_lease), (c_id, c_lease), (d_id, d_lease) = await _pulled(setup, 4)
    agents = setup.agents
    pending = agents.ack(a_id, a_lease)
    assert asyncio.iscoroutine(pending) and asyncio.isfuture(pending)
    assert inspect.isawaitable(pending)
    assert await pending is True
    assert await asyncio.create_task(agents.ack(b_id, b_lease)) is True
    assert await asyncio.wait_for(agents.ack(c_id, c_lease), 5) is True
    [done] = await asyncio.gather(agents.ack(d_id, d_lease))
    assert done is True
    # the same ack again, and a stale lease: through a task too
    assert await asyncio.create_task(agents.ack(a_id, a_lease)) is True
    assert await _states(setup) == []  # every event acked: none open


async def test_a_gathered_pull_is_acked_in_one_statement_each_fenced(setup: Setup) -> None:
    leases = await _pulled(setup, 5)
    agents = setup.agents
    sent: list[str] = []
    fetch = agents._acks._fetch

    async def counting(statement: str, params: tuple[object, ...]) -> list[tuple[object, ...]]:
        sent.append(statement)
        return await fetch(statement, params)

    agents._acks._fetch = counting
    stale = leases[1][1][:-3] + ("AAA" if not leases[1][1].endswith("AAA") else "BBB")
    quoted = [leases[0], (leases[1][0], stale), *leases[2:]]
    results = await asyncio.gather(*(agents.ack(event_id, lease) for event_id, lease in quoted))
    assert results == [True, False, True, True, True]
    assert len(sent) == 1
    [still_open] = (await setup.agents.inbox(setup.inbox_id).events()).items
    assert still_open.id == leases[1][0]


async def test_an_unknown_event_raises_at_the_await_and_a_bad_argument_at_the_call(
    setup: Setup,
) -> None:
    [(event_id, lease)] = await _pulled(setup, 1)
    agents = setup.agents
    unknown = agents.ack("evt_999999", lease)  # a well-formed id: only the database knows
    with pytest.raises(DrainpipeError) as caught:
        await unknown
    assert caught.value.status == 404 and caught.value.code == "EVENT_NOT_FOUND"
    with pytest.raises(DrainpipeError) as malformed:
        agents.ack("not-an-event", lease)
    assert malformed.value.code == "EVENT_NOT_FOUND"
    with pytest.raises(DrainpipeError) as too_big:
        agents.ack(event_id, lease, outcome={"text": "x" * 70_000})
    assert too_big.value.status == 400
    # in a gather, the unknown event fails its own ack only
    results = await asyncio.gather(
        agents.ack(event_id, lease), agents.ack("evt_999998", lease), return_exceptions=True
    )
    assert results[0] is True and isinstance(results[1], DrainpipeError)


async def test_a_cancelled_waiter_leaves_its_ack_to_the_batch(setup: Setup) -> None:
    """Cancelling what awaits an ack cannot unsend it: the ack was queued at the call (as a
    request sent is sent). The batch skips the cancelled future and answers the others."""
    (a_id, a_lease), (b_id, b_lease) = await _pulled(setup, 2)
    agents = setup.agents
    waiter = asyncio.create_task(agents.ack(a_id, a_lease))
    other = agents.ack(b_id, b_lease)
    await asyncio.sleep(0)  # the task waits on the ack's future now
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert await other is True
    assert await agents.ack(a_id, a_lease) is True  # it was acked: the same ack again
    assert await _states(setup) == []


async def test_a_database_error_fails_every_ack_of_its_batch(setup: Setup) -> None:
    leases = await _pulled(setup, 3)
    agents = setup.agents

    async def broken(statement: str, params: tuple[object, ...]) -> list[tuple[object, ...]]:
        raise DrainpipeError("network", "the database went away")

    fetch, agents._acks._fetch = agents._acks._fetch, broken
    results = await asyncio.gather(
        *(agents.ack(event_id, lease) for event_id, lease in leases), return_exceptions=True
    )
    assert all(
        isinstance(result, DrainpipeError) and result.kind == "network" for result in results
    )
    agents._acks._fetch = fetch
    assert [await agents.ack(event_id, lease) for event_id, lease in leases] == [True] * 3


async def test_an_ack_made_outside_a_loop_runs_under_asyncio_run(setup: Setup) -> None:
    """Made where no loop runs (``asyncio.run(agents.ack(...))`` in a script), the ack is
    a plain coroutine, queued once the loop runs it; its arguments are still checked at
    the call."""
    [(event_id, lease)] = await _pulled(setup, 1)

    def in_a_script() -> tuple[bool, bool]:
        agents = AgentInboxes(setup.url, lease_secret=SECRET, now=setup.clock)
        with pytest.raises(DrainpipeError):
            agents.ack("not-an-event", lease)
        pending = agents.ack(event_id, lease)
        is_future = asyncio.isfuture(pending)

        async def ack_and_close() -> bool:
            try:
                return await pending
            finally:
                await agents.close()

        return is_future, asyncio.run(ack_and_close())

    assert await asyncio.to_thread(in_a_script) == (False, True)
    assert await _states(setup) == []
