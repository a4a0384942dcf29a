"""The opaque cursors of ``Jobs.list_jobs``: a :class:`~drainpipe.models.Position` with the
filters it was made for, signed with HMAC-SHA256.

The key is ``Jobs(..., cursor_secret=...)``; without one, a random key made once per process,
so a cursor is good within the process that made it (give every process the same secret when
cursors cross processes, as behind a load balancer). A cursor that is altered, made with
another key or for other filters is ``invalid_request`` with code ``CURSOR_INVALID``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

from ..errors import invalid_request
from ..models import Position

CURSOR_INVALID = "CURSOR_INVALID"
_PROCESS_KEY = secrets.token_bytes(32)
_TAG_BYTES = 16


def cursor_key(secret: str | bytes | None) -> bytes:
    """The signing key: the given secret (at least 16 bytes), else this process's key."""
    if secret is None:
        return _PROCESS_KEY
    if isinstance(secret, str):
        secret = secret.encode()
    if not isinstance(secret, bytes) or len(secret) < 16:
        raise ValueError("cursor_secret must be a str or bytes of at least 16 bytes")
    return secret


def _scope(queue: str | None, state: str | None, tenant: str | None) -> bytes:
    return "\x00".join(("q", queue or "", "s", state or "", "t", tenant or "")).encode()


def _tag(key: bytes, body: bytes, scope: bytes) -> bytes:
    return hmac.new(key, body + b"\x01" + scope, hashlib.sha256).digest()[:_TAG_BYTES]


def sign_cursor(
    key: bytes, position: Position, *, queue: str | None, state: str | None, tenant: str | None
) -> str:
    body = str(position).encode()
    token = body + b"~" + _tag(key, body, _scope(queue, state, tenant))
    return base64.urlsafe_b64encode(token).decode().rstrip("=")


def read_cursor(
    key: bytes, cursor: str, *, queue: str | None, state: str | None, tenant: str | None
) -> Position:
    """The position a cursor of :func:`sign_cursor` holds, checked against its filters."""
    bad = invalid_request("cursor is not valid for this listing", code=CURSOR_INVALID)
    if not isinstance(cursor, str) or not cursor or len(cursor) > 200:
        raise bad
    try:
        token = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    except (ValueError, TypeError):
        raise bad from None
    # the tag is the last bytes (it may hold any byte, "~" too), after one "~"
    body, sep, tag = (
        token[: -_TAG_BYTES - 1],
        token[-_TAG_BYTES - 1 : -_TAG_BYTES],
        token[-_TAG_BYTES:],
    )
    if sep != b"~" or not body or base64.urlsafe_b64encode(token).decode().rstrip("=") != cursor:
        raise bad
    if not hmac.compare_digest(tag, _tag(key, body, _scope(queue, state, tenant))):
        raise bad
    try:
        return Position.parse(body.decode("ascii"))
    except (ValueError, UnicodeDecodeError):
        raise bad from None
