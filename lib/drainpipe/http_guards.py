"""Guards every HTTP entry of drainpipe puts in front of its own code (docs/reference.md,
"Hardening"): request bodies read as a capped stream, writes carrying cookies refused
unless they come from an allowed origin, and query strings that are not UTF-8 refused.

Both run before authentication and before anything is stored, so an unauthenticated
client can neither make a server hold a large body nor ride a signed-in browser's cookies.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Collection, Mapping
from typing import Any
from urllib.parse import urlsplit

from .errors import DrainpipeError

BODY_TOO_LARGE = "BODY_TOO_LARGE"
CROSS_SITE_REQUEST = "CROSS_SITE_REQUEST"
QUERY_INVALID = "QUERY_INVALID"

#: The body caps of the apps drainpipe serves (the executor's depends on its queues).
AGENT_MAX_BODY_BYTES = 128 * 1024
MANAGEMENT_MAX_BODY_BYTES = 64 * 1024
EXECUTOR_BODY_MARGIN = 16 * 1024

_CONTENT_LENGTH = re.compile(r"[0-9]{1,19}")
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
_DEFAULT_PORTS = {"http": "80", "https": "443", "ws": "80", "wss": "443"}


def body_too_large(max_bytes: int) -> DrainpipeError:
    """413 ``BODY_TOO_LARGE``."""
    return DrainpipeError(
        "invalid_request",
        f"The request body is larger than {max_bytes} bytes",
        code=BODY_TOO_LARGE,
        status=413,
    )


def query_refusal(scope: Mapping[str, Any]) -> DrainpipeError | None:
    """400 ``QUERY_INVALID`` when the raw query string is not UTF-8, else None.

    HTTP servers hand the query string on as the bytes received, and a lenient parser lets
    bytes past ASCII through; decoding them as UTF-8 later (a framework's ``request.url``,
    a redirect's ``Location``) would raise, and answer 500."""
    raw = scope.get("query_string") or b""
    try:
        bytes(raw).decode("utf-8")
    except (UnicodeDecodeError, TypeError):
        return DrainpipeError(
            "invalid_request",
            "The query string is not UTF-8 (percent-encode it)",
            code=QUERY_INVALID,
            status=400,
        )
    return None


def declared_too_large(headers: Mapping[str, str], max_bytes: int) -> bool:
    """True when a well-formed ``Content-Length`` already says the body is over the cap."""
    declared = headers.get("content-length")
    return (
        declared is not None
        and _CONTENT_LENGTH.fullmatch(declared.strip()) is not None
        and int(declared) > max_bytes
    )


async def read_capped(
    chunks: AsyncIterator[bytes],
    max_bytes: int,
    headers: Mapping[str, str] | None = None,
    *,
    error: DrainpipeError | None = None,
) -> bytes:
    """The whole body of ``chunks``, or ``error`` (413 ``BODY_TOO_LARGE``) as soon as it
    passes ``max_bytes``: reading stops there, so the rest is never buffered (the server
    stops reading the socket once its own small buffer is full). A ``Content-Length`` over
    the cap is refused before anything is read."""
    refusal = error or body_too_large(max_bytes)
    if headers is not None and declared_too_large(headers, max_bytes):
        raise refusal
    parts: list[bytes] = []
    size = 0
    try:
        async for chunk in chunks:
            size += len(chunk)
            if size > max_bytes:
                raise refusal
            parts.append(chunk)
    finally:
        close = getattr(chunks, "aclose", None)
        if close is not None:
            await close()
    return b"".join(parts)


async def read_request_body(request: Any, max_bytes: int) -> bytes:
    """A request's body (ours or Starlette's) through :func:`read_capped`, kept on the
    request so a later ``await request.body()`` (a handler, the idempotency fingerprint)
    reads it again instead of an empty stream. A client that hung up mid-body → 400."""
    from .http import body_incomplete, is_client_disconnect

    cached = getattr(request, "_body", None)
    if isinstance(cached, bytes):
        if len(cached) > max_bytes:
            raise body_too_large(max_bytes)
        return cached
    try:
        data = await read_capped(request.stream(), max_bytes, request.headers)
    except DrainpipeError:
        raise
    except Exception as exc:
        if is_client_disconnect(exc):
            raise body_incomplete() from exc
        raise
    request._body = data
    return data


# -- cross-site writes -----------------------------------------------------------------------


def normalize_origin(origin: str) -> str | None:
    """``scheme://host[:port]`` in lower case without a default port, or None when the text
    is not an origin (``null``, a path, no host)."""
    text = origin.strip().lower().rstrip("/")
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname or parts.path:
        return None
    if parts.query or parts.fragment or parts.username or parts.password:
        return None
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    if port is not None and str(port) != _DEFAULT_PORTS[parts.scheme]:
        host = f"{host}:{port}"
    return f"{parts.scheme}://{host}"


def check_origins(allowed_origins: Collection[str] | None) -> frozenset[str] | None:
    """The ``allowed_origins`` option, normalized; ``ValueError`` for an entry that is not an
    origin (``https://admin.example.com``). None: the request's own host only."""
    if allowed_origins is None:
        return None
    if isinstance(allowed_origins, str):
        raise ValueError("allowed_origins must be a collection of origins, not one string")
    found: set[str] = set()
    for entry in allowed_origins:
        origin = normalize_origin(entry) if isinstance(entry, str) else None
        if origin is None:
            raise ValueError(
                f"allowed_origins entries are origins such as https://admin.example.com,"
                f" not {entry!r}"
            )
        found.add(origin)
    return frozenset(found)


def _host_of(origin: str) -> str:
    netloc = origin.split("://", 1)[1]
    return netloc


def _request_host(headers: Mapping[str, str]) -> str | None:
    host = (headers.get("host") or "").strip().lower()
    if not host:
        return None
    for port in ("80", "443"):
        if host.endswith(":" + port):
            host = host[: -len(port) - 1]
    return host


def cross_site_refusal(
    method: str,
    headers: Mapping[str, str],
    allowed_origins: frozenset[str] | None,
    *,
    websocket: bool = False,
) -> DrainpipeError | None:
    """403 ``CROSS_SITE_REQUEST`` for a write (or a WebSocket upgrade) that carries a
    ``Cookie`` header and does not come from an allowed origin; None to go on.

    Allowed: ``Sec-Fetch-Site: same-origin`` (not for an upgrade, whose ``Origin`` is always
    sent), or an ``Origin`` in ``allowed_origins`` (None: the origin whose host is the
    request's ``Host``). A request without cookies is never refused: a bearer token cannot be
    sent by another site's page, a cookie can."""
    if not websocket and method.upper() in _SAFE_METHODS:
        return None
    if "cookie" not in headers:
        return None
    if not websocket and (headers.get("sec-fetch-site") or "").strip().lower() == "same-origin":
        return None
    origin = normalize_origin(headers.get("origin") or "")
    if origin is not None:
        if allowed_origins is not None:
            if origin in allowed_origins:
                return None
        elif _host_of(origin) == _request_host(headers):
            return None
    return DrainpipeError(
        "forbidden",
        "A request carrying cookies must come from an allowed Origin",
        code=CROSS_SITE_REQUEST,
    )


__all__ = [
    "AGENT_MAX_BODY_BYTES",
    "BODY_TOO_LARGE",
    "CROSS_SITE_REQUEST",
    "EXECUTOR_BODY_MARGIN",
    "MANAGEMENT_MAX_BODY_BYTES",
    "body_too_large",
    "check_origins",
    "cross_site_refusal",
    "declared_too_large",
    "normalize_origin",
    "read_capped",
    "read_request_body",
]
