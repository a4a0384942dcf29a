"""``WebhookInbox.process`` on both twins: the same messages end in the same rows and the
same report; the sync twin's handler is a plain function whose ``message.checkpoint``
needs no ``await``, and a lease lost under a running handler drops its outcome."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from drainpipe import DrainpipeError, Retry, sync
from drainpipe.codes import Discard
from tests.conftest import connect
from tests.inbox.test_inbox import age, rows
from tests.sync.conftest import Twin


async def test_process_settles_alike_on_both_twins(
    twin: Twin, db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    box = twin.inbox(db_url, source="billing")
    for name in ("evt_ok", "evt_fail", "evt_retry", "evt_discard"):
        await box.store(id=name, payload={"type": name})
    errors: list[tuple[str, str]] = []

    def handle(message: Any) -> None:
        if message.message_id == "evt_fail":
            raise RuntimeError("downstream said no")
        if message.message_id == "evt_retry":
            raise Retry(after=60)
        if message.message_id == "evt_discard":
            raise Discard("NOT_OURS")

    def on_error(error: BaseException, message: Any) -> None:
        errors.append((message.message_id, str(error)))

    report = await box.process(twin.handler(handle), batch=10, on_error=on_error)
    assert (report.succeeded, report.failed, report.budget_exhausted) == (1, 3, False)
    assert errors == [("evt_fail", "downstream said no")]  # Retry and Discard are not errors
    now = datetime.now(UTC)
    by_id = {r["message_id"]: r for r in await rows(conn)}
    assert by_id["evt_ok"]["status"] == "processed"
    assert (by_id["evt_fail"]["status"], by_id["evt_fail"]["attempts"]) == ("pending", 1)
    assert 1 < (by_id["evt_fail"]["available_at"] - now).total_seconds() <= 2
    assert 59 < (by_id["evt_retry"]["available_at"] - now).total_seconds() <= 60
    assert by_id["evt_fail"]["locked_by"] is None
    # nothing is due now: an empty run claims nothing
    assert tuple(await box.process(twin.handler(handle))) == (0, 0)


async def test_process_checks_its_arguments_alike(twin: Twin, db_url: str) -> None:
    box = twin.inbox(db_url, source="billing")
    with pytest.raises(DrainpipeError) as lease:
        await box.process(twin.handler(lambda m: None), lease=0)
    with pytest.raises(DrainpipeError) as batch:
        await box.process(twin.handler(lambda m: None), batch=0)
    assert (lease.value.kind, batch.value.kind) == ("validation", "validation")
    with pytest.raises(TypeError):
        await box.process("not a function")


async def test_a_checkpoint_without_await_survives_a_failed_attempt(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    progress_seen: list[dict[str, Any]] = []

    def handler(message: sync.WebhookMessage) -> None:
        progress_seen.append(dict(message.progress))
        if message.attempts == 1:
            assert message.checkpoint({"line": 1, "charged": ["a"]})
            raise RuntimeError("crashed after line 1")
        assert message.checkpoint({"line": 3})  # shallow merge keeps "charged"

    with sync.WebhookInbox(db_url, source="billing") as box:
        box.store(id="evt_cp", payload={"lines": 3})
        assert (await asyncio.to_thread(box.process, handler)).failed == 1
        await age(conn)
        assert (await asyncio.to_thread(box.process, handler)).succeeded == 1
    [row] = await rows(conn)
    assert (row["status"], row["checkpoint"]) == ("processed", {"line": 3, "charged": ["a"]})
    assert progress_seen == [{}, {"line": 1, "charged": ["a"]}]


async def test_a_lease_lost_under_a_running_handler_drops_its_outcome(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    """A thread cannot be cancelled: the handler runs to its end, then nothing is settled
    and ``on_error`` hears ``LEASE_LOST``; the worker that took the message over keeps it."""
    taken = threading.Event()
    errors: list[DrainpipeError] = []

    def handler(message: sync.WebhookMessage) -> None:
        taken.wait(5)
        time.sleep(0.3)  # a few beats of 0.05 s find the lease gone

    def on_error(error: BaseException, message: Any) -> None:
        assert isinstance(error, DrainpipeError)
        errors.append(error)

    with sync.WebhookInbox(db_url, source="billing", worker="slow") as box:
        box.store(id="evt_late", payload={})
        running = asyncio.create_task(
            asyncio.to_thread(box.process, handler, heartbeat_every=0.05, on_error=on_error)
        )
        while not (await rows(conn, "status = 'processing'")):
            await asyncio.sleep(0.02)
        other = await connect(db_url)
        # the lease runs out and is taken over in one transaction: the handler's heartbeat
        # renews a lapsed lease nobody took, and one beat between the two would keep it
        async with other.transaction():
            await age(other)
            await other.execute("SELECT drainpipe.claim_webhooks_v1('billing', 'other', 1, 300)")
        await other.close()
        taken.set()
        report = await running
    assert tuple(report) == (0, 0)
    assert [e.code for e in errors] == ["LEASE_LOST"]
    [row] = await rows(conn)
    assert (row["status"], row["locked_by"], row["attempts"]) == ("processing", "other", 2)


async def test_the_heartbeat_thread_keeps_a_long_handler_s_lease(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    stolen: list[Any] = []

    def handler(message: sync.WebhookMessage) -> None:
        if message.message_id == "evt_long":
            time.sleep(2.6)  # longer than the 2 s lease; beats at 1 s and 2 s
            with psycopg.connect(db_url, autocommit=True) as other:
                stolen.extend(
                    other.execute(
                        "SELECT id FROM drainpipe.claim_webhooks_v1('billing', 'thief', 10, 60)"
                    ).fetchall()
                )

    with sync.WebhookInbox(db_url, source="billing") as box:
        box.store(id="evt_long", payload={})
        box.store(id="evt_queued_in_batch", payload={})
        report = await asyncio.to_thread(box.process, handler, batch=2, lease=2)
    assert stolen == []  # both messages of the batch were renewed, the waiting one too
    assert report.succeeded == 2
    assert {r["status"] for r in await rows(conn)} == {"processed"}


def test_an_async_handler_is_refused_before_anything_is_claimed(db_url: str) -> None:
    async def handler(message: Any) -> None: ...

    def returns_awaitable(message: Any) -> Any:
        return handler(message)

    with sync.WebhookInbox(db_url, source="billing") as box:
        box.store(id="evt_1", payload={})
        with pytest.raises(TypeError, match="plain functions"):
            box.process(handler)
        errors: list[BaseException] = []
        report = box.process(returns_awaitable, on_error=lambda e, m: errors.append(e))
        assert tuple(report) == (0, 1)  # the awaitable is closed, never run: the message fails
        assert isinstance(errors[0], TypeError)


def test_a_spent_budget_claims_nothing(db_url: str) -> None:
    with sync.WebhookInbox(db_url, source="billing") as box:
        box.store(id="evt_1", payload={})
        report = box.process(lambda m: None, budget=0)
        assert (tuple(report), report.budget_exhausted) == ((0, 0), True)
        report = box.process(lambda m: None, deadline=time.monotonic() + 60)
        assert tuple(report) == (1, 0)
