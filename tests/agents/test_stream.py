"""The WebSocket stream on a real uvicorn server (the ``websockets`` implementation) with a
``websockets`` client: pushes only against credit, acks over the socket, at most 10 open
streams per inbox across two servers, and a dropped socket's leases running out."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import uvicorn
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from drainpipe import AgentInboxes, Principal, bearer_tokens
from drainpipe.agents import statements as ops
from tests.agents.conftest import SECRET, Setup

TOKEN = "stream-token-0123456789abcdef"
AUTH = {"authorization": f"Bearer {TOKEN}"}


@asynccontextmanager
async def serve(agents: AgentInboxes) -> AsyncIterator[str]:
    """The agents' app under uvicorn on a free port; yields its ws:// base URL."""
    app = agents.app(authorize=bearer_tokens({TOKEN: Principal("streamer")}), budget=25)
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, lifespan="off", log_level="critical", ws="websockets-sansio"
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    async with asyncio.timeout(10):
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"ws://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


async def frame(ws: ClientConnection) -> dict[str, Any]:
    async with asyncio.timeout(5):
        return dict(json.loads(await ws.recv()))


async def nothing_within(ws: ClientConnection, seconds: float) -> bool:
    try:
        async with asyncio.timeout(seconds):
            await ws.recv()
    except TimeoutError:
        return True
    return False


async def test_events_are_pushed_only_against_credit_and_acked_over_the_socket(
    setup: Setup,
) -> None:
    for _ in range(3):
        await setup.store()
    async with serve(setup.agents) as base:
        url = f"{base}/v1/agent/inbox/{setup.inbox_id}/stream?credit=1"
        async with connect(url, additional_headers=AUTH) as ws:
            first = await frame(ws)
            assert first["type"] == "event" and first["event"]["delivery"] == 1
            # no credit left: nothing more comes, though two events are due
            assert await nothing_within(ws, 1.5)
            event = first["event"]
            await ws.send(
                json.dumps({"type": "ack", "id": event["id"], "lease_id": event["lease_id"]})
            )
            assert await frame(ws) == {
                "type": "result",
                "op": "ack",
                "id": event["id"],
                "ok": True,
                "code": None,
            }
            await ws.send(
                json.dumps({"type": "release", "id": event["id"], "lease_id": event["lease_id"]})
            )
            stale = await frame(ws)
            assert stale["ok"] is False and stale["code"] == "LEASE_LOST"
            await ws.send(json.dumps({"type": "credit", "n": 2}))
            pushed = [await frame(ws), await frame(ws)]
            assert {p["type"] for p in pushed} == {"event"}
            assert len({p["event"]["id"] for p in pushed} | {event["id"]}) == 3
            await ws.send("not json")
            assert (await frame(ws))["code"] == "INVALID_FRAME"
            await ws.send(json.dumps({"type": "credit", "n": 50}))
            assert (await frame(ws))["code"] == "INVALID_PARAMETER"
            await ws.send(json.dumps({"type": "ping"}))
            assert await frame(ws) == {"type": "pong"}
            # the other two are settled through the HTTP API's Python twin
            second = pushed[0]["event"]
            assert await setup.agents.ack(second["id"], second["lease_id"])


async def test_an_eleventh_stream_is_refused_across_processes(setup: Setup) -> None:
    other = AgentInboxes(setup.url, lease_secret=SECRET, now=setup.clock)
    try:
        async with serve(setup.agents) as first, serve(other) as second:
            path = f"/v1/agent/inbox/{setup.inbox_id}/stream"
            open_streams = []
            for index in range(10):
                base = first if index % 2 else second
                ws = await connect(f"{base}{path}", additional_headers=AUTH)
                open_streams.append(ws)
            await asyncio.sleep(0.3)  # every stream has its slot by now
            async with connect(f"{first}{path}", additional_headers=AUTH) as refused:
                error = await frame(refused)
                assert error["type"] == "error" and error["code"] == "TOO_MANY_STREAMS"
                with pytest.raises(ConnectionClosed) as closed:
                    await refused.recv()
                assert closed.value.rcvd is not None and closed.value.rcvd.code == 4409
            await open_streams.pop().close()
            await asyncio.sleep(0.3)  # its slot is released when its socket closes
            async with connect(f"{second}{path}?credit=1", additional_headers=AUTH) as admitted:
                assert await nothing_within(admitted, 0.5)  # admitted, nothing to push
            for ws in open_streams:
                await ws.close()
    finally:
        await other.close()


