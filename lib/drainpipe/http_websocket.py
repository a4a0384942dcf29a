"""The ASGI WebSocket protocol for drainpipe's apps (the agent inbox's stream): accept,
receive, send text, close, and the order these may come in.

    await websocket.accept()                 # waits for the client's connect first
    message = await websocket.receive()      # {"type": "websocket.receive", "text": ...}
    await websocket.send_text("...")
    await websocket.close(code=4403)         # before accept: the server answers 403

A ``websocket.disconnect`` message is handed to the caller like any other (it raises
:class:`WebSocketDisconnect` itself where it stops reading); receiving after it, or sending
after a close, is a ``RuntimeError``. A send that fails because the client is gone
(an ``OSError`` from the server) raises :class:`WebSocketDisconnect` with code 1006.
"""

from __future__ import annotations

import enum

from .http import Headers, Message, Receive, Scope, Send
from .http_connection import Connection


class WebSocketDisconnect(Exception):
    """The client closed the socket (``code``: its close code)."""

    def __init__(self, code: int = 1000, reason: str | None = None) -> None:
        super().__init__(code, reason)
        self.code = code
        self.reason = reason or ""


class SocketState(enum.Enum):
    CONNECTING = 0
    CONNECTED = 1
    DISCONNECTED = 2


_EXPECTED_FROM_CLIENT = {
    SocketState.CONNECTING: ("websocket.connect",),
    SocketState.CONNECTED: ("websocket.receive", "websocket.disconnect"),
}
_ALLOWED_TO_SEND = {
    SocketState.CONNECTING: ("websocket.accept", "websocket.close"),
    SocketState.CONNECTED: ("websocket.send", "websocket.close"),
}


class WebSocket(Connection):
    """One WebSocket connection of an ASGI server; reads like a request (``headers``,
    ``query_params``, ``path_params``, ``url``, ``cookies``, ``client``), so the same
    ``authorize(request)`` serves both."""

    def __init__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "websocket":
            raise ValueError("a WebSocket needs an ASGI scope of type websocket")
        self.scope = scope
        self.headers = Headers(scope.get("headers", []))
        self.path_params: dict[str, str] = {}  # set by the router that matched the path
        self._receive = receive
        self._send = send
        self.client_state = SocketState.CONNECTING
        self.application_state = SocketState.CONNECTING

    async def receive(self) -> Message:
        """The client's next message (the first is its ``websocket.connect``)."""
        expected = _EXPECTED_FROM_CLIENT.get(self.client_state)
        if expected is None:
            raise RuntimeError("the client already disconnected: nothing more to receive")
        message = await self._receive()
        if message["type"] not in expected:
            raise RuntimeError(f"expected {' or '.join(expected)}, got {message['type']}")
        if message["type"] == "websocket.connect":
            self.client_state = SocketState.CONNECTED
        elif message["type"] == "websocket.disconnect":
            self.client_state = SocketState.DISCONNECTED
        return message

    async def send(self, message: Message) -> None:
        allowed = _ALLOWED_TO_SEND.get(self.application_state)
        if allowed is None:
            raise RuntimeError("the socket is closed: nothing more can be sent")
        if message["type"] not in allowed:
            raise RuntimeError(f"expected {' or '.join(allowed)}, got {message['type']}")
        if message["type"] == "websocket.close":
            self.application_state = SocketState.DISCONNECTED
        elif message["type"] == "websocket.accept":
            self.application_state = SocketState.CONNECTED
        try:
            await self._send(message)
        except OSError:
            # the server could not write: the client is gone
            self.application_state = SocketState.DISCONNECTED
            raise WebSocketDisconnect(1006) from None

    async def accept(self, subprotocol: str | None = None) -> None:
        if self.client_state == SocketState.CONNECTING:
            await self.receive()  # the client's connect comes first
        await self.send({"type": "websocket.accept", "subprotocol": subprotocol, "headers": []})

    async def send_text(self, data: str) -> None:
        await self.send({"type": "websocket.send", "text": data})

    async def close(self, code: int = 1000, reason: str | None = None) -> None:
        await self.send({"type": "websocket.close", "code": code, "reason": reason or ""})


__all__ = ["SocketState", "WebSocket", "WebSocketDisconnect"]
