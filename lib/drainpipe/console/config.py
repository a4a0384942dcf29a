"""Configuring the Job Inbox from the environment (``functions/jobs_admin.py``, ``drainpipe dev``).

``MANAGEMENT_TOKENS`` lists who may call it, comma separated, each ``token=actor:role``
(role ``viewer`` or ``admin``; the actor is what audit rows name), e.g.
``MANAGEMENT_TOKENS="3f9c...=ops@example.com:admin,7a1b...=oncall@example.com:viewer"``.
Tokens are at least 16 characters; no error message ever repeats one.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping
from typing import Any

from ..principals import ROLES, Principal


def management_tokens(text: str) -> dict[str, Principal]:
    """The token table of a ``MANAGEMENT_TOKENS`` value; ``ValueError`` naming the entry's
    position (never its text) when one is malformed."""
    table: dict[str, Principal] = {}
    for number, entry in enumerate((part.strip() for part in text.split(",")), start=1):
        if not entry:
            continue
        token, equals, who = entry.partition("=")
        actor, colon, role = who.rpartition(":")
        token, actor, role = token.strip(), actor.strip(), role.strip()
        if not equals or not colon or not actor or role not in ROLES:
            raise ValueError(
                f"MANAGEMENT_TOKENS entry {number} must read token=actor:role"
                f" (role {' or '.join(ROLES)})"
            )
        if len(token) < 16:
            raise ValueError(f"MANAGEMENT_TOKENS entry {number}: tokens are at least 16 characters")
        if token in table:
            raise ValueError(f"MANAGEMENT_TOKENS entry {number} repeats an earlier token")
        table[token] = Principal(actor, role)
    if not table:
        raise ValueError("MANAGEMENT_TOKENS lists no token")
    return table


def derived_cursor_secret(tokens: Mapping[str, Any]) -> bytes:
    """A cursor key every instance with the same token table derives alike (so a cursor
    from one serverless instance opens on the next), and which changes when the table does.
    Set ``MANAGEMENT_CURSOR_SECRET`` to keep cursors across a token rotation."""
    material = "\n".join(sorted(tokens)).encode("utf-8")
    return hmac.new(material, b"drainpipe job inbox cursor secret", hashlib.sha256).digest()


def new_token() -> str:
    """A fresh management token (43 URL-safe characters)."""
    return secrets.token_urlsafe(32)
