"""Leases and the webhook inbox on both twins: a lease held in one thread refuses another,
and a delivery gets the same answer from ``sync.WebhookInbox.receive(headers, body)`` as
from the async inbox (a message one twin stored is a duplicate for the other)."""

from __future__ import annotations

import asyncio
import json
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg_pool
import pytest

import drainpipe
from drainpipe import DrainpipeError, sync
from drainpipe.http import Headers, Request
from drainpipe.testing import Clock
from tests.inbox.test_inbox import SECRET, signed
from tests.sync.conftest import Twin


async def test_with_lease_and_lease_on_both_twins(twin: Twin, db_url: str) -> None:
    clock = Clock(datetime.now(UTC))
    if twin.is_sync:

        def scenario() -> list[Any]:
            seen: list[Any] = []
            outcome = sync.with_lease(db_url, "report", lambda held: held.key, now=clock)
            seen.append((outcome.acquired, outcome.value))
            with sync.lease(db_url, "report", seconds=30, now=clock) as held:
                assert held is not None
                inner = sync.with_lease(db_url, "report", lambda h: "ran", now=clock)
                seen.append((inner.acquired, inner.value))
                seen.append(held.extend())
                clock.advance(31)  # a lease runs out on the given clock
                with sync.lease(db_url, "report", now=clock) as taker:
                    seen.append(taker is not None)
                    seen.append(held.extend())
            seen.append(held.lost)
            return seen

        seen = await asyncio.to_thread(scenario)
    else:
        seen = []

        async def key_of(held: Any) -> Any:
            return held.key

        async def ran(held: Any) -> str:
            return "ran"

        outcome = await drainpipe.with_lease(db_url, "report", key_of, now=clock)
        seen.append((outcome.acquired, outcome.value))
        async with drainpipe.lease(db_url, "report", seconds=30, now=clock) as held:
            assert held is not None
            inner = await drainpipe.with_lease(db_url, "report", ran, now=clock)
            seen.append((inner.acquired, inner.value))
            seen.append(await held.extend())
            clock.advance(31)
            async with drainpipe.lease(db_url, "report", now=clock) as taker:
                seen.append(taker is not None)
                seen.append(await held.extend())
        seen.append(held.lost)
    assert seen == [(True, "report"), (False, None), True, True, False, True]


def test_a_lease_held_in_one_thread_refuses_another(db_url: str) -> None:
    pool = psycopg_pool.ConnectionPool(
        db_url, min_size=2, max_size=4, open=True, kwargs={"autocommit": True}
    )
    taken = threading.Event()
    done = threading.Event()
    answers: list[Any] = []

    def holder() -> None:
        with sync.lease(pool, "nightly", seconds=30) as held:
            answers.append(("holder", held is not None))
            taken.set()
            done.wait(10)

    thread = threading.Thread(target=holder)
    thread.start()
    try:
        assert taken.wait(10)
        outcome = sync.with_lease(pool, "nightly", lambda held: "ran twice")
        answers.append(("other", outcome.acquired))
    finally:
        done.set()
        thread.join()
    assert answers == [("holder", True), ("other", False)]
    assert sync.with_lease(pool, "nightly", lambda held: "ran").value == "ran"  # released
    pool.close()


def test_lease_arguments_are_checked_as_for_the_async_twin(db_url: str) -> None:
    for key, seconds, code in (("", 60, "invalid_request"), ("k", 0, "validation")):
        with pytest.raises(DrainpipeError) as caught, sync.lease(db_url, key, seconds):
            pass
        assert caught.value.kind == code


# -- the webhook inbox --------------------------------------------------------------------


NUL_BODY = json.dumps({"a": "\x00"}).encode()  # the text {"a": "\u0000"}


def request_of(body: bytes, headers: dict[str, str]) -> Request:
    async def stream() -> Any:
        yield body

    return Request("POST", "/hooks/billing", Headers(headers), stream)


