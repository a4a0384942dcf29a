"""The agent inbox's hardening (docs/reference.md, "Hardening"), on a real uvicorn where the
wire matters: capped bodies, cross-site writes and upgrades, the stream's credit ceiling,
frames that are not JSON text, and raw bodies byte for byte."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect

from drainpipe import Principal, WebhookInbox, bearer_tokens
from drainpipe.dev.server import start_server
from drainpipe.http import Headers, Request
from tests.agents.conftest import Setup
from tests.agents.test_stream import frame, nothing_within, serve
from tests.chaos.http_entries import WEBHOOK_SECRET, sign
from tests.streamed import post_streamed, rss_bytes

TOKEN = "stream-token-0123456789abcdef"  # the token tests.agents.test_stream.serve accepts
AUTH = {"authorization": f"Bearer {TOKEN}"}
MiB = 1024 * 1024


@asynccontextmanager
async def http_app(setup: Setup, **options: Any) -> AsyncIterator[int]:
    """The agents' app under uvicorn (HTTP only); yields its port."""
    app = setup.agents.app(authorize=bearer_tokens({TOKEN: Principal("agent")}), **options)
    server = await start_server(app)
    try:
        yield server.port
    finally:
        await server.stop()


async def test_a_streamed_50_mib_body_is_refused_at_128_kib_without_being_held(
    setup: Setup,
) -> None:
    # issue 36, 1: the app read the whole body before its 128 KiB check (64 MiB → +64 MiB)
    async with http_app(setup) as port:
        await post_streamed(port, "/v1/events/evt_1/ack", AUTH, 1024)  # warm up
        before = rss_bytes()
        answer = await post_streamed(port, "/v1/events/evt_1/ack", AUTH, 50 * MiB)
        grown = rss_bytes() - before
    assert answer.status == 413, answer
    assert json.loads(answer.body)["code"] == "BODY_TOO_LARGE"
    assert answer.sent < 10 * MiB and answer.seconds < 10
    assert grown < 20 * MiB, f"the server grew by {grown / MiB:.1f} MiB"


async def test_a_declared_length_over_the_cap_is_refused_before_reading(setup: Setup) -> None:
    async with http_app(setup) as port:
        answer = await post_streamed(port, "/v1/events/evt_1/ack", AUTH, 200 * 1024, chunked=False)
    assert answer.status == 413 and answer.sent <= 200 * 1024


async def test_cookie_carrying_writes_need_an_allowed_origin(setup: Setup) -> None:
    # issue 36, 3: an authorize that reads a session cookie let another site's form write
    async def by_cookie(request: Any) -> Principal | None:
        return Principal("browser") if "session=ok" in request.headers.get("cookie", "") else None

    await setup.store()
    app = setup.agents.app(authorize=by_cookie, allowed_origins=["https://console.example"])
    path = f"/v1/agent/inbox/{setup.inbox_id}/claim"
    body = {"event_ids": ["evt_1"]}
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="https://agents.example"
    ) as http:
        cookie = {"cookie": "session=ok"}
        evil = await http.post(
            path, json=body, headers={**cookie, "origin": "https://evil.example"}
        )
        bare = await http.post(path, json=body, headers=cookie)  # no Origin at all
        allowed = await http.post(
            path, json=body, headers={**cookie, "origin": "https://console.example"}
        )
        same = await http.post(path, json=body, headers={**cookie, "sec-fetch-site": "same-origin"})
        reads = await http.get(f"/v1/agent/inbox/{setup.inbox_id}/events", headers=cookie)
    for refused in (evil, bare):
        assert refused.status_code == 403 and refused.json()["code"] == "CROSS_SITE_REQUEST"
    assert allowed.status_code == 200 and same.status_code == 200
    assert reads.status_code == 200  # a read changes nothing: cookies may come along

    default = setup.agents.app(authorize=by_cookie)  # default: the request's own host
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=default), base_url="https://agents.example"
    ) as http:
        own = await http.post(
            path, json=body, headers={"cookie": "session=ok", "origin": "https://agents.example"}
        )
        other = await http.post(
            path, json=body, headers={"cookie": "session=ok", "origin": "https://other.example"}
        )
    assert own.status_code == 200
    assert other.status_code == 403 and other.json()["code"] == "CROSS_SITE_REQUEST"


async def test_bearer_clients_without_cookies_are_not_affected(setup: Setup) -> None:
    app = setup.agents.app(authorize=bearer_tokens({TOKEN: Principal("agent")}))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://agents", headers=AUTH
    ) as http:
        answer = await http.post(
            f"/v1/agent/inbox/{setup.inbox_id}/claim",
            json={"event_ids": ["evt_1"]},
            headers={"origin": "https://elsewhere.example"},
        )
    assert answer.status_code == 200


