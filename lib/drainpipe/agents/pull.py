"""Pulling events: ``next`` (fifo, lifo or priority, at most 10, filtered, long polls),
the mailbox-style peek (``events``) and ``claim``.

A long poll is a loop of short transactions, each one a hand-out attempt, with a pause
outside any transaction between them (100 ms doubling to 1 s), so no connection is held
while nothing is there. It waits at most ``min(wait, 30, budget - reserve)``: an HTTP answer
always leaves the function time to send it. On a long-lived server the pause is cut short
by a NOTIFY wake-up (:mod:`drainpipe.agents.listen`). Leases are minted in the transaction
that hands the events out, never earlier.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import hashlib
import hmac
import struct
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final

from ..db.json import load_json
from ..engine.core import long_poll_wait, poll_backoff
from ..errors import DrainpipeError
from ..ops import agents as ops
from .batch import Taken
from .checks import (
    ACK_MODE_NOT_ALLOWED,
    ACK_MODES,
    CURSOR_INVALID,
    MAX_EVENTS,
    MAX_PEEK,
    MAX_WAIT,
    ORDERS,
    PULL_CONSUMED,
    bad_parameter,
    choice,
    number,
    optional_name,
    whole_number,
)
from .envelope import (
    Envelope,
    body_fits,
    cap_view,
    event_id_text,
    new_envelope,
    parse_event_id,
    select_view,
    source_of,
)

if TYPE_CHECKING:
    from .inboxes import AgentInboxes, InboxSettings

#: What a long poll leaves of the function's budget to answer in (seconds).
RESERVE: Final = 1.0

Filters = tuple[str | None, str | None, str | None, str | None]


@dataclass(frozen=True, slots=True)
class EventPage:
    """A page of peeked events (envelopes without lease) and the cursor of the next one."""

    items: list[Envelope]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class ClaimResult:
    claimed: list[Envelope]
    unavailable: list[str]
    not_found: list[str]


def _filters(type: Any, source: Any, subscription: Any, correlation: Any) -> Filters:
    return (
        optional_name(type, "type"),
        optional_name(source, "source"),
        optional_name(subscription, "subscription"),
        optional_name(correlation, "correlation"),
    )


def _answer_acks(taken: Taken, call: asyncio.Future[list[tuple[Any, ...]]]) -> None:
    if call.cancelled():
        taken.fail(asyncio.CancelledError())
    elif (error := call.exception()) is not None:
        taken.fail(error)
    else:
        rows = call.result()
        taken.deliver(ops.parse_ack_rows(rows[: ops.ack_rows_end(rows)]))


class AgentInbox:
    """One inbox's pulls (from :meth:`AgentInboxes.inbox`)."""

    def __init__(self, agents: AgentInboxes, inbox_id: str) -> None:
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

    # -- next ------------------------------------------------------------------------------

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
        """``next`` with the caller's identity (the key's scope) and the app's budget."""
        count = whole_number(max, "max", 1, MAX_EVENTS)
        seconds = number(wait, "wait", 0, MAX_WAIT)
        checked = _filters(*filters)
        key_text = optional_name(key, "Idempotency-Key")
        settings = await self._agents.settings(self.id)
        order_text = settings.default_order if order is None else choice(order, "order", ORDERS)
        mode = settings.default_ack if ack is None else choice(ack, "ack", ACK_MODES)
        if mode not in settings.allowed_ack:
            raise DrainpipeError(
                "invalid_request",
                f"ack={mode} is not allowed on this inbox ({', '.join(settings.allowed_ack)})",
                code=ACK_MODE_NOT_ALLOWED,
            )
        loop = asyncio.get_running_loop()
        limit = seconds if budget is None else long_poll_wait(seconds, budget, RESERVE)
        deadline = loop.time() + limit
        wakeups = self._agents.wakeups
        if wakeups is not None and limit > 0:
            await wakeups.start()
            if wakeups.failed:
                wakeups = None
        step = 0
        while True:
            waiter = wakeups.arm(self.id) if wakeups is not None else None
            try:
                params = ops.next_params(
                    self.id, order_text, count, mode, checked, principal, key_text,
                    self._agents._instant(),
                )  # fmt: skip
                taken = self._agents._acks.take(loop)
                if taken is None:
                    rows = await self._agents.fetch(ops.NEXT, params)
                else:
                    rows = await self._with_acks(taken, params)
                if rows and rows[0][0] == "consumed":
                    raise DrainpipeError(
                        "conflict",
                        "An event of the pull with this Idempotency-Key was settled already",
                        code=PULL_CONSUMED,
                    )
                if rows:
                    return [self._envelope(row, settings) for row in rows]
                left = deadline - loop.time()
                if left <= 0:
                    return []
                step += 1
                pause = min(poll_backoff(step), left)
                if waiter is not None:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(waiter.wait(), pause)
                else:
                    await asyncio.sleep(pause)
            finally:
                if waiter is not None and wakeups is not None:
                    wakeups.disarm(self.id, waiter)

    async def _with_acks(self, taken: Taken, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        """The pull's rows, fetched in one call with the acks queued since the last round
        trip (:data:`ops.ACK_NEXT`). The acks get their answer even when this pull is
        cancelled meanwhile: the call goes on as a task of its own, as their batch's would."""
        call = asyncio.ensure_future(self._agents.fetch(ops.ACK_NEXT, taken.params + params))
        call.add_done_callback(functools.partial(_answer_acks, taken))
        rows = await asyncio.shield(call)
        return rows[ops.ack_rows_end(rows) :]

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
        checked = _filters(type, source, subscription, correlation)
        after = 0 if cursor is None else self._read_cursor(cursor, checked)
        settings = await self._agents.settings(self.id)
        params = ops.events_params(self.id, after, count, checked, self._agents._instant())
        rows = await self._agents.fetch(ops.EVENTS, params)
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
        settings = await self._agents.settings(self.id)
        if "manual" not in settings.allowed_ack:
            raise DrainpipeError(
                "invalid_request", "claim takes a lease: ack=manual is not allowed here",
                code=ACK_MODE_NOT_ALLOWED,
            )  # fmt: skip
        numbers = {text: parse_event_id(text) for text in wanted}
        known = [n for n in numbers.values() if n is not None]
        rows = []
        if known:
            params = ops.claim_params(self.id, known, self._agents._instant())
            rows = await self._agents.fetch(ops.CLAIM, params)
        claimed = [self._envelope(row, settings) for row in rows if row[0] == "handed"]
        unavailable_ids = {int(row[1]) for row in rows if row[0] == "unavailable"}
        claimed_ids = {item.id for item in claimed}
        unavailable = [t for t, n in numbers.items() if n is not None and n in unavailable_ids]
        not_found = [t for t in wanted if t not in claimed_ids and t not in unavailable]
        return ClaimResult(claimed, unavailable, not_found)
