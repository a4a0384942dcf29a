"""``drainpipe.AgentInboxes`` and ``AgentInbox``, the async inbox: its settlements, acks
sent in batches, and the long poll of ``next`` (docs/reference.md section 11).

Every settlement quotes the lease id the event was handed out with. The id carries the
event id, its delivery and the token the database minted in the hand-out transaction, all
signed with ``lease_secret``; the SQL locks the event and changes it only while exactly
that lease is current, so a holder whose lease ran out and went to someone else changes
nothing (``False``, over HTTP 409 ``LEASE_LOST``). The same ack (or release) repeated with
the same lease answers ``True`` again.

**Acks in batches.** Acks issued together go to the database together: the acks made in
one event-loop tick (an agent acking the ten events of a pull with ``asyncio.gather``, a
server's concurrent requests) are sent as one statement, each still fenced by its own lease.

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

**Pulling.** ``next`` (fifo, lifo or priority, at most 10, filtered, long polls); the
mailbox-style peek (``events``) and ``claim`` are :mod:`drainpipe.agents.peeks`'s.

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
from collections.abc import Awaitable, Callable, Collection, Coroutine
from datetime import datetime
from typing import Any, TypeVar

from ..errors import DrainpipeError
from . import statements as ops
from .answers import ClaimResult as ClaimResult
from .answers import EventPage as EventPage
from .answers import InboxSettings as InboxSettings
from .answers import Settlement
from .listen import Wakeups
from .peeks import AgentInboxPeeks
from .reads import Envelope
from .statements import EVENT_NOT_FOUND, event_id_text, long_poll_wait, poll_backoff
from .statements import RESERVE as RESERVE
from .store import SETTINGS_TTL as SETTINGS_TTL
from .store import AgentInboxesStore, Op

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


def _answer_acks(taken: Taken, call: asyncio.Future[list[tuple[Any, ...]]]) -> None:
    if call.cancelled():
        taken.fail(asyncio.CancelledError())
    elif (error := call.exception()) is not None:
        taken.fail(error)
    else:
        rows = call.result()
        taken.deliver(ops.parse_ack_rows(rows[: ops.ack_rows_end(rows)]))


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
        return AgentInbox(self, inbox_id)

    # -- settlements ----------------------------------------------------------------------

    def ack(self, event_id: str, lease_id: str, outcome: Any = None) -> Coroutine[Any, Any, bool]:
        """Done: True, or False when that lease is no longer the event's current one (nothing
        changed). ``outcome`` (any JSON, at most 64 KiB) is kept with the event.

        Await it as the coroutine it is typed as (``await agents.ack(...)``,
        ``asyncio.create_task``, ``asyncio.run``). Inside a running loop it is queued when
        called, for the batch the acks of this loop turn share, and is that batch's future
        too (:class:`~drainpipe.agents.inboxes.Pending`): ``asyncio.gather`` over a pull's acks
        needs no task per ack. A malformed argument raises at the call; an unknown event
        raises 404 at the await."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # made outside a loop, for asyncio.run: queued once it runs
            checked = ops.checked_ack(self.leases, event_id, lease_id, outcome)
            return self._ack_in_loop(checked, ops.instant(self.now))
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
        checked = ops.checked_ack(self.leases, event_id, lease_id, outcome)
        scope = None if inboxes is None else sorted(inboxes)
        return self._acks.ack_ok(loop, *checked, scope, ops.instant(self.now))

    def _queue_ack(
        self, event_id: Any, lease_id: Any, outcome: Any, inboxes: Collection[str] | None
    ) -> tuple[int, Pending[Found]]:
        """``settle("ack")`` up to its await: checked (a malformed argument raises here) and
        queued for this turn's batch. The event's id, and the future of what the batch finds
        (None: no such event within ``inboxes``)."""
        number_id, delivery, token, outcome_json = ops.checked_ack(
            self.leases, event_id, lease_id, outcome
        )
        scope = None if inboxes is None else sorted(inboxes)
        queued = self._acks.ack(
            number_id, delivery, token, outcome_json, scope, ops.instant(self.now)
        )
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
        return ops.settlement(event_id, number_id, await queued)

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


class AgentInbox(AgentInboxPeeks):
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
                    rows = await self._agents._db.fetch(ops.NEXT, params)
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
        call = asyncio.ensure_future(self._agents._db.fetch(ops.ACK_NEXT, taken.params + params))
        call.add_done_callback(functools.partial(_answer_acks, taken))
        rows = await asyncio.shield(call)
        return rows[ops.ack_rows_end(rows) :]
