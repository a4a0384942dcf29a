# generated from lib/drainpipe/agents/peeks.py by ./scripts/sync-twin: do not edit.
# Change the async source (or tools/sync_twin.py) and run ./scripts/sync-twin again.
"""The mailbox-style peek of an agent inbox (``events``: open events, oldest first, without
leasing them, a page at a time under a signed cursor) and ``claim`` (lease the events you
chose). :class:`~drainpipe.agents.inboxes.AgentInbox` adds the long poll on top;
``drainpipe.sync.agents_peeks`` is this module's generated sync twin.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import struct
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from ..agents import statements as ops
from ..agents.answers import ClaimResult, EventPage
from ..agents.statements import (
    ACK_MODE_NOT_ALLOWED,
    CURSOR_INVALID,
    MAX_EVENTS,
    MAX_PEEK,
    Filters,
    bad_parameter,
    filters_of,
    parse_event_id,
    whole_number,
)
from ..errors import DrainpipeError
from .agents_reads import AgentInboxReads, read_settings


class AgentInboxPeeks(AgentInboxReads):
    """One inbox's envelopes, pull plans, peeks and claims."""

    # -- the cursor --------------------------------------------------------------------

    def _cursor_mac(self, after: int, filters: Filters) -> bytes:
        text = "\0".join([self.id, str(after), *(f or "" for f in filters)])
        return hmac.new(self._agents.secret, b"cursor\0" + text.encode(), hashlib.sha256).digest()[
            :12
        ]

    def _cursor(self, after: int, filters: Filters) -> str:
        raw = struct.pack(">q", after) + self._cursor_mac(after, filters)
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    def _read_cursor(self, cursor: Any, filters: Filters) -> int:
        invalid = DrainpipeError(
            "invalid_request", "The cursor is not valid here", code=CURSOR_INVALID
        )
        if not isinstance(cursor, str) or len(cursor) > 40:
            raise invalid
        try:
            raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        except ValueError:
            raise invalid from None
        if len(raw) != 20:
            raise invalid
        (after,) = struct.unpack(">q", raw[:8])
        if not hmac.compare_digest(raw[8:], self._cursor_mac(after, filters)):
            raise invalid
        return int(after)

    def events(
        self,
        *,
        cursor: str | None = None,
        limit: int = 50,
        type: str | None = None,
        source: str | None = None,
        subscription: str | None = None,
        correlation: str | None = None,
    ) -> EventPage:
        """Open events (due, waiting or held), oldest first, without leasing or counting
        them. ``limit`` 1..200; ``cursor`` from the previous page (bound to this inbox and
        these filters)."""
        count = whole_number(limit, "limit", 1, MAX_PEEK)
        checked = filters_of(type, source, subscription, correlation)
        after = 0 if cursor is None else self._read_cursor(cursor, checked)
        settings = read_settings(self._agents, self.id)
        params = ops.events_params(self.id, after, count, checked, ops.instant(self._agents.now))
        rows = self._agents._db.fetch(ops.EVENTS, params)
        items = [self._envelope(row, settings) for row in rows]
        next_cursor = self._cursor(int(rows[-1][1]), checked) if len(rows) == count else None
        # a peeked event carries no lease and no ack mode of its own
        return EventPage([replace(item, ack=None, lease_id=None) for item in items], next_cursor)

    def claim(self, event_ids: Iterable[str]) -> ClaimResult:
        """Lease the chosen events (1..10, manual ack). Events held by another consumer or
        finished are ``unavailable``; ids not in this inbox are ``not_found``."""
        if isinstance(event_ids, str) or not isinstance(event_ids, Iterable):
            raise bad_parameter("event_ids", "event_ids must be a list of event ids")
        wanted = list(dict.fromkeys(event_ids))
        if not 1 <= len(wanted) <= MAX_EVENTS:
            raise bad_parameter("event_ids", f"event_ids must list 1 to {MAX_EVENTS} events")
        settings = read_settings(self._agents, self.id)
        if "manual" not in settings.allowed_ack:
            raise DrainpipeError(
                "invalid_request", "claim takes a lease: ack=manual is not allowed here",
                code=ACK_MODE_NOT_ALLOWED,
            )  # fmt: skip
        numbers = {text: parse_event_id(text) for text in wanted}
        known = [n for n in numbers.values() if n is not None]
        rows = []
        if known:
            params = ops.claim_params(self.id, known, ops.instant(self._agents.now))
            rows = self._agents._db.fetch(ops.CLAIM, params)
        claimed = [self._envelope(row, settings) for row in rows if row[0] == "handed"]
        unavailable_ids = {int(row[1]) for row in rows if row[0] == "unavailable"}
        claimed_ids = {item.id for item in claimed}
        unavailable = [t for t, n in numbers.items() if n is not None and n in unavailable_ids]
        not_found = [t for t in wanted if t not in claimed_ids and t not in unavailable]
        return ClaimResult(claimed, unavailable, not_found)
