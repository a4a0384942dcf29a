"""drainpipe's own routing and WebSocket protocol (``drainpipe.http_routes``,
``drainpipe.http_websocket``), driven with raw ASGI messages: what the agent inbox and
the executor apps answer before and around their routes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from drainpipe.http import Request, Response, json_response
from drainpipe.http_routes import Route, Router, WebSocketRoute, compile_path
from drainpipe.http_websocket import WebSocket, WebSocketDisconnect


async def echo(request: Request) -> Response:
    return json_response(
        {
            "params": request.path_params,
            "query": request.query_params.getlist("q"),
            "last": request.query_params.get("q"),
            "path": request.url.path,
            "cookies": request.cookies,
            "client": list(request.client or ()),
            "body": (await request.body()).decode(),
        }
    )


async def talk(websocket: WebSocket) -> None:
    await websocket.accept()
    await websocket.send_text(websocket.path_params["name"])
    message = await websocket.receive()
    if message["type"] == "websocket.disconnect":
        raise WebSocketDisconnect(message.get("code", 1000))
    await websocket.send_text(str(message.get("text")).upper())
    await websocket.close(code=4000)


APP = Router(
    [
        Route("/items/{item_id}", echo, methods=["GET"]),
        Route("/items/{item_id}/notes", echo, methods=["POST", "PUT"]),
        WebSocketRoute("/talk/{name}", talk),
    ]
)


async def call(
    method: str,
    path: str,
    *,
    query: bytes = b"",
    headers: list[tuple[bytes, bytes]] | None = None,
    body: bytes = b"",
    root_path: str = "",
) -> tuple[int, dict[str, str], bytes]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http", "method": method, "path": path, "root_path": root_path,
        "query_string": query, "headers": headers or [], "client": ("10.0.0.1", 4567),
    }  # fmt: skip
    await APP(scope, receive, send)
    head = {k.decode(): v.decode() for k, v in sent[0]["headers"]}
    return sent[0]["status"], head, sent[1]["body"]


def test_a_template_matches_one_segment_per_parameter() -> None:
    pattern = compile_path("/v1/events/{event_id}/ack")
    assert pattern.fullmatch("/v1/events/evt_1/ack").groupdict() == {"event_id": "evt_1"}  # type: ignore[union-attr]
    assert pattern.fullmatch("/v1/events/a/b/ack") is None
    assert pattern.fullmatch("/v1/events//ack") is None
    assert compile_path("/a.b").fullmatch("/aXb") is None  # the rest is literal


async def test_a_route_gets_its_parameters_query_cookies_and_body() -> None:
    status, headers, body = await call(
        "POST",
        "/items/7/notes",
        query=b"q=1&q=%C3%A9&empty=",
        headers=[(b"cookie", b'session="abc"; theme=dark'), (b"content-length", b"2")],
        body=b"hi",
    )
    assert status == 200 and headers["content-type"] == "application/json"
    assert json.loads(body) == {
        "params": {"item_id": "7"},
        "query": ["1", "é"],
        "last": "é",
        "path": "/items/7/notes",
        "cookies": {"session": "abc", "theme": "dark"},
        "client": ["10.0.0.1", 4567],
        "body": "hi",
    }


async def test_get_routes_answer_head_and_other_methods_get_405_with_allow() -> None:
    assert (await call("HEAD", "/items/1"))[0] == 200
    status, headers, body = await call("DELETE", "/items/1/notes")
    assert status == 405 and headers["allow"] == "POST, PUT"
    assert headers["content-type"] == "application/problem+json"
    assert json.loads(body)["code"] == "METHOD_NOT_ALLOWED"


async def test_an_unknown_path_is_a_404_problem_and_a_trailing_slash_redirects() -> None:
    status, _, body = await call("GET", "/nowhere")
    assert status == 404 and json.loads(body)["code"] == "ROUTE_NOT_FOUND"
    status, headers, _ = await call("GET", "/items/é/", query=b"q=1")
    assert status == 307 and headers["location"] == "/items/%C3%A9?q=1"
    # the WebSocket route is not an HTTP route
    assert (await call("GET", "/talk/x"))[0] == 404


async def test_routes_match_below_the_mount_and_problems_name_the_full_path() -> None:
    status, _, body = await call("GET", "/api/items/3", root_path="/api")
    assert status == 200 and json.loads(body)["params"] == {"item_id": "3"}
    status, _, body = await call("GET", "/api/nowhere", root_path="/api")
    assert status == 404 and json.loads(body)["instance"] == "/api/nowhere"


async def test_a_query_string_that_is_not_utf8_is_refused_before_routing() -> None:
    status, _, body = await call("GET", "/nowhere/", query=b"q=\xe9")
    assert status == 400 and json.loads(body)["code"] == "QUERY_INVALID"


async def socket(
    path: str, incoming: list[dict[str, Any]], query: bytes = b""
) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return incoming.pop(0)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "websocket", "path": path, "query_string": query, "headers": []}
    await APP(scope, receive, send)
    return sent


async def test_a_websocket_is_accepted_after_its_connect_and_closed_with_its_code() -> None:
    sent = await socket(
        "/talk/ann",
        [{"type": "websocket.connect"}, {"type": "websocket.receive", "text": "hello"}],
    )
    assert sent == [
        {"type": "websocket.accept", "subprotocol": None, "headers": []},
        {"type": "websocket.send", "text": "ann"},
        {"type": "websocket.send", "text": "HELLO"},
        {"type": "websocket.close", "code": 4000, "reason": ""},
    ]


async def test_a_websocket_to_an_unknown_path_or_with_a_bad_query_is_closed_unaccepted() -> None:
    assert await socket("/nowhere", [{"type": "websocket.connect"}]) == [
        {"type": "websocket.close", "code": 1000, "reason": ""}
    ]
    assert await socket("/talk/x", [{"type": "websocket.connect"}], query=b"q=\xff") == [
        {"type": "websocket.close", "code": 1008}
    ]


async def test_the_websocket_protocol_order_is_kept() -> None:
    incoming = [{"type": "websocket.connect"}, {"type": "websocket.disconnect", "code": 1001}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return incoming.pop(0)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    websocket = WebSocket({"type": "websocket", "path": "/"}, receive, send)
    with pytest.raises(RuntimeError):
        await websocket.send_text("too early")  # not accepted yet
    await websocket.accept()
    assert (await websocket.receive())["type"] == "websocket.disconnect"
    with pytest.raises(RuntimeError):
        await websocket.receive()  # nothing after a disconnect
    await websocket.close()
    with pytest.raises(RuntimeError):
        await websocket.close()  # closed already

    async def gone(message: dict[str, Any]) -> None:
        raise OSError("the server could not write")

    lost = WebSocket({"type": "websocket", "path": "/"}, receive, gone)
    lost.client_state = lost.application_state = type(lost.client_state).CONNECTED
    with pytest.raises(WebSocketDisconnect) as raised:
        await lost.send_text("x")
    assert raised.value.code == 1006
