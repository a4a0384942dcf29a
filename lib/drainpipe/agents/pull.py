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
import contextlib
import functools
from typing import TYPE_CHECKING, Any

from ..engine.core import long_poll_wait, poll_backoff
from . import statements as ops
from .answers import ClaimResult as ClaimResult
from .answers import EventPage as EventPage
from .batch import Taken
from .checks import RESERVE as RESERVE
from .envelope import (
    Envelope,
)
from .reads import AgentInboxReads

if TYPE_CHECKING:
    from .inboxes import AgentInboxes


def _answer_acks(taken: Taken, call: asyncio.Future[list[tuple[Any, ...]]]) -> None:
    if call.cancelled():
        taken.fail(asyncio.CancelledError())
    elif (error := call.exception()) is not None:
        taken.fail(error)
    else:
        rows = call.result()
        taken.deliver(ops.parse_ack_rows(rows[: ops.ack_rows_end(rows)]))


class AgentInbox(AgentInboxReads):
    """One inbox's pulls, peeks and claims (from :meth:`AgentInboxes.inbox`)."""

    def __init__(self, agents: AgentInboxes, inbox_id: str) -> None:
        super().__init__(agents, inbox_id)
        self._agents: AgentInboxes = agents

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
        plan = await self._pull_plan(order, max, wait, ack, filters, key)
        loop = asyncio.get_running_loop()
        limit = plan.wait if budget is None else long_poll_wait(plan.wait, budget, RESERVE)
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
                params = self._next_params(plan, principal)
                taken = self._agents._acks.take(loop)
                if taken is None:
                    rows = await self._agents.fetch(ops.NEXT, params)
                else:
                    rows = await self._with_acks(taken, params)
                if rows:
                    return self._pulled(rows, plan.settings)
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
