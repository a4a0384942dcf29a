"""The agent inbox's Python calls for synchronous code: :class:`AgentInboxes` (create,
subscribe, overview, settle, ack, release, extend, raw) and :class:`AgentInbox` (next,
events, claim), with the same checks, statements, errors and answers as
:class:`drainpipe.AgentInboxes`.

Most of it is generated from the async modules (:mod:`drainpipe.sync.agents_store`,
:mod:`drainpipe.sync.agents_reads`, :mod:`drainpipe.sync.agents_peeks`). This module holds what a thread does differently:

* an ``ack`` is one statement of its own (the async twin gathers the acks of one loop turn
  into one statement, and lets them ride with the next pull: a thread has no loop turn);
* a long poll (``next(wait=...)``) sleeps between hand-out attempts (100 ms doubling to
  1 s); there are no LISTEN wake-ups (``listen=``), which need an event loop.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from typing import Any

from ..agents import statements as ops
from ..agents.answers import ClaimResult, EventPage, InboxSettings, Settlement
from ..agents.reads import Envelope
from ..agents.statements import RESERVE, long_poll_wait, poll_backoff
from ..agents.store import Op
from .agents_peeks import AgentInboxPeeks
from .agents_store import AgentInboxesStore

__all__ = [
    "AgentInbox",
    "AgentInboxes",
    "ClaimResult",
    "Envelope",
    "EventPage",
    "InboxSettings",
    "Settlement",
]


class AgentInboxes(AgentInboxesStore):
    """The twin of :class:`drainpipe.AgentInboxes` on a DSN, a sync pool or a connection
    (``lease_secret`` and ``now`` as there; no ``listen``)."""

    def inbox(self, inbox_id: str) -> AgentInbox:
        """The handle that pulls, peeks and claims events of one inbox."""
        return AgentInbox(self, inbox_id)

    def ack(self, event_id: str, lease_id: str, outcome: Any = None) -> bool:
        """Done: True, or False when that lease is no longer the event's current one (nothing
        changed); 404 ``EVENT_NOT_FOUND`` for an unknown event. ``outcome`` (any JSON, at
        most 64 KiB) is kept with the event."""
        return self.settle("ack", event_id, lease_id, outcome=outcome).ok

    def settle(
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
            return self._settle_fenced(
                op, event_id, lease_id, inboxes,
                delay_seconds=delay_seconds, error=error, seconds=seconds,
            )  # fmt: skip
        number_id, delivery, token, outcome_json = ops.checked_ack(
            self.leases, event_id, lease_id, outcome
        )
        scope = None if inboxes is None else sorted(inboxes)
        params = ops.ack_many_params(
            [number_id], [delivery], [token], [outcome_json], scope, self._instant()
        )
        found = ops.parse_ack_many(self._db.fetch(ops.ACK_MANY, params)).get(1)
        return ops.settlement(event_id, number_id, found)

    def __enter__(self) -> AgentInboxes:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class AgentInbox(AgentInboxPeeks):
    """One inbox's pulls, peeks and claims (from :meth:`AgentInboxes.inbox`)."""

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
        """``next`` with the caller's identity (the key's scope) and a budget."""
        plan = self._pull_plan(order, max, wait, ack, filters, key)
        limit = plan.wait if budget is None else long_poll_wait(plan.wait, budget, RESERVE)
        deadline = time.monotonic() + limit
        step = 0
        while True:
            rows = self._agents.fetch(ops.NEXT, self._next_params(plan, principal))
            if rows:
                return self._pulled(rows, plan.settings)
            left = deadline - time.monotonic()
            if left <= 0:
                return []
            step += 1
            time.sleep(min(poll_backoff(step), left))