async def test_a_websocket_upgrade_with_cookies_checks_its_origin(setup: Setup) -> None:
    async with serve(setup.agents) as base:
        url = f"{base}/v1/agent/inbox/{setup.inbox_id}/stream"
        cookie = {**AUTH, "cookie": "session=x"}
        async with connect(url, additional_headers=cookie, origin="https://evil.example") as ws:
            refused = await frame(ws)
            await asyncio.wait_for(ws.wait_closed(), 5)
        assert refused["code"] == "CROSS_SITE_REQUEST"
        assert ws.close_code == 4403
        own = base.replace("ws://", "http://")
        async with connect(url, additional_headers=cookie, origin=own) as ws:
            await ws.send(json.dumps({"type": "ping"}))
            assert await frame(ws) == {"type": "pong"}


async def test_credit_beyond_ten_unsettled_events_is_not_kept(setup: Setup) -> None:
    # issue 36, 4: 100 credit frames of n=10 and no reads held 150 (once 494) leases
    for _ in range(40):
        await setup.store()
    async with serve(setup.agents) as base:
        url = f"{base}/v1/agent/inbox/{setup.inbox_id}/stream?credit=10"
        async with connect(url, additional_headers=AUTH) as ws:
            for _ in range(100):
                await ws.send(json.dumps({"type": "credit", "n": 10}))
            events = await _events(ws, 10)
            assert await nothing_within(ws, 0.5)  # 10 unsettled: no more, whatever the credit
            # settling frees room: acking 3 lets 3 more come (credit was not kept beyond 10)
            for event in events[:3]:
                await ws.send(
                    json.dumps({"type": "ack", "id": event["id"], "lease_id": event["lease_id"]})
                )
            results = [await frame(ws) for _ in range(3)]
            assert all(r["type"] == "result" and r["ok"] for r in results)
            assert await nothing_within(ws, 0.3)  # the credit past the ceiling was dropped
            await ws.send(json.dumps({"type": "credit", "n": 10}))
            assert len(await _events(ws, 3)) == 3
            assert await nothing_within(ws, 0.3)


async def _events(ws: ClientConnection, count: int) -> list[dict[str, Any]]:
    events = [await frame(ws) for _ in range(count)]
    assert all(event["type"] == "event" for event in events), events
    return [event["event"] for event in events]


@pytest.mark.parametrize(
    "sent",
    [b"\x00\x01binary", "[" * 5000 + "]" * 5000, '{"type": ' + "[" * 100_000 + "]" * 100_000],
    ids=["binary", "nested-list", "deeply-nested-type"],
)
async def test_a_binary_or_deeply_nested_frame_answers_invalid_frame(
    setup: Setup, sent: bytes | str
) -> None:
    # issue 36, 6: these closed the stream (KeyError, RecursionError)
    async with serve(setup.agents) as base:
        url = f"{base}/v1/agent/inbox/{setup.inbox_id}/stream"
        async with connect(url, additional_headers=AUTH, max_size=None) as ws:
            await ws.send(sent)
            error = await frame(ws)
            assert error["type"] == "error" and error["code"] == "INVALID_FRAME"
            await ws.send(json.dumps({"type": "ping"}))  # the stream is still open
            assert await frame(ws) == {"type": "pong"}
            assert await nothing_within(ws, 0.2)


async def test_raw_answers_the_bytes_received_and_stored(setup: Setup) -> None:
    # issue 36, 7: /raw re-serialised the jsonb (keys reordered, spaces and duplicates gone)
    receiver = WebhookInbox(setup.url, source="billing", secrets=WEBHOOK_SECRET, app="stripe")
    body = b'{"type": "invoice.paid",  "z": 1.50, "a": {"x" : 1}, "a": 2}\n'
    stamp = str(int(time.time()))
    headers = {
        "webhook-id": "msg_raw",
        "webhook-timestamp": stamp,
        "webhook-signature": sign("msg_raw", stamp, body),
        "content-type": "application/json",
    }

    async def chunks() -> AsyncIterator[bytes]:
        yield body

    try:
        answer = await receiver.receive(Request("POST", "/hooks", Headers(headers.items()), chunks))
        assert answer.status == 202, answer.body
    finally:
        await receiver.close()
    await setup.webhooks.store(id="stored", payload={"b": 1, "a": [1.5, "é"]}, type="x")
    setup.clock.advance(5)  # both are due on the inbox's clock
    [received, stored] = await setup.agents.inbox(setup.inbox_id).next(max=2)
    assert await setup.agents.raw(received.id) == body
    assert await setup.agents.raw(stored.id) == b'{"b":1,"a":[1.5,"\xc3\xa9"]}'
    async with http_app(setup) as port, httpx.AsyncClient() as http:
        over_http = await http.get(
            f"http://127.0.0.1:{port}/v1/events/{received.id}/raw", headers=AUTH
        )
    assert over_http.status_code == 200 and over_http.content == body
