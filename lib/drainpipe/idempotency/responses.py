"""Reading a handler's response (Starlette, ours, or an ASGI app's messages) into what
is stored and replayed: status, body bytes, content type."""

from __future__ import annotations

from typing import Any

from ..http import (
    Message,
    Response,
)
from ..http_starlette import rebuilt_starlette_response, starlette_response
from ..models import Begin as Begin  # re-exported: drainpipe.Begin lives here for users


def _storable(status: int) -> bool:
    """2xx, 3xx and 4xx responses are stored; after a 1xx/5xx the key is released."""
    return 200 <= status < 500


def _stored_status(start: Message | None) -> bool:
    return start is None or _storable(int(start.get("status", 200)))


async def _read_response(response: Any) -> tuple[int, bytes, str | None, Any]:
    """(status, body, content type, the response to send) for ours or a Starlette one.

    A Starlette response without a ready ``body`` (streaming, file) is read in full and
    rebuilt as a plain response with the same status, headers and background task."""
    if isinstance(response, Response):
        return response.status, response.body, response.content_type, response
    status = int(response.status_code)
    content_type = response.headers.get("content-type")
    body = getattr(response, "body", None)
    if isinstance(body, bytes | bytearray | memoryview):
        return status, bytes(body), content_type, response
    if hasattr(response, "body_iterator"):
        parts = []
        async for chunk in response.body_iterator:
            parts.append(chunk.encode(response.charset) if isinstance(chunk, str) else bytes(chunk))
        data = b"".join(parts)
    else:
        data = await _run_for_body(response)
    return status, data, content_type, rebuilt_starlette_response(response, status, data)


async def _run_for_body(response: Any) -> bytes:
    """Run a response that only knows how to send itself (e.g. FileResponse) into a buffer;
    its background task is kept for the rebuilt response, not run here."""
    import asyncio

    background = getattr(response, "background", None)
    response.background = None
    parts: list[bytes] = []
    never = asyncio.Event()

    async def receive() -> Message:
        await never.wait()  # no disconnect: the client is still there
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        if message["type"] == "http.response.body":
            parts.append(bytes(message.get("body", b"")))

    scope = {
        "type": "http",
        "method": "GET",
        "path": "/",
        "headers": [],
        "asgi": {"spec_version": "2.4"},
    }
    try:
        await response(scope, receive, send)
    finally:
        response.background = background
    return b"".join(parts)


def _to_starlette(response: Response) -> Any:
    """A Starlette response with exactly our headers: ``Response.to_starlette`` would add a
    charset to a ``text/*`` content type, and a replay must carry the stored one unchanged."""
    return starlette_response(response, exact=True)
