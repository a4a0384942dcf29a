"""``drainpipe.AgentInboxes``: inboxes over webhook messages, their subscriptions, and the
settlements of leased events (docs/reference.md section 11).

Every settlement quotes the lease id the event was handed out with. The id carries the
event id, its delivery and the token the database minted in the hand-out transaction, all
signed with ``lease_secret``; the SQL locks the event and changes it only while exactly
that lease is current, so a holder whose lease ran out and went to someone else changes
nothing (``False``, over HTTP 409 ``LEASE_LOST``). The same ack (or release) repeated with
the same lease answers ``True`` again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Coroutine
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .answers import InboxSettings as InboxSettings
from .answers import Settlement
from .batch import AckBatcher, Found, Pending
from .listen import Wakeups
from .store import SETTINGS_TTL as SETTINGS_TTL
from .store import AgentInboxesStore, Op, _settlement

if TYPE_CHECKING:
    from .pull import AgentInbox


class AgentInboxes(AgentInboxesStore):
    """Agent inboxes on ``db`` (a DSN, pool or connection; see :class:`drainpipe.Jobs`).

    * ``lease_secret``: signs lease ids and cursors (at least 16 bytes; keep it the same on
      every instance, and secret: a forged lease id is refused without touching the row).
    * ``now``: the clock of hand-outs, leases, holds and settlements (``p_now``); a test
      moves it instead of waiting.
    * ``listen``: True on a long-lived server (``drainpipe serve``, uvicorn): a session
      connection LISTENs so long polls wake when an event arrives. Needs a DSN; never on
      serverless functions (they keep 100 ms → 1 s poll steps).
    """

    def __init__(
        self,
        db: Any,
        *,
        lease_secret: str | bytes,
        now: Callable[[], datetime] | None = None,
        listen: bool = False,
    ) -> None:
        super().__init__(db, lease_secret=lease_secret, now=now)
        self._wakeups: Wakeups | None = None
        self._acks = AckBatcher(self._db.fetch)
        if listen:
            if self._db.dsn is None:
                raise ValueError("listen=True needs a DSN (a session connection of its own)")
            if self._db.names_pooler:
                # a transaction pooler hands the LISTEN's session to others once its
                # transaction ends: no notification would ever arrive
                raise ValueError(
                    "listen=True cannot work behind a transaction pooler (the DSN names one:"
                    " port 6543 or 6432, or pgbouncer=true); give the AgentInboxes a direct"
                    " DSN, or leave listen off (polls then step 100 ms -> 1 s)"
                )
            self._wakeups = Wakeups(self._db.dsn)

    @property
    def wakeups(self) -> Wakeups | None:
        return self._wakeups

    def inbox(self, inbox_id: str) -> AgentInbox:
        """The handle that pulls, peeks and claims events of one inbox."""
        from .pull import AgentInbox

        return AgentInbox(self, inbox_id)

    # -- settlements ----------------------------------------------------------------------

    def ack(self, event_id: str, lease_id: str, outcome: Any = None) -> Coroutine[Any, Any, bool]:
        """Done: True, or False when that lease is no longer the event's current one (nothing
        changed). ``outcome`` (any JSON, at most 64 KiB) is kept with the event.

        Await it as the coroutine it is typed as (``await agents.ack(...)``,
        ``asyncio.create_task``, ``asyncio.run``). Inside a running loop it is queued when
        called, for the batch the acks of this loop turn share, and is that batch's future
        too (:class:`~drainpipe.agents.batch.Pending`): ``asyncio.gather`` over a pull's acks
        needs no task per ack. A malformed argument raises at the call; an unknown event
        raises 404 at the await."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # made outside a loop, for asyncio.run: queued once it runs
            checked = self._checked_ack(event_id, lease_id, outcome)
            return self._ack_in_loop(checked, self._instant())
        return self._queue_ack_ok(loop, event_id, lease_id, outcome, None)

    async def _ack_in_loop(
        self, checked: tuple[int, int, str | None, str | None], now: datetime | None
    ) -> bool:
        return await self._acks.ack_ok(asyncio.get_running_loop(), *checked, None, now)

    def _queue_ack_ok(
        self,
        loop: asyncio.AbstractEventLoop,
        event_id: Any,
        lease_id: Any,
        outcome: Any,
        inboxes: Collection[str] | None,
    ) -> Pending[bool]:
        """:meth:`ack` within ``inboxes`` (None: all) in a running loop: checked (a malformed
        argument raises here) and queued for this turn's batch."""
        checked = self._checked_ack(event_id, lease_id, outcome)
        scope = None if inboxes is None else sorted(inboxes)
        return self._acks.ack_ok(loop, *checked, scope, self._instant())

    def _queue_ack(
        self, event_id: Any, lease_id: Any, outcome: Any, inboxes: Collection[str] | None
    ) -> tuple[int, Pending[Found]]:
        """``settle("ack")`` up to its await: checked (a malformed argument raises here) and
        queued for this turn's batch. The event's id, and the future of what the batch finds
        (None: no such event within ``inboxes``)."""
        number_id, delivery, token, outcome_json = self._checked_ack(event_id, lease_id, outcome)
        scope = None if inboxes is None else sorted(inboxes)
        queued = self._acks.ack(number_id, delivery, token, outcome_json, scope, self._instant())
        return number_id, queued

    async def settle(
        self,
        op: Op,
        event_id: Any,
        lease_id: Any,
        *,
        inboxes: Collection[str] | None = None,
        outcome: Any = None,
        delay_seconds: Any = 0,
        error: Any = None,
        seconds: Any = None,
    ) -> Settlement:
        """One fenced settlement; ``inboxes`` (None: all) bounds what the caller may touch.
        An unknown event, or one outside ``inboxes``, is 404 ``EVENT_NOT_FOUND``."""
        if op != "ack":
            return await self._settle_fenced(
                op, event_id, lease_id, inboxes,
                delay_seconds=delay_seconds, error=error, seconds=seconds,
            )  # fmt: skip
        number_id, queued = self._queue_ack(event_id, lease_id, outcome, inboxes)
        return _settlement(event_id, number_id, await queued)

    def app(
        self,
        *,
        authorize: Any,
        budget: float = 25.0,
        allowed_origins: Collection[str] | None = None,
    ) -> Any:
        """The HTTP routes and the WebSocket stream of section 11 (an ASGI app).
        ``allowed_origins``: the origins whose pages may write with cookies (default: the
        request's own host; docs/reference.md, "Hardening")."""
        from .app import build_app

        return build_app(self, authorize=authorize, budget=budget, allowed_origins=allowed_origins)

    async def close(self) -> None:
        """Stop the wake-up listener and close the pool opened for a DSN."""
        if self._wakeups is not None:
            await self._wakeups.close()
        await super().close()
