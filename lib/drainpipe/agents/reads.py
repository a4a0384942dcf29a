"""Reading an agent inbox: its settings (cached), and a handle, but for its wait: the
envelope of a handed-out row, ``next`` and the checked plan of a pull, the mailbox-style
peek (``events``) and ``claim``.
:class:`~drainpipe.agents.inboxes.AgentInbox` adds the long poll (``pull``) on top;
``drainpipe.sync.agents_reads`` is this module's generated sync twin, under the sync
twin's own ``pull``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import struct
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final

from ..db.json import load_json
from ..errors import DrainpipeError
from ..validation import MAX_NAME_LENGTH, text_fault
from . import statements as ops
from .envelope import (
    ClaimResult,
    Envelope,
    EventPage,
    InboxSettings,
    body_fits,
    cap_view,
    event_id_text,
    new_envelope,
    parse_event_id,
    select_view,
    source_of,
)
from .statements import (
    ACK_MODE_NOT_ALLOWED,
    ACK_MODES,
    CURSOR_INVALID,
    INBOX_NOT_FOUND,
    MAX_EVENTS,
    MAX_PEEK,
    MAX_WAIT,
    ORDERS,
    PULL_CONSUMED,
    Filters,
    bad_parameter,
    choice,
    filters_of,
    number,
    optional_name,
    whole_number,
)

if TYPE_CHECKING:
    from .store import AgentInboxesStore


#: How long an inbox's settings are reused before they are read again (seconds).
SETTINGS_TTL: Final = 5.0


async def read_settings(agents: AgentInboxesStore, inbox_id: str) -> InboxSettings:
    """The inbox's settings, cached for :data:`SETTINGS_TTL` seconds (every read starts
    with them); 404 ``INBOX_NOT_FOUND``."""
    read_at = time.monotonic()
    cached = agents._settings.get(inbox_id)
    if cached is not None and read_at - cached[1] < SETTINGS_TTL:
        return cached[0]
    if not isinstance(inbox_id, str) or len(inbox_id) > MAX_NAME_LENGTH or text_fault(inbox_id):
        raise DrainpipeError("not_found", "No such inbox", code=INBOX_NOT_FOUND)
    rows = await agents._db.fetch(ops.INBOX, ops.inbox_params(inbox_id))
    if not rows:
        agents._settings.pop(inbox_id, None)
        raise DrainpipeError("not_found", f"No inbox {inbox_id}", code=INBOX_NOT_FOUND)
    (id_, name, lease, hold, attempts, order, ack, allowed, priority, view, cap) = rows[0]
    found = InboxSettings(
        id_, name, lease, hold, attempts, order, ack, tuple(allowed),
        None if priority is None else tuple(priority),
        None if view is None else {name: path for name, path in view}, cap,
    )  # fmt: skip
    agents._settings[inbox_id] = (found, read_at)
    return found


@dataclass(frozen=True, slots=True)
class PullPlan:
    """A pull's checked arguments and the inbox settings it hands out under."""

    count: int
    wait: float
    filters: Filters
    key: str | None
    settings: InboxSettings
    order: str
    ack: str


