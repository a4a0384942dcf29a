"""Signed page cursors for the Job Inbox (docs/reference.md §10).

A cursor carries a position (where the next page starts) and an HMAC-SHA256 tag over that
position *and* everything the page depends on: the route, its filters, the actor asking and
the deployment ``target``. The server keeps no cursor state; a cursor is worthless in
another user's hands, on another route, with other filters or against another target, and
an edited one fails its tag. Every such case is the same answer: 400 ``CURSOR_INVALID``
(which of them it was is not said: a probe learns nothing).

    text = signer.sign("jobs", {"queue": "emails"}, actor, position)
    position = signer.open(text, "jobs", {"queue": "emails"}, actor)   # or CURSOR_INVALID
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections.abc import Mapping

from ..errors import DrainpipeError, invalid_request

CURSOR_INVALID = "CURSOR_INVALID"
# a cursor is a short position plus a 32-byte tag; anything longer is not one of ours
MAX_CURSOR_LENGTH = 512
_VERSION = "c1"
_MIN_SECRET_BYTES = 16


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def cursor_invalid() -> DrainpipeError:
    return invalid_request(
        "This cursor is not valid here: it was altered, or made for another user, route,"
        " filter or target. Start again from the first page.",
        code=CURSOR_INVALID,
    )


class CursorSigner:
    """Signs and opens cursors with ``secret`` (bytes or text, at least 16 bytes) for one
    ``target`` (the deployment's name, e.g. ``"production"``)."""

    def __init__(self, secret: str | bytes, target: str) -> None:
        key = secret.encode("utf-8") if isinstance(secret, str) else secret
        if not isinstance(key, bytes) or len(key) < _MIN_SECRET_BYTES:
            raise ValueError("cursor_secret must be at least 16 bytes (e.g. secrets.token_hex())")
        if not isinstance(target, str) or not target.strip() or len(target) > 200:
            raise ValueError("target must be a non-empty string of at most 200 characters")
        # a key of its own for cursors, so the secret can be shared with nothing else by accident
        self._key = hmac.new(key, b"drainpipe job inbox cursors", hashlib.sha256).digest()
        self.target = target

    def _tag(self, route: str, filters: Mapping[str, str | None], actor: str, body: str) -> bytes:
        # canonical JSON: a filter value can never be confused with a separator
        bound = json.dumps(
            [_VERSION, route, sorted(filters.items()), actor, self.target, body],
            separators=(",", ":"),
            ensure_ascii=True,
        )
        return hmac.new(self._key, bound.encode("ascii"), hashlib.sha256).digest()

    def sign(self, route: str, filters: Mapping[str, str | None], actor: str, position: str) -> str:
        body = _b64(position.encode("utf-8"))
        return f"{body}.{_b64(self._tag(route, filters, actor, body))}"

    def open(self, cursor: str, route: str, filters: Mapping[str, str | None], actor: str) -> str:
        """The position ``cursor`` carries, or ``invalid_request``/``CURSOR_INVALID``."""
        if not isinstance(cursor, str) or not 0 < len(cursor) <= MAX_CURSOR_LENGTH:
            raise cursor_invalid()
        body, dot, tag_text = cursor.partition(".")
        if not dot or not body or not tag_text:
            raise cursor_invalid()
        try:
            tag = _unb64(tag_text)
            position = _unb64(body).decode("utf-8")
        except (binascii.Error, ValueError):
            raise cursor_invalid() from None
        if _b64(tag) != tag_text:  # base64's spare bits: one tag, one spelling
            raise cursor_invalid()
        if not hmac.compare_digest(tag, self._tag(route, filters, actor, body)):
            raise cursor_invalid()
        return position
