"""Acks issued together go to the database together: the acks awaited in one event-loop
tick (an agent acking the ten events of a pull with ``asyncio.gather``, a server's
concurrent requests) are sent as one statement, each still fenced by its own lease.

One ``ack`` is one call and one answer, as the contract has it; only the round trips are
shared. Inside the statement the events are locked in id order, so two batches never
deadlock on each other. A database error fails every ack of its batch (nothing of a
failed statement commits).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from ..ops import agents as ops

Fetch = Callable[[str, tuple[Any, ...]], Awaitable[list[tuple[Any, ...]]]]
Key = tuple[tuple[str, ...] | None, datetime | None]
Item = tuple[int, int, Any, str | None]


class AckBatcher:
    def __init__(self, fetch: Fetch) -> None:
        self._fetch = fetch
        self._pending: dict[Key, list[tuple[Item, asyncio.Future[Any]]]] = {}
        self._scheduled = False
        self._running: set[asyncio.Task[None]] = set()

    async def ack(
        self,
        event_id: int,
        delivery: int,
        token: Any,
        outcome_json: str | None,
        inboxes: list[str] | None,
        now: datetime | None,
    ) -> tuple[bool, str, str, datetime | None] | None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        key: Key = (None if inboxes is None else tuple(inboxes), now)
        self._pending.setdefault(key, []).append(
            ((event_id, delivery, token, outcome_json), future)
        )
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._flush)
        result: tuple[bool, str, str, datetime | None] | None = await future
        return result

    def _flush(self) -> None:
        self._scheduled = False
        pending, self._pending = self._pending, {}
        for key, items in pending.items():
            task = asyncio.get_running_loop().create_task(self._send(key, items))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def _send(self, key: Key, items: list[tuple[Item, asyncio.Future[Any]]]) -> None:
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
            if not future.done():
                future.set_result(found.get(index))