class AgentInboxReads:
    """One inbox's envelopes, pull plans, peeks and claims."""

    def __init__(self, agents: AgentInboxesStore, inbox_id: str) -> None:
        self._agents = agents
        self.id = inbox_id

    # -- envelopes -------------------------------------------------------------------------

    def _envelope(self, row: tuple[Any, ...], settings: InboxSettings) -> Envelope:
        """The envelope of an ``ops.EVENT_COLUMNS`` row."""
        (_, id_, source, app, event_type, received_at, verified, body, delivery, ack, token,
         lease_until) = row  # fmt: skip
        lease_id = None
        if token is not None and ack == "manual":
            lease_id = self._agents.leases.mint(id_, delivery, token)
        # the webhook message was purged: nothing left to show (a body of JSON null has
        # always been shown so too, when the loaders turned both into None)
        view, truncated = None, True
        if body is not None:
            text = body.encode()
            payload = load_json(text)
            if payload is None:
                pass
            elif settings.view_paths is None and body_fits(text, settings.view_max_bytes):
                view, truncated = payload, False  # the whole body, small enough unmeasured
            else:
                view, truncated = cap_view(
                    select_view(payload, settings.view_paths), settings.view_max_bytes
                )
        return new_envelope(
            event_id_text(id_), lease_id, delivery, ack, source_of(source, app), event_type,
            received_at, bool(verified), view, truncated, lease_until,
        )  # fmt: skip

    # -- pulls ------------------------------------------------------------------------------

    async def next(
        self,
        *,
        order: str | None = None,
        max: int = 1,
        wait: float = 0,
        ack: str | None = None,
        type: str | None = None,
        source: str | None = None,
        subscription: str | None = None,
        correlation: str | None = None,
        idempotency_key: str | None = None,
        budget: float | None = None,
    ) -> list[Envelope]:
        """Up to ``max`` (1..10) due events, leased to you (``ack="manual"``) or settled at
        hand-out (``"pickup"``). ``wait`` (0..30 s) long-polls until one is ready, never
        past ``budget - 1`` seconds when a budget is given. ``idempotency_key`` makes a
        repeat return the same events and leases while none of them is settled (after
        that: 409 ``PULL_CONSUMED``)."""
        return await self.pull(
            order=order, max=max, wait=wait, ack=ack,
            filters=(type, source, subscription, correlation),
            principal=None, key=idempotency_key, budget=budget,
        )  # fmt: skip

    async def pull(
        self,
        *,
        order: Any,
        max: Any,
        wait: Any,
        ack: Any,
        filters: tuple[Any, Any, Any, Any],
        principal: str | None,
        key: Any,
        budget: float | None,
    ) -> list[Envelope]:
        """``next`` with the caller's identity (the key's scope) and a budget. Each twin
        waits its own way between hand-outs (:class:`~drainpipe.agents.inboxes.AgentInbox`)."""
        raise NotImplementedError

    async def _pull_plan(
        self,
        order: Any,
        max: Any,
        wait: Any,
        ack: Any,
        filters: tuple[Any, Any, Any, Any],
        key: Any,
    ) -> PullPlan:
        """A pull's arguments checked (400 ``INVALID_PARAMETER``, ``ACK_MODE_NOT_ALLOWED``)
        against the inbox's settings (404 ``INBOX_NOT_FOUND``)."""
        count = whole_number(max, "max", 1, MAX_EVENTS)
        seconds = number(wait, "wait", 0, MAX_WAIT)
        checked = filters_of(*filters)
        key_text = optional_name(key, "Idempotency-Key")
        settings = await read_settings(self._agents, self.id)
        order_text = settings.default_order if order is None else choice(order, "order", ORDERS)
        mode = settings.default_ack if ack is None else choice(ack, "ack", ACK_MODES)
        if mode not in settings.allowed_ack:
            raise DrainpipeError(
                "invalid_request",
                f"ack={mode} is not allowed on this inbox ({', '.join(settings.allowed_ack)})",
                code=ACK_MODE_NOT_ALLOWED,
            )
        return PullPlan(count, seconds, checked, key_text, settings, order_text, mode)

    def _next_params(self, plan: PullPlan, principal: str | None) -> tuple[Any, ...]:
        return ops.next_params(
            self.id, plan.order, plan.count, plan.ack, plan.filters, principal, plan.key,
            ops.instant(self._agents.now),
        )  # fmt: skip

    def _pulled(self, rows: list[tuple[Any, ...]], settings: InboxSettings) -> list[Envelope]:
        """The envelopes of a hand-out's rows; 409 ``PULL_CONSUMED`` for a repeated pull
        whose events were settled already."""
        if rows and rows[0][0] == "consumed":
            raise DrainpipeError(
                "conflict",
                "An event of the pull with this Idempotency-Key was settled already",
                code=PULL_CONSUMED,
            )
        return [self._envelope(row, settings) for row in rows]

    # -- peek and claim --------------------------------------------------------------------

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

    async def events(
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
        settings = await read_settings(self._agents, self.id)
        params = ops.events_params(self.id, after, count, checked, ops.instant(self._agents.now))
        rows = await self._agents._db.fetch(ops.EVENTS, params)
        items = [self._envelope(row, settings) for row in rows]
        next_cursor = self._cursor(int(rows[-1][1]), checked) if len(rows) == count else None
        # a peeked event carries no lease and no ack mode of its own
        return EventPage([replace(item, ack=None, lease_id=None) for item in items], next_cursor)

    async def claim(self, event_ids: Iterable[str]) -> ClaimResult:
        """Lease the chosen events (1..10, manual ack). Events held by another consumer or
        finished are ``unavailable``; ids not in this inbox are ``not_found``."""
        if isinstance(event_ids, str) or not isinstance(event_ids, Iterable):
            raise bad_parameter("event_ids", "event_ids must be a list of event ids")
        wanted = list(dict.fromkeys(event_ids))
        if not 1 <= len(wanted) <= MAX_EVENTS:
            raise bad_parameter("event_ids", f"event_ids must list 1 to {MAX_EVENTS} events")
        settings = await read_settings(self._agents, self.id)
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
            rows = await self._agents._db.fetch(ops.CLAIM, params)
        claimed = [self._envelope(row, settings) for row in rows if row[0] == "handed"]
        unavailable_ids = {int(row[1]) for row in rows if row[0] == "unavailable"}
        claimed_ids = {item.id for item in claimed}
        unavailable = [t for t, n in numbers.items() if n is not None and n in unavailable_ids]
        not_found = [t for t in wanted if t not in claimed_ids and t not in unavailable]
        return ClaimResult(claimed, unavailable, not_found)
