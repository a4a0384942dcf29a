"""The rules of docs/reference.md section 11 through the Python API, on real Postgres, time moved
through ``now=`` (``p_now``) instead of waited for."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from drainpipe import DrainpipeError
from drainpipe.agents import UNTRUSTED
from tests.agents.conftest import Setup


async def states(url: str) -> dict[int, tuple[str, int]]:
    async with await psycopg.AsyncConnection.connect(url) as conn:
        rows = await (
            await conn.execute("SELECT id, state, delivery FROM drainpipe.agent_events")
        ).fetchall()
    return {row[0]: (row[1], row[2]) for row in rows}


async def test_a_stored_webhook_becomes_an_event_with_the_envelope_of_section_11(
    setup: Setup,
) -> None:
    await setup.webhooks.store(
        id="m1", payload={"data": {"amount": 4900}}, type="invoice.paid", verified=True
    )
    setup.clock.advance(1)
    [event] = await setup.agents.inbox(setup.inbox_id).next()
    body = event.to_json()
    assert set(body) == {
        "id", "lease_id", "delivery", "ack", "source", "type", "received_at", "verified",
        "view", "truncated", "untrusted",
    }  # fmt: skip
    assert body["id"].startswith("evt_") and body["lease_id"].startswith("lse_")
    assert (body["delivery"], body["ack"], body["type"]) == (1, "manual", "invoice.paid")
    assert body["source"]["name"] == "billing" and body["source"]["app"] == "stripe"
    assert body["source"]["id"].startswith("src_")
    assert body["verified"] is True and body["truncated"] is False
    assert body["view"] == {"data": {"amount": 4900}}
    assert body["untrusted"] == UNTRUSTED
    assert body["received_at"].endswith("Z")


async def test_stored_messages_are_unverified_unless_said(setup: Setup) -> None:
    await setup.store()
    [event] = await setup.agents.inbox(setup.inbox_id).next()
    assert event.verified is False


async def test_fifo_lifo_and_priority_orders(setup: Setup) -> None:
    inbox_id = await setup.agents.create("ordered", priority_path="data.severity", lease_seconds=30)
    await setup.agents.subscribe(inbox_id, "billing")
    for severity in (1, 5, "3", None, "high"):
        await setup.store({"data": {"severity": severity}})
    inbox = setup.agents.inbox(inbox_id)
    peek = (await inbox.events()).items
    ids = [item.id for item in peek]
    assert [e.id for e in await inbox.next(order="lifo")] == [ids[-1]]
    assert [e.id for e in await inbox.next(order="priority", max=2)] == [ids[1], ids[2]]
    assert [e.id for e in await inbox.next(order="fifo", max=10)] == [ids[0], ids[3]]


async def test_pulls_of_many_keep_their_order_and_leave_spent_events_out(setup: Setup) -> None:
    # one statement picks, hands out and reads the bodies: the answer
    # keeps the pick's order, and a spent event among those picked is ended, not handed
    inbox_id = await setup.agents.create("many", max_attempts=2, lease_seconds=30)
    await setup.agents.subscribe(inbox_id, "billing")
    for n in range(6):
        await setup.store({"n": n}, type="odd" if n % 2 else "even")
    inbox = setup.agents.inbox(inbox_id)
    ids = [item.id for item in (await inbox.events()).items]
    newest = await inbox.next(order="lifo", max=3)
    assert [e.id for e in newest] == [ids[5], ids[4], ids[3]]
    assert [e.view for e in newest] == [{"n": 5}, {"n": 4}, {"n": 3}]
    oldest = await inbox.next(order="fifo", max=2, type="odd")
    assert [e.id for e in oldest] == [ids[1]]  # 3 and 5 are held
    setup.clock.advance(31)  # the leases ran out: 1, 3, 4, 5 are due from their (one) end
    again = await inbox.next(order="fifo", max=10)
    assert [e.id for e in again] == [ids[0], ids[2], ids[1], ids[3], ids[4], ids[5]]
    assert [e.delivery for e in again] == [1, 1, 2, 2, 2, 2]
    setup.clock.advance(31)  # 0 and 2 are due on a first delivery, the others are spent
    last = await inbox.next(order="lifo", max=10)
    assert [e.id for e in last] == [ids[2], ids[0]]
    found = await states(setup.url)
    spent = {ids[n] for n in (1, 3, 4, 5)}
    assert {f"evt_{i}": state for i, (state, _) in found.items() if f"evt_{i}" in spent} == {
        event_id: "failed" for event_id in spent
    }


async def test_where_types_and_correlation_filters(setup: Setup) -> None:
    inbox_id = await setup.agents.create("paid-only")
    sub = await setup.agents.subscribe(
        inbox_id, "billing", types=["invoice.paid"], where={"data.status": "paid"},
        correlation_path="data.customer",
    )  # fmt: skip
    assert await setup.agents.subscribe(
        inbox_id, "billing", types=["invoice.paid"], where={"data.status": "paid"},
        correlation_path="data.customer",
    ) == sub  # fmt: skip
    await setup.store({"data": {"status": "paid", "customer": "c1"}})
    await setup.store({"data": {"status": "open", "customer": "c1"}})
    await setup.store({"data": {"status": "paid", "customer": "c2"}}, type="invoice.other")
    await setup.store({"data": {"status": "paid", "customer": "c2"}})
    inbox = setup.agents.inbox(inbox_id)
    assert len((await inbox.events()).items) == 2
    [event] = await inbox.next(correlation="c2", max=10)
    assert event.view["data"]["customer"] == "c2"
    assert await inbox.next(subscription="sub_other") == []
    assert await inbox.next(source="elsewhere") == []
    [first] = await inbox.next(source=event.source.id, type="invoice.paid", subscription=sub)
    assert first.view["data"]["customer"] == "c1"


async def test_ack_is_fenced_by_the_lease_and_idempotent(setup: Setup) -> None:
    await setup.store()
    agents, inbox = setup.agents, setup.agents.inbox(setup.inbox_id)
    [event] = await inbox.next()
    assert event.lease_id is not None
    assert await agents.ack(event.id, event.lease_id, outcome={"done": True}) is True
    assert await agents.ack(event.id, event.lease_id) is True  # the same ack again
    assert await agents.release(event.id, event.lease_id) is False
    assert await agents.extend(event.id, event.lease_id, 30) is False
    forged = event.lease_id[:-3] + ("AAA" if not event.lease_id.endswith("AAA") else "BBB")
    assert await agents.ack(event.id, forged) is False
    with pytest.raises(DrainpipeError) as caught:
        await agents.ack("evt_999999", event.lease_id)
    assert caught.value.status == 404 and caught.value.code == "EVENT_NOT_FOUND"


async def test_a_stale_lease_after_expiry_and_redelivery_is_refused_and_changes_nothing(
    setup: Setup,
) -> None:
    await setup.store()
    agents, inbox = setup.agents, setup.agents.inbox(setup.inbox_id)
    [first] = await inbox.next()
    setup.clock.advance(61)  # the 60 s lease ran out
    [second] = await inbox.next()
    assert second.id == first.id and second.delivery == 2 and second.lease_id != first.lease_id
    before = await states(setup.url)
    assert first.lease_id is not None and second.lease_id is not None
    assert await agents.ack(first.id, first.lease_id) is False
    assert await agents.release(first.id, first.lease_id) is False
    assert await agents.extend(first.id, first.lease_id, 600) is False
    assert await states(setup.url) == before
    assert await agents.ack(second.id, second.lease_id) is True


async def test_a_lease_that_ran_out_unclaimed_can_still_be_acked(setup: Setup) -> None:
    await setup.store()
    [event] = await setup.agents.inbox(setup.inbox_id).next()
    setup.clock.advance(120)
    assert event.lease_id is not None
    assert await setup.agents.ack(event.id, event.lease_id) is True


async def test_extend_moves_the_lease_end(setup: Setup) -> None:
    await setup.store()
    agents, inbox = setup.agents, setup.agents.inbox(setup.inbox_id)
    [event] = await inbox.next()
    assert event.lease_id is not None
    setup.clock.advance(50)
    assert await agents.extend(event.id, event.lease_id, 100) is True
    setup.clock.advance(60)  # past the first lease's end, within the extended one
    assert await inbox.next() == []
    setup.clock.advance(41)
    assert [e.delivery for e in await inbox.next()] == [2]
    with pytest.raises(DrainpipeError) as caught:
        await agents.extend(event.id, event.lease_id, 3601)
    assert caught.value.status == 400


async def test_release_with_a_delay_comes_back_later_with_the_next_delivery(setup: Setup) -> None:
    await setup.store()
    agents, inbox = setup.agents, setup.agents.inbox(setup.inbox_id)
    [event] = await inbox.next()
    assert event.lease_id is not None
    assert await agents.release(event.id, event.lease_id, delay_seconds=10, error="busy")
    assert await agents.release(event.id, event.lease_id, delay_seconds=10) is True  # repeat
    assert await inbox.next() == []
    setup.clock.advance(11)
    [again] = await inbox.next()
    assert again.delivery == 2


async def test_max_attempts_fails_and_hold_seconds_expires(setup: Setup) -> None:
    inbox_id = await setup.agents.create(
        "strict", max_attempts=2, hold_seconds=1000, lease_seconds=30
    )
    await setup.agents.subscribe(inbox_id, "billing")
    await setup.store()
    await setup.store()
    inbox = setup.agents.inbox(inbox_id)
    first, second = await inbox.next(max=2)
    assert second.lease_id is not None
    assert await setup.agents.release(second.id, second.lease_id)  # delivery 1 of 2
    setup.clock.advance(31)
    again = await inbox.next(max=10)
    assert sorted(e.delivery for e in again) == [2, 2]
    held = {e.id: e for e in again}
    assert held[second.id].lease_id is not None
    assert await setup.agents.release(second.id, held[second.id].lease_id)  # last: failed
    setup.clock.advance(31)
    assert await inbox.next(max=10) == []  # the other's lease ran out on its last delivery
    assert held[first.id].lease_id is not None
    assert await setup.agents.ack(first.id, held[first.id].lease_id) is False  # spent
    found = await states(setup.url)
    assert sorted(state for state, _ in found.values() if state in ("failed",)) == [
        "failed",
        "failed",
    ]
    # hold: an event that waits past hold_seconds expires and is never handed out
    await setup.store()
    setup.clock.advance(1001)
    assert await inbox.next(max=10) == []
    assert "expired" in {state for state, _ in (await states(setup.url)).values()}


async def test_pickup_settles_at_hand_out(setup: Setup) -> None:
    await setup.store()
    inbox = setup.agents.inbox(setup.inbox_id)
    [event] = await inbox.next(ack="pickup")
    assert event.lease_id is None and event.ack == "pickup"
    setup.clock.advance(3600)
    assert await inbox.next() == []


async def test_an_ack_mode_outside_allowed_ack_is_refused(setup: Setup) -> None:
    inbox_id = await setup.agents.create("work", allowed_ack=["manual"])
    with pytest.raises(DrainpipeError) as caught:
        await setup.agents.inbox(inbox_id).next(ack="pickup")
    assert (caught.value.status, caught.value.code) == (400, "ACK_MODE_NOT_ALLOWED")
    with pytest.raises(DrainpipeError):
        await setup.agents.create("bad", allowed_ack=["manual"], default_ack="pickup")


@pytest.mark.parametrize(
    ("field", "value"),
    [("max", 0), ("max", 11), ("wait", 31), ("wait", -1), ("order", "random"), ("ack", "auto")],
)
async def test_out_of_range_pulls_are_400(setup: Setup, field: str, value: Any) -> None:
    with pytest.raises(DrainpipeError) as caught:
        await setup.agents.inbox(setup.inbox_id).next(**{field: value})
    assert caught.value.status == 400 and caught.value.code == "INVALID_PARAMETER"


async def test_peek_never_leases_or_counts_and_pages_by_cursor(setup: Setup) -> None:
    for _ in range(5):
        await setup.store()
    inbox = setup.agents.inbox(setup.inbox_id)
    first = await inbox.events(limit=2)
    assert len(first.items) == 2 and first.next_cursor is not None
    assert all(item.lease_id is None and item.delivery == 0 for item in first.items)
    second = await inbox.events(limit=2, cursor=first.next_cursor)
    third = await inbox.events(limit=2, cursor=second.next_cursor)
    seen = [i.id for page in (first, second, third) for i in page.items]
    assert len(seen) == len(set(seen)) == 5 and third.next_cursor is None
    assert [e.delivery for e in await inbox.next(max=10)] == [1] * 5
    with pytest.raises(DrainpipeError) as caught:
        await inbox.events(cursor=first.next_cursor, type="other")  # bound to its filters
    assert caught.value.code == "CURSOR_INVALID"


async def test_claim_takes_what_is_free(setup: Setup) -> None:
    for _ in range(3):
        await setup.store()
    inbox = setup.agents.inbox(setup.inbox_id)
    ids = [item.id for item in (await inbox.events()).items]
    [held] = await inbox.next()
    result = await inbox.claim([ids[1], held.id, "evt_424242", "nonsense"])
    assert [e.id for e in result.claimed] == [ids[1]]
    assert result.claimed[0].lease_id is not None and result.claimed[0].ack == "manual"
    assert result.unavailable == [held.id]
    assert result.not_found == ["evt_424242", "nonsense"]


async def test_an_idempotency_key_repeats_the_pull_until_one_is_settled(setup: Setup) -> None:
    for _ in range(3):
        await setup.store()
    inbox = setup.agents.inbox(setup.inbox_id)
    first = await inbox.next(max=2, idempotency_key="k1")
    again = await inbox.next(max=2, idempotency_key="k1")
    assert [(e.id, e.lease_id) for e in again] == [(e.id, e.lease_id) for e in first]
    other = await inbox.next(max=2, idempotency_key="k2")
    assert {e.id for e in other}.isdisjoint({e.id for e in first})
    assert first[0].lease_id is not None
    assert await setup.agents.ack(first[0].id, first[0].lease_id)
    with pytest.raises(DrainpipeError) as caught:
        await inbox.next(max=2, idempotency_key="k1")
    assert (caught.value.status, caught.value.code) == (409, "PULL_CONSUMED")


async def test_the_view_follows_view_paths_and_the_byte_cap(setup: Setup) -> None:
    inbox_id = await setup.agents.create(
        "viewed", view_paths={"amount": "data.amount", "note": "data.note"}, view_max_bytes=64
    )
    await setup.agents.subscribe(inbox_id, "billing")
    await setup.store({"data": {"amount": 4900, "note": "é" * 100, "secret": "x"}})
    [event] = await setup.agents.inbox(inbox_id).next()
    assert event.truncated is True
    assert event.view["amount"] == 4900 and "secret" not in event.view
    import json

    assert len(json.dumps(event.view, ensure_ascii=False, separators=(",", ":")).encode()) <= 64
    assert json.loads(await setup.agents.raw(event.id))["data"]["secret"] == "x"


async def test_a_duplicate_delivery_fans_out_once(setup: Setup) -> None:
    await setup.webhooks.store(id="same", payload={"n": 1})
    await setup.webhooks.store(id="same", payload={"n": 1})
    setup.clock.advance(1)
    assert len(await setup.agents.inbox(setup.inbox_id).next(max=10)) == 1


async def test_the_fan_out_never_fails_a_store_whatever_the_body(setup: Setup) -> None:
    inbox_id = await setup.agents.create("odd", priority_path="p")
    await setup.agents.subscribe(inbox_id, "billing", where={"items.0.kind": "a"})
    odd: list[Any] = ["1e5000", "9" * 400, {"x": 1}, [1], True, None, 1e300, "-7.5", " 3 "]
    for value in odd:
        await setup.store({"p": value, "items": [{"kind": "a"}]})
    await setup.store([1, 2, 3])  # not an object: no path matches, nothing fans out
    await setup.store("text")
    events = await setup.agents.inbox(inbox_id).next(order="priority", max=10)
    assert len(events) == len(odd)
    # numbers and numeric strings are priorities; anything else (or too long) is 0
    assert [e.view["p"] for e in events] == [
        1e300, " 3 ", "1e5000", "9" * 400, {"x": 1}, [1], True, None, "-7.5",
    ]  # fmt: skip
