# generated from lib/drainpipe/agents/reads.py by ./scripts/sync-twin: do not edit.
# Change the async source (or tools/sync_twin.py) and run ./scripts/sync-twin again.
"""Reading an agent inbox: its settings (cached), and a handle, but for its wait: ``next``
and the checked plan of a pull, and the envelope of a handed-out row
(docs/reference.md section 11). :class:`~drainpipe.agents.peeks.AgentInboxPeeks` adds
the peek (``events``) and ``claim``, :class:`~drainpipe.agents.inboxes.AgentInbox` the
long poll (``pull``); ``drainpipe.sync.agents_reads`` is this module's generated sync twin,
under the sync twin's own ``pull`` (it imports the envelope from here: one class).

The body came from a third party, so the envelope says so (``untrusted``), says whether its
signature checked out (``verified``), and shows only a ``view`` of it: the whole body or
the inbox's ``view_paths``, cut to at most ``view_max_bytes`` UTF-8 bytes of JSON
(``truncated`` then says so; the whole body is behind ``/raw``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ..agents import statements as ops
from ..agents.answers import InboxSettings
from ..agents.reads import (
    SETTINGS_TTL,
    Envelope,
    PullPlan,
    body_fits,
    cap_view,
    new_envelope,
    select_view,
    source_of,
)
from ..agents.statements import (
    ACK_MODE_NOT_ALLOWED,
    ACK_MODES,
    INBOX_NOT_FOUND,
    MAX_EVENTS,
    MAX_WAIT,
    ORDERS,
    PULL_CONSUMED,
    choice,
    event_id_text,
    filters_of,
    number,
    optional_name,
    whole_number,
)
from ..db.json import load_json
from ..errors import DrainpipeError
from ..validation import MAX_NAME_LENGTH, text_fault

if TYPE_CHECKING:
    from .agents_store import AgentInboxesStore


# -- reading an inbox ---------------------------------------------------------------------


def read_settings(agents: AgentInboxesStore, inbox_id: str) -> InboxSettings:
    """The inbox's settings, cached for :data:`SETTINGS_TTL` seconds (every read starts
    with them); 404 ``INBOX_NOT_FOUND``."""
    read_at = time.monotonic()
    cached = agents._settings.get(inbox_id)
    if cached is not None and read_at - cached[1] < SETTINGS_TTL:
        return cached[0]
    if not isinstance(inbox_id, str) or len(inbox_id) > MAX_NAME_LENGTH or text_fault(inbox_id):
        raise DrainpipeError("not_found", "No such inbox", code=INBOX_NOT_FOUND)
    rows = agents._db.fetch(ops.INBOX, ops.inbox_params(inbox_id))
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

    def next(
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
        return self.pull(
            order=order, max=max, wait=wait, ack=ack,
            filters=(type, source, subscription, correlation),
            principal=None, key=idempotency_key, budget=budget,
        )  # fmt: skip

    def pull(
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

    def _pull_plan(
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
        settings = read_settings(self._agents, self.id)
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
