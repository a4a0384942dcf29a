"""Every HTTP entry (tests/chaos/http_entries.py: the functions, ``drainpipe serve``)
answers a few hundred fuzzed requests, fixed seed, without a single 5xx, exception or
missing answer. ``scripts/chaos`` sends 2,500 per entry."""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from typing import Any

import pytest

from drainpipe.serverless import ASGIApp, Receive, Scope, Send, json_response
from tests.chaos.http_entries import ENTRIES, Draft, HttpEntry, by_name, entry_env
from tests.chaos.http_fuzz import fuzz_entry, send_to

REQUESTS = 300
SEED = 19


@pytest.mark.slow
@pytest.mark.parametrize("entry", ENTRIES, ids=[entry.name for entry in ENTRIES])
async def test_no_fuzzed_request_gets_a_5xx(fresh_database: Any, entry: HttpEntry) -> None:
    url = fresh_database(entry.backend)
    figures = await fuzz_entry(entry, entry_env(url), requests=REQUESTS, seed=SEED)
    assert figures.requests == REQUESTS
    assert figures.failures == 0, "\n".join([figures.line(), *figures.examples])
    # the fuzz got past the front door, not only refusals
    assert sum(n for status, n in figures.statuses.items() if status < 300) > REQUESTS // 10


async def naive_app(scope: Scope, receive: Receive, send: Send) -> None:
    """What the fuzz must catch: a JSON endpoint that trusts its body."""
    message = await receive()
    value = json.loads(message.get("body", b""))  # raises on most bodies the fuzz sends
    await json_response({"got": value["item"]})(scope, receive, send)


def naive_build(env: Mapping[str, str]) -> ASGIApp:
    return naive_app


async def test_the_fuzz_counts_an_app_that_raises_or_answers_500() -> None:
    entry = HttpEntry("naive", "/api/orders", naive_build, by_name("orders").request)
    figures = await fuzz_entry(entry, entry_env("postgresql://unused"), requests=60, seed=SEED)
    assert figures.failures > 10 and figures.examples


@pytest.mark.parametrize("depth", [990, 100_000])
async def test_orders_answers_deeply_nested_json_with_a_400_problem(
    db_url: str, depth: int
) -> None:
    # issue 19, item 2: a plain-text 500 with a RecursionError traceback before; now a
    # validation Problem (400 when the parser gives up, 422 when it parsed a list)

    app = by_name("orders").build(entry_env(db_url))
    body = b"[" * depth + b"]" * depth
    draft = Draft(
        "POST",
        "/api/orders",
        [("content-type", "application/json"), ("idempotency-key", f"deep-{depth}")],
        body,
    )
    try:
        answer = await send_to(app, draft, random.Random(0))
    finally:
        await app.aclose()  # type: ignore[attr-defined]
    assert answer.error is None and answer.status in (400, 422)


@pytest.mark.slow
async def test_no_request_through_a_real_uvicorn_gets_a_5xx(fresh_database: Any) -> None:
    # the same requests as raw HTTP/1.1 bytes: what uvicorn's parser lets through reaches
    # every function behind drainpipe serve's health check
    serve = by_name("serve")
    url = fresh_database(serve.backend)
    figures = await fuzz_entry(serve, entry_env(url), requests=150, seed=SEED, over_http=True)
    assert figures.requests == 150
    assert figures.failures == 0, "\n".join([figures.line(), *figures.examples])
    assert sum(n for status, n in figures.statuses.items() if status < 300) > 15


async def _post_raw(
    app: Any, path: str, headers: list[tuple[str, str]], chunks: list[bytes]
) -> int:
    """POST ``chunks`` as the body; a client that hangs up after the last one when the
    last chunk says more is coming (``b"..."``)."""
    messages = [
        {"type": "http.request", "body": chunk, "more_body": chunk == b"..."} for chunk in chunks
    ]
    statuses: list[int] = []

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(int(message["status"]))

    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "https", "path": path, "raw_path": path.encode(), "query_string": b"",
        "root_path": "", "client": ("127.0.0.1", 1), "server": ("chaos", 443),
        "headers": [(k.encode(), v.encode()) for k, v in headers],
    }  # fmt: skip
    await app(scope, receive, send)
    return statuses[0]


@pytest.mark.parametrize("name", ["agent-inbox", "executor"])
async def test_the_pull_apps_answer_deep_json_and_a_hung_up_client_with_a_400(
    fresh_database: Any, name: str
) -> None:
    # what the fuzz found when these apps joined: a RecursionError and Starlette's
    # ClientDisconnect came out of the app (a 500) instead of a Problem
    entry = by_name(name)
    app = entry.build(entry_env(fresh_database(entry.backend)))
    request = entry.request(random.Random(SEED), {})
    path = "/claim" if name == "executor" else "/v1/events/evt_1/ack"  # both read a body first
    headers = [h for h in request.headers if h[0] == "authorization"]
    try:
        assert await _post_raw(app, path, headers, [b"[" * 5000 + b"]" * 5000]) == 400
        assert await _post_raw(app, path, headers, [b'{"queues": ', b"..."]) == 400
    finally:
        await app.aclose()  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("name", "path"),
    [
        ("jobs-admin", "/api/jobs/jobs"),
        ("console", "/api/jobs/metrics"),
        ("agent-inbox", "/v1/events/evt_1/ack"),
        ("agent-inbox", "/v1/events/evt_1/ack/"),  # Starlette's trailing-slash redirect
        ("executor", "/claim"),
        ("executor", "/settle/"),
    ],
)
async def test_a_query_string_that_is_not_utf8_answers_400(
    fresh_database: Any, name: str, path: str
) -> None:
    # what the fuzz found once its queries held raw bytes past ASCII (a lenient HTTP parser
    # passes them on): building Starlette's request.url raised UnicodeDecodeError, so the
    # management app answered nothing and the agent and executor apps a 500
    entry = by_name(name)
    app = entry.build(entry_env(fresh_database(entry.backend)))
    request = entry.request(random.Random(SEED), {})
    headers = [h for h in request.headers if h[0] == "authorization"]
    try:
        for query in ("q=\xe9", "limit=\xff1"):
            draft = Draft("POST" if name in ("agent-inbox", "executor") else "GET", path, headers)
            draft.query = query
            answer = await send_to(app, draft, random.Random(0))
            assert answer.error is None and answer.status == 400, (query, answer)
            assert json.loads(answer.body)["code"] == "QUERY_INVALID"
        # percent-encoded, the same bytes are the app's to judge (never a 5xx)
        draft = Draft("GET" if name in ("jobs-admin", "console") else "POST", path, headers)
        draft.query = "q=%e9"
        answer = await send_to(app, draft, random.Random(0))
        assert answer.error is None and answer.status is not None and answer.status < 500
    finally:
        await app.aclose()  # type: ignore[attr-defined]


async def test_a_stream_upgrade_with_a_query_string_that_is_not_utf8_is_closed(
    fresh_database: Any,
) -> None:
    entry = by_name("agent-inbox")
    app = entry.build(entry_env(fresh_database(entry.backend)))
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "websocket.connect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "websocket", "asgi": {"version": "3.0"}, "http_version": "1.1",
        "scheme": "wss", "path": "/v1/agent/inbox/inb_1/stream", "raw_path": b"",
        "query_string": b"q=\xe9", "root_path": "", "client": ("127.0.0.1", 1),
        "server": ("chaos", 443), "subprotocols": [], "headers": [],
    }  # fmt: skip
    try:
        await app(scope, receive, send)
    finally:
        await app.aclose()  # type: ignore[attr-defined]
    assert sent == [{"type": "websocket.close", "code": 1008}]
