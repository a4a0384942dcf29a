"""The webhook inbox on a clock the test moves (``now=``): claim leases, retry backoff and
the signature timestamp window without waiting."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from drainpipe import DrainpipeError, WebhookInbox, WebhookMessage
from drainpipe.testing import Clock
from tests.inbox.test_inbox import SECRET, make_request, signed

START = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


async def test_a_failed_message_waits_out_its_backoff_on_the_moved_clock(db_url: str) -> None:
    clock = Clock()  # from the real now: store() dates a message on the database's clock
    inbox = WebhookInbox(db_url, source="billing", now=clock)
    attempts: list[int] = []

    async def flaky(message: WebhookMessage) -> None:
        attempts.append(message.attempts)
        if message.attempts == 1:
            raise RuntimeError("provider down")

    try:
        await inbox.store(id="evt_1", payload={"n": 1})
        clock.advance(1)  # past the instant the database stored it at
        first = await inbox.process(flaky, on_error=lambda *_: None)
        assert (first.succeeded, first.failed) == (0, 1)
        assert (await inbox.process(flaky)).succeeded == 0  # backing off: 2 s on this clock
        clock.advance(2.5)
        assert (await inbox.process(flaky)).succeeded == 1
        assert attempts == [1, 2]
    finally:
        await inbox.close()


async def test_the_signature_window_is_measured_on_the_inboxs_clock(db_url: str) -> None:
    clock = Clock(START)
    inbox = WebhookInbox(db_url, source="billing", secrets=[SECRET], now=clock)
    stamp = int(START.timestamp())
    body = b'{"type": "invoice.paid"}'
    try:
        accepted = await inbox.receive(make_request(body, signed(body, "m1", timestamp=stamp)))
        assert accepted.status == 202
        clock.advance(301)  # the same delivery, five minutes later, is too old
        late: Any = await inbox.receive(make_request(body, signed(body, "m2", timestamp=stamp)))
        assert late.status == 401 and late.json()["code"] == "WEBHOOK_TIMESTAMP_TOO_OLD"
    finally:
        await inbox.close()


async def test_a_naive_clock_is_a_validation_error(db_url: str) -> None:
    inbox = WebhookInbox(db_url, source="billing", now=lambda: datetime(2026, 1, 1))
    try:
        with pytest.raises(DrainpipeError) as caught:
            await inbox.process(lambda message: None)
        assert caught.value.kind == "validation"
    finally:
        await inbox.close()
