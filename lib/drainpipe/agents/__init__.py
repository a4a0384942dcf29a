"""The agent inbox (docs/reference.md section 11): inboxes with leases over webhook messages, pulled
by agents over Python, HTTP or a WebSocket stream, every settlement fenced by its lease id.

``store`` (inboxes, subscriptions, the overview, release and extend, with their
statements), ``inboxes`` (the async API: batched acks, next and its long polls, wake-ups,
the app), ``reads`` (an inbox's settings, pull plans, the envelope of a handed-out row and
its view), ``peeks`` (peek, claim), ``statements`` (the pull's and the ack's statements,
the checks of what agents send, event ids and lease ids), ``answers`` (what the calls
return), ``app`` (the HTTP routes), ``stream`` (the WebSocket), ``listen`` (NOTIFY wake-ups on a long-lived
server). See docs/agent-inbox.md.
``AgentInboxes`` and ``AgentInbox`` load on first use (the sync twin imports no asyncio).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .answers import ClaimResult, EventPage, InboxSettings, Settlement
from .reads import UNTRUSTED, Envelope, Source

if TYPE_CHECKING:
    from .inboxes import AgentInbox, AgentInboxes

__all__ = [
    "UNTRUSTED",
    "AgentInbox",
    "AgentInboxes",
    "ClaimResult",
    "Envelope",
    "EventPage",
    "InboxSettings",
    "Settlement",
    "Source",
]

#: the async classes, loaded on first use: their modules import asyncio
_LAZY = {"AgentInboxes": ".inboxes", "AgentInbox": ".inboxes"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value
