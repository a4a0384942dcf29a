"""Acks issued together go to the database together: the acks awaited in one event-loop
tick (an agent acking the ten events of a pull with ``asyncio.gather``, a server's
concurrent requests) are sent as one statement, each still fenced by its own lease.

One ``ack`` is one call and one answer, as the contract has it; only the round trips are
shared. Inside the statement the events it acks are locked in id order, and a stale lease
is answered without a lock, so two batches never deadlock on each other
(webhook-inbox 0010). A database error fails every ack of its batch (nothing of a failed
statement commits).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from ..ops import agents as ops

Fetch = Callable[[str, tuple[Any, ...]], Awaitable[list[tuple[Any, ...]]]]
Key = tuple[tuple[str, ...] | None, datetime | None]
Item = tuple[int, int, str | None, str | None]
#: ``(ok, inbox id, state, lease_until)``; None: no such event within the inboxes
Found = tuple[bool, str, str, datetime | None] | None


class AckBatcher:
    def __init__(self, fetch: Fetch) -> None:
        self._fetch = fetch
        self._pending: dict[Key, list[tuple[Item, asyncio.Future[Found]]]] = {}
        self._running: set[asyncio.Task[None]] = set()

    def ack(
        self,
        event_id: int,
        delivery: int,
        token: str | None,
        outcome_json: str | None,
        inboxes: list[str] | None,
        now: datetime | None,
    ) -> asyncio.Future[Found]:
        """Queue one ack; the future gets what the batch found for it (None: no such event
        within ``inboxes``), or the batch's error."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Found] = loop.create_future()
        key: Key = (None if inboxes is None else tuple(inboxes), now)
        items = self._pending.get(key)
        if items is None:
            items = self._pending[key] = []
            # the sender starts at the next turn of the loop: by then every ack issued in
            # this turn (the tasks of one gather start in the same turn) is in its batch.
            # A task of its own, not a call_soon that creates one: one turn less per ack.
            task = loop.create_task(self._send(key))
            self._running.add(task)
            task.add_done_callback(self._running.discard)
        items.append(((event_id, delivery, token, outcome_json), future))
        return future

    async def _send(self, key: Key) -> None:
        items = self._pending.pop(key)
        items.sort(key=lambda entry: entry[0][0])  # lock in id order: no deadlocks
        inboxes, now = key
        params = ops.ack_many_params(
            [item[0] for item, _ in items],
            [item[1] for item, _ in items],
            [item[2] for item, _ in items],
            [item[3] for item, _ in items],
            None if inboxes is None else list(inboxes),
            now,
        )
        try:
            rows = await self._fetch(ops.ACK_MANY, params)
        except BaseException as exc:
            for _, future in items:
                if not future.done():
                    future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        found = ops.parse_ack_many(rows)
        for index, (_, future) in enumerate(items, start=1):
            if not future.done():  # its caller may have been cancelled meanwhile
                future.set_result(found.get(index))