async def test_a_dropped_sockets_leases_run_out_as_usual(setup: Setup) -> None:
    await setup.store()
    async with serve(setup.agents) as base:
        url = f"{base}/v1/agent/inbox/{setup.inbox_id}/stream?credit=1"
        async with connect(url, additional_headers=AUTH) as ws:
            held = (await frame(ws))["event"]
        inbox = setup.agents.inbox(setup.inbox_id)
        assert await inbox.next() == []  # still leased to the closed socket
        setup.clock.advance(61)
        [again] = await inbox.next()
        assert again.id == held["id"] and again.delivery == 2
        assert await setup.agents.ack(held["id"], held["lease_id"]) is False


async def test_a_stream_without_a_token_or_outside_its_inboxes_is_refused(setup: Setup) -> None:
    async with serve(setup.agents) as base:
        async with connect(f"{base}/v1/agent/inbox/{setup.inbox_id}/stream") as ws:
            assert (await frame(ws))["code"] == "UNAUTHORIZED"
        async with connect(f"{base}/v1/agent/inbox/inb_nope/stream", additional_headers=AUTH) as ws:
            assert (await frame(ws))["code"] == "INBOX_NOT_FOUND"
        bad = f"{base}/v1/agent/inbox/{setup.inbox_id}/stream?credit=11"
        async with connect(bad, additional_headers=AUTH) as ws:
            assert (await frame(ws))["code"] == "INVALID_PARAMETER"


async def test_a_burst_of_ack_frames_is_answered_in_order_and_sent_together(
    setup: Setup,
) -> None:
    """Ack frames are queued as they are read: a burst goes to the database as one batch
    (not one statement a frame), each still fenced, and the results come in frame order. A
    release or extend after an ack of the same socket is settled after it."""
    for _ in range(6):
        await setup.store()
    sent: list[str] = []
    fetch = setup.agents._acks._fetch

    async def counted(statement: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        sent.append(statement)
        return await fetch(statement, params)

    setup.agents._acks._fetch = counted
    async with serve(setup.agents) as base:
        url = f"{base}/v1/agent/inbox/{setup.inbox_id}/stream?credit=6"
        async with connect(url, additional_headers=AUTH) as ws:
            events = [(await frame(ws))["event"] for _ in range(6)]
            acks = [{"type": "ack", "id": e["id"], "lease_id": e["lease_id"]} for e in events]
            burst = [
                acks[0],
                acks[1],
                {**acks[2], "lease_id": acks[2]["lease_id"][:-3] + "AAA"},  # forged
                {"type": "ack", "id": "evt_999999", "lease_id": acks[3]["lease_id"]},
                {"type": "ack", "id": "not-an-event", "lease_id": acks[3]["lease_id"]},
                acks[3],
                acks[0],  # the same ack again
                {"type": "extend", "id": events[1]["id"], "lease_id": events[1]["lease_id"],
                 "seconds": 60},  # after its ack: the lease is spent
                acks[4],
            ]  # fmt: skip
            # the frames reach the server together: it reads them in one turn of its loop
            for message in burst:
                ws.protocol.send_text(json.dumps(message).encode())
            ws.send_data()
            results = [await frame(ws) for _ in burst]
    assert [(r["op"], r["id"], r["ok"], r["code"]) for r in results] == [
        ("ack", events[0]["id"], True, None),
        ("ack", events[1]["id"], True, None),
        ("ack", events[2]["id"], False, "LEASE_LOST"),
        ("ack", "evt_999999", False, "EVENT_NOT_FOUND"),
        ("ack", "not-an-event", False, "EVENT_NOT_FOUND"),
        ("ack", events[3]["id"], True, None),
        ("ack", events[0]["id"], True, None),
        ("extend", events[1]["id"], False, "LEASE_LOST"),
        ("ack", events[4]["id"], True, None),
    ]
    # six acks before the extend in one statement, the one after it in another
    assert sent == [ops.ACK_MANY, ops.ACK_MANY]
    open_ids = {e.id for e in (await setup.agents.inbox(setup.inbox_id).events()).items}
    assert open_ids == {events[2]["id"], events[5]["id"]}