async def answer_async(inbox: drainpipe.WebhookInbox, body: bytes, headers: dict[str, str]) -> Any:
    response = await inbox.receive(request_of(body, headers))
    return response.status, response.body


async def test_a_delivery_gets_the_same_answer_from_both_twins(db_url: str) -> None:
    async_inbox = drainpipe.WebhookInbox(db_url, source="billing", secrets=SECRET)
    sync_inbox = sync.WebhookInbox(db_url, source="billing", secrets=SECRET, max_body_bytes=100)
    small = drainpipe.WebhookInbox(db_url, source="billing", secrets=SECRET, max_body_bytes=100)
    try:
        body = json.dumps({"type": "invoice.paid", "amount": 3}).encode()
        headers = signed(body, "msg_1")

        def receive(data: bytes, head: dict[str, str]) -> tuple[int, bytes]:
            status, _, answer = sync_inbox.receive(head, data, path="/hooks/billing")
            return status, answer

        status, answer = await asyncio.to_thread(receive, body, headers)
        assert status == 202 and json.loads(answer)["duplicate"] is False
        first_id = json.loads(answer)["id"]
        # the message the sync twin stored is a duplicate for the async one, and back
        status, answer = await answer_async(async_inbox, body, headers)
        assert (status, json.loads(answer)) == (200, {"id": first_id, "duplicate": True})
        other = json.dumps({"type": "x"}).encode()
        assert (await answer_async(async_inbox, other, signed(other, "msg_2")))[0] == 202
        status, answer = await asyncio.to_thread(receive, other, signed(other, "msg_2"))
        assert status == 200 and json.loads(answer)["duplicate"] is True

        refusals = [
            (body, {**headers, "webhook-signature": "v1,AAAA"}),  # forged
            (body, {"content-type": "application/json"}),  # unsigned
            (b"not json", signed(b"not json", "msg_3")),
            (b"[" * 200, signed(b"[" * 200, "msg_4")),  # over max_body_bytes
            (NUL_BODY, signed(NUL_BODY, "msg_5")),  # jsonb cannot hold it
            (body, signed(body, "msg_6", timestamp=1)),  # too old
        ]
        for data, head in refusals:
            expected = await answer_async(small, data, head)
            got = await asyncio.to_thread(receive, data, head)
            assert got == expected and expected[0] >= 400, (data[:20], expected)
        entries = await asyncio.to_thread(sync_inbox.list, tenant=None)
        assert sorted(entry.message_id for entry in entries) == ["msg_1", "msg_2"]
        stored = await asyncio.to_thread(
            sync_inbox.store, id="evt_9", payload={"type": "manual"}, tenant="acme"
        )
        again = await async_inbox.store(id="evt_9", payload={"type": "manual"}, tenant="acme")
        assert (stored.duplicate, again.duplicate, again.id) == (False, True, stored.id)
        assert await asyncio.to_thread(sync_inbox.purge, older_than=timedelta(0)) == 0
    finally:
        await async_inbox.close()
        await small.close()
        sync_inbox.close()


def test_an_inbox_without_secrets_only_stores(db_url: str) -> None:
    with sync.WebhookInbox(db_url, source="manual") as inbox:
        with pytest.raises(TypeError, match="only stores"):
            inbox.receive({}, b"{}")
        assert inbox.store(id="1", payload={"type": "t"}).duplicate is False

        def verify(headers: Any, body: bytes) -> dict[str, Any]:
            return {"id": headers["x-id"], "payload": json.loads(body), "tenant": "acme"}

    with sync.WebhookInbox(db_url, source="custom", verify=verify) as custom:
        status, headers, body = custom.receive({"X-Id": "abc"}, b'{"type": "ping"}')
        assert (status, headers["content-type"]) == (202, "application/json")
        status, _, body = custom.receive({}, b"{}")  # verify raised KeyError: refused
        assert (status, json.loads(body)["code"]) == (401, "WEBHOOK_INVALID_SIGNATURE")
        [entry] = custom.list(tenant="acme")
        assert (entry.message_id, entry.type) == ("abc", "ping")
