"""Who is calling an HTTP app of drainpipe's: the Job Inbox management API
(docs/reference.md §10) and the agent inbox (docs/reference.md §11) both ask an
``authorize(request)`` callable for a :class:`Principal`.

:func:`bearer_tokens` builds that callable from a fixed table of tokens. Tokens are compared
in constant time and only their SHA-256 digests are kept in memory after construction, so a
heap dump or a ``repr`` of the authorizer does not hand them out.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

Role = Literal["viewer", "admin"]
ROLES: tuple[Role, ...] = ("viewer", "admin")

#: ``authorize(request) -> Principal | None``, plain or async; ``request`` is the framework's
#: request object (Starlette's ``Request`` for drainpipe's own apps).
Authorize: TypeAlias = Callable[[Any], "Principal | Awaitable[Principal | None] | None"]


@dataclass(frozen=True)
class Principal:
    """An authenticated caller: ``actor`` names it in audit rows, ``role`` bounds what it may
    change (``"viewer"`` reads, ``"admin"`` also cancels and replays), ``inboxes`` bounds which
    agent inboxes it may pull from, settle in or read raw (a collection of ids, or ``"*"``)."""

    actor: str
    role: Role = "viewer"
    inboxes: Collection[str] | Literal["*"] = "*"

    def __post_init__(self) -> None:
        if not isinstance(self.actor, str) or not self.actor.strip() or len(self.actor) > 200:
            raise ValueError("Principal.actor must be a non-empty string of at most 200 characters")
        if self.role not in ROLES:
            raise ValueError(f'Principal.role must be "viewer" or "admin", not {self.role!r}')
        if self.inboxes != "*":
            if isinstance(self.inboxes, str) or not all(
                isinstance(inbox, str) for inbox in self.inboxes
            ):
                raise ValueError('Principal.inboxes must be "*" or a collection of inbox ids')
            object.__setattr__(self, "inboxes", frozenset(self.inboxes))

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    def may_use_inbox(self, inbox_id: str) -> bool:
        return self.inboxes == "*" or inbox_id in self.inboxes


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


def bearer_tokens(tokens: Mapping[str, Principal]) -> Callable[[Any], Principal | None]:
    """An ``authorize`` that reads ``Authorization: Bearer <token>`` and answers the token's
    principal, or ``None`` (→ 401) for a missing, malformed or unknown token.

    Every known token's digest is compared with the presented one (``hmac.compare_digest``),
    so the time taken does not depend on which token, or how much of one, matched.
    """
    table: list[tuple[bytes, Principal]] = []
    for token, principal in tokens.items():
        if not isinstance(token, str) or len(token) < 16:
            raise ValueError("bearer tokens must be strings of at least 16 characters")
        if not isinstance(principal, Principal):
            raise TypeError("bearer_tokens maps each token to a drainpipe.Principal")
        table.append((_digest(token), principal))
    if not table:
        raise ValueError("bearer_tokens needs at least one token")

    def authorize(request: Any) -> Principal | None:
        header = request.headers.get("authorization", "")
        scheme, _, presented = header.partition(" ")
        if scheme.lower() != "bearer" or not presented.strip():
            return None
        digest = _digest(presented.strip())
        found: Principal | None = None
        for known, principal in table:
            if hmac.compare_digest(known, digest):
                found = principal
        return found

    return authorize
