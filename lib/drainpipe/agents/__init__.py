"""The agent inbox (docs/reference.md section 11): inboxes with leases over webhook messages, pulled
by agents over Python, HTTP or a WebSocket stream, every settlement fenced by its lease id.

``inboxes`` (inboxes, subscriptions, settlements), ``pull`` (next, long polls, peek,
claim), ``envelope`` (what an agent is handed), ``app`` (the HTTP routes), ``stream`` (the
WebSocket), ``listen`` (NOTIFY wake-ups on a long-lived server). See docs/agent-inbox.md.
"""

from __future__ import annotations

from .envelope import UNTRUSTED, Envelope, Source
from .inboxes import AgentInboxes, InboxSettings, Settlement
from .pull import AgentInbox, ClaimResult, EventPage

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
