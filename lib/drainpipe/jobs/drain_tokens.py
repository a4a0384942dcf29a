"""The drain route's credentials: one secret that drains everything, or scoped executor
tokens (``{token: queues}``) that each drain only their own queues (docs/reference.md section 9).

Every check compares the SHA-256 digest of the presented token with the digest of **every**
configured token, in constant time per comparison and without stopping at a match, so the
time taken says neither whether a token is close, how long the secret is, nor which one
matched. The single secret is at least 32 characters. Tokens are never logged or put in
errors.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Collection, Mapping, Sequence
from typing import Any

#: The scope of the single route secret: every source.
EVERYTHING: frozenset[str] = frozenset({"*"})
#: The shortest single drain secret (``dev_drain_secret`` writes 64 hex characters).
MIN_SECRET_LENGTH = 32


def _digest(token: bytes) -> bytes:
    return hashlib.sha256(token).digest()


def _forms(header: str | None) -> tuple[bytes, bytes]:
    """The token of an ``Authorization`` value (``Bearer`` optional, any case) as sent on
    the wire (servers hand header bytes over as latin-1) and as text (a header built by
    hand holds the real characters)."""
    token = (header or "").strip()
    if token[:7].lower() == "bearer ":
        token = token[7:].strip()
    try:
        wire = token.encode("latin-1")
    except UnicodeEncodeError:
        wire = b""
    return _digest(wire), _digest(token.encode("utf-8", "surrogatepass"))


class DrainCredentials:
    """What a drain route accepts, and which sources each credential may drain."""

    __slots__ = ("_entries", "scoped")

    def __init__(self, secret: Any, sources: Collection[str]) -> None:
        if isinstance(secret, str):
            if not secret:
                raise ValueError("drain_route needs a secret, such as os.environ['CRON_SECRET']")
            if len(secret) < MIN_SECRET_LENGTH:
                raise ValueError(
                    f"The drain secret must be at least {MIN_SECRET_LENGTH} characters"
                    " (e.g. 64 random hex characters: python -c 'import secrets;"
                    " print(secrets.token_hex(32))')"
                )
            digest = _digest(secret.encode("utf-8", "surrogatepass"))
            self._entries: list[tuple[bytes, frozenset[str]]] = [(digest, EVERYTHING)]
            self.scoped = False
            return
        if not isinstance(secret, Mapping) or not secret:
            raise ValueError(
                "drain_route needs a secret: a string, or a mapping of executor token to"
                " the queues it may drain"
            )
        entries: list[tuple[bytes, frozenset[str]]] = []
        for position, (token, queues) in enumerate(secret.items(), start=1):
            if not isinstance(token, str) or len(token) < 16:
                raise ValueError(f"drain token {position} must be a string of 16+ characters")
            if isinstance(queues, str) or not isinstance(queues, Sequence | Collection):
                raise ValueError(f"drain token {position}: give a list of queue names")
            names = frozenset(queues)
            if not names:
                raise ValueError(f"drain token {position} has no queues")
            unknown = sorted(str(name) for name in names - set(sources))
            if unknown:
                raise ValueError(
                    f"drain token {position} names {', '.join(unknown)}: not a queue or inbox"
                    " this route drains"
                )
            entries.append((_digest(token.encode("utf-8", "surrogatepass")), names))
        self._entries = entries
        self.scoped = True

    def scope(self, header: str | None) -> frozenset[str] | None:
        """The sources the presented credential may drain (:data:`EVERYTHING` for the single
        secret); None when it matches no credential."""
        wire, text = _forms(header)
        found: frozenset[str] | None = None
        for token, names in self._entries:
            # both forms against every token, always: no early exit on a match
            match = hmac.compare_digest(wire, token) | hmac.compare_digest(text, token)
            if match:
                found = names
        return found


def allowed(scope: frozenset[str], name: str) -> bool:
    return scope is EVERYTHING or name in scope
