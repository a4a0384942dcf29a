"""The agent inbox (docs/reference.md section 11): inboxes with leases over webhook messages, pulled
by agents over Python, HTTP or a WebSocket stream, every settlement fenced by its lease id.

``store`` (inboxes, subscriptions, release and extend), ``inboxes`` (batched acks,
wake-ups, the app), ``reads`` (envelopes, peek, claim), ``pull`` (next, long polls),
``answers`` (what the calls return), ``envelope`` (what an agent is handed), ``app`` (the
HTTP routes), ``stream`` (the WebSocket), ``listen`` (NOTIFY wake-ups on a long-lived server). See docs/agent-inbox.md.
"""

from __future__ import annotations

from .answers import ClaimResult, EventPage, InboxSettings, Settlement
from .envelope import UNTRUSTED, Envelope, Source
from .inboxes import AgentInboxes
from .pull import AgentInbox

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
