"""Acks issued together go to the database together: the acks made in one event-loop tick
(an agent acking the ten events of a pull with ``asyncio.gather``, a server's concurrent
requests) are sent as one statement, each still fenced by its own lease.

One ``ack`` is one call and one answer, as the contract has it; only the round trips are
shared. Inside the statement the events it acks are locked in id order, and a stale lease
is answered without a lock, so two batches never deadlock on each other.
A database error fails every ack of its batch (nothing of a failed
statement commits).

What an ack call returns is a :class:`Pending`: the batch's future for that ack, which is
also a coroutine. ``asyncio.gather`` over ten coroutines wraps each in a task (a task, its
first step and its wake-up: ~5 us an ack, a third of an ack's client CPU); over ten futures
it only waits. Being a coroutine too keeps every other use of an ``async def`` working:
``await``, ``asyncio.create_task``, ``asyncio.wait_for``, task groups.

A batch not sent yet may be taken by a pull that starts in the same loop turn
(:meth:`AckBatcher.take`): the pull sends it with its own statement (``agent_ack_next_v1``),
and the batch's sender task then finds nothing to send.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from datetime import datetime
from typing import Any, TypeVar

from ..errors import DrainpipeError
from . import statements as ops
from .checks import EVENT_NOT_FOUND
from .envelope import event_id_text

Fetch = Callable[[str, tuple[Any, ...]], Awaitable[list[tuple[Any, ...]]]]
Key = tuple[tuple[str, ...] | None, datetime | None]
Item = tuple[int, int, str | None, str | None]
#: ``(ok, inbox id, state, lease_until)``; None: no such event within the inboxes
Found = tuple[bool, str, str, datetime | None] | None

T = TypeVar("T")


class Pending(asyncio.Future[T], Coroutine[Any, Any, T]):
    """The result of an ack to come: an ``asyncio.Future`` that also behaves as the
    coroutine an ``async def`` would have returned (a task can drive it: ``send`` yields
    the future itself until it is done, then returns its result)."""

    __slots__ = ()

    def send(self, value: Any) -> Any:
        if not self.done():
            self._asyncio_future_blocking = True
            return self
        raise StopIteration(self.result())  # or the batch's error, or CancelledError

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        # a task cancelled while it waits on this future cancels the future first (so
        # nothing is delivered to it); the error itself goes back to the task
        if val is None:
            raise typ
        raise val

    def close(self) -> None:
        """Nothing to close: the ack was queued when it was made."""


class AckBatcher:
    def __init__(self, fetch: Fetch) -> None:
        self._fetch = fetch
        self._pending: dict[Key, list[tuple[Item, Pending[Any], bool]]] = {}
        self._running: set[asyncio.Task[None]] = set()

    def ack(
        self,
        event_id: int,
        delivery: int,
        token: str | None,
        outcome_json: str | None,
        inboxes: list[str] | None,
        now: datetime | None,
    ) -> Pending[Found]:
        """Queue one ack; the future gets what the batch found for it (None: no such event
        within ``inboxes``), or the batch's error."""
        future: Pending[Found] = Pending(loop=asyncio.get_running_loop())
        self._queue((event_id, delivery, token, outcome_json), future, False, inboxes, now)
        return future

    def ack_ok(
        self,
        loop: asyncio.AbstractEventLoop,
        event_id: int,
        delivery: int,
        token: str | None,
        outcome_json: str | None,
        inboxes: list[str] | None,
        now: datetime | None,
    ) -> Pending[bool]:
        """Queue one ack of ``AgentInboxes.ack``: the future gets whether the lease was
        current, or 404 ``EVENT_NOT_FOUND`` (also for an event outside ``inboxes``), or the
        batch's error."""
        future: Pending[bool] = Pending(loop=loop)
        self._queue((event_id, delivery, token, outcome_json), future, True, inboxes, now)
        return future

    def _queue(
        self,
        item: Item,
        future: Pending[Any],
        plain: bool,
        inboxes: list[str] | None,
        now: datetime | None,
    ) -> None:
        key: Key = (None if inboxes is None else tuple(inboxes), now)
        items = self._pending.get(key)
        if items is None:
            items = self._pending[key] = []
            # the sender starts at the next turn of the loop: by then every ack issued in
            # this turn (the tasks of one gather start in the same turn) is in its batch.
            # A task of its own, not a call_soon that creates one: one turn less per ack.
            task = future.get_loop().create_task(self._send(key))
            self._running.add(task)
            task.add_done_callback(self._running.discard)
        items.append((item, future, plain))

    def take(self, loop: asyncio.AbstractEventLoop) -> Taken | None:
        """A batch of acks queued in ``loop`` and not sent yet, now the caller's to send
        (a pull sends it with its own statement, :data:`ops.ACK_NEXT`); its sender task
        then finds nothing to do."""
        for key, items in self._pending.items():
            if items[0][1].get_loop() is loop:
                return self._prepare(key)
        return None

    def _prepare(self, key: Key) -> Taken | None:
        items = self._pending.pop(key, None)
        if items is None:
            return None  # a pull took this batch
        items.sort(key=lambda entry: entry[0][0])  # lock in id order: no deadlocks
        inboxes, now = key
        params = ops.ack_many_params(
            [item[0] for item, _, _ in items],
            [item[1] for item, _, _ in items],
            [item[2] for item, _, _ in items],
            [item[3] for item, _, _ in items],
            None if inboxes is None else list(inboxes),
            now,
        )
        return Taken(params, items)

    async def _send(self, key: Key) -> None:
        taken = self._prepare(key)
        if taken is None:
            return
        try:
            rows = await self._fetch(ops.ACK_MANY, taken.params)
        except BaseException as exc:
            taken.fail(exc)
            if not isinstance(exc, Exception):
                raise
            return
        taken.deliver(ops.parse_ack_many(rows))


class Taken:
    """One batch of acks on its way: the parameters of its statement, and the futures its
    answer goes to."""

    __slots__ = ("_items", "params")

    def __init__(self, params: tuple[Any, ...], items: list[tuple[Item, Pending[Any], bool]]):
        self.params = params
        self._items = items

    def fail(self, exc: BaseException) -> None:
        """Nothing of the statement committed: every ack of the batch gets its error."""
        for _, future, _ in self._items:
            if not future.done():
                future.set_exception(exc)

    def deliver(self, found: dict[int, tuple[bool, str, str, datetime | None]]) -> None:
        """What the statement found, by 1-based position (none: no such event)."""
        for index, (item, future, plain) in enumerate(self._items, start=1):
            if future.done():  # its caller may have been cancelled meanwhile
                continue
            result = found.get(index)
            if not plain:
                future.set_result(result)
            elif result is None:
                future.set_exception(
                    DrainpipeError(
                        "not_found", f"No event {event_id_text(item[0])}", code=EVENT_NOT_FOUND
                    )
                )
            else:
                future.set_result(result[0])
