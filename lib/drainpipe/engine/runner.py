"""One runner for everything drainpipe claims under a lease: jobs and webhook messages.

A run opens ``concurrency`` lanes. Each lane claims a batch from a :class:`ClaimableSource`,
runs its items in order, and settles them. The semantics, decided once for every source:

* **Heartbeats.** While a batch runs, one heartbeat extends every item of the batch that is
  not settled yet, in one round trip, every :func:`~drainpipe.engine.core.heartbeat_interval`
  seconds. The first beat is a timer, not a task: most batches end before it is due.
* **A lost lease stops the work on that item.** When an extend says an item is no longer
  held (its lease ran out and another worker claimed it, or its attempt changed), the item
  is dropped: a handler still running on it is cancelled (its task gets ``CancelledError``),
  a result it produced is discarded, an item still waiting its turn is skipped. No
  complete or fail is sent for it, it counts neither as succeeded nor as failed, and
  ``on_error`` gets ``DrainpipeError(kind="conflict", code="LEASE_LOST")`` with the item.
  A completion the database refuses (the fenced settlement found another attempt) is
  reported the same way; the handler did run, so it still counts as succeeded.
* **Claim errors.** A claim error of a transient kind (``errors.TRANSIENT_KINDS``) is
  retried 3 times per lane, waiting ``poll_interval`` and doubling; any other claim error,
  or a 4th, stops every lane and the run raises it. A run started with
  ``retry_unreached=False`` (the drain route) does not retry before its first claim got an
  answer: a database that cannot be reached is reported at once, not after the waits.
* **Failures.** A handler that raises fails its item (the error text is stored, with the
  exception's ``code`` when it is a valid code, else ``HANDLER_ERROR``) and
  ``on_error(error, item)`` hears of it after the failure was recorded; ``Retry(after)``
  fails it with that delay (code ``RETRY`` or its own) and is not an error.
  ``Skip(code)`` settles it as succeeded without its work (sources without ``skip``:
  a plain success); ``Discard(code)`` fails it for good; neither is an error. An item whose
  job was cancelled is lost like a taken-over lease, reported with code ``CANCELLED``. A complete or fail that raises goes to
  ``on_error``; the item comes back when its lease ends. A heartbeat that raises is logged
  and retried at the next beat: the items keep running.
* **One call per batch.** A source with ``complete_and_claim`` gets a lane's successes
  together with its next claim, in one call (one round trip, one transaction: both happen or
  neither); a completion refused inside it is reported as above, and the rest of the call
  stands. The first claim of a lane and its last settlement (empty claim, stop, budget) are
  single calls. When the fused call fails, the successes are settled alone before the claim
  error is handled, so a claim that cannot succeed never makes finished handlers run again.
* **Budget.** The deadline is checked before each claim; claimed items always finish.
* **Lazy lanes.** A run ``until_empty`` starts one lane and opens the others only when a
  claim comes back full, so an empty drain costs one round trip.
* **on_error everywhere.** Without one, errors are logged on the source's logger
  (``drainpipe.jobs``, ``drainpipe.inbox``) with the source and the item in the message and
  in the record's ``extra`` fields (``queue``/``job_id`` or ``source``/``message_id``, then
  ``attempt`` and ``code``: docs/observability.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import random
from collections.abc import Callable, Sequence
from typing import Any

from ..codes import Discard, Skip, Suspend, code_of
from ..errors import TRANSIENT_KINDS, DrainpipeError, Retry
from ..models import WorkReport
from ..validation import error_text
from .core import (
    CLAIM_RETRIES,
    LEASE_LOST,
    as_error,
    budget_spent,
    check_hooks,
    claim_retry_wait,
    heartbeat_interval,
    lease_lost,
    log_error,
    next_idle_wait,
    outage_left,
    outage_wait,
    should_retry_claim,
)
from .heartbeat import lost_reasons, start_heartbeat
from .source import ClaimableSource, OnError, call_hook

__all__ = [
    "LEASE_LOST",
    "ClaimableSource",
    "OnError",
    "Runner",
    "as_error",
    "call_hook",
    "lease_lost",
    "log_error",
]


class Batch:
    """The state one heartbeat shares with the lane running its batch."""

    __slots__ = ("beats", "cancelled", "lane", "lost", "reasons", "running", "unfinished")

    def __init__(self, unfinished: dict[int, Any], lane: asyncio.Task[Any] | None) -> None:
        self.unfinished = unfinished  # claimed, not settled: what the heartbeat extends
        self.lane = lane
        self.lost: set[int] | None = None  # made on the first lost lease only
        self.reasons: dict[int, str] = {}  # why a lost item was lost, when the source knows
        self.running: int | None = None  # the id whose handler the lane awaits right now
        self.cancelled: int | None = None  # the id whose handler we cancelled
        self.beats: list[asyncio.Task[None]] = []


class Runner:
    """Runs a :class:`ClaimableSource` with the semantics of the module docstring.

    ``lease`` is seconds or a callable returning them (re-read at each claim and beat);
    ``deadline`` is an ``asyncio`` loop time; ``on_error(error, item)`` (plain or async)
    hears of every failure (``item`` is None for a claim error that ends the run).
    """

    def __init__(
        self,
        source: ClaimableSource[Any],
        *,
        concurrency: int = 1,
        batch: int = 1,
        lease: float | Callable[[], float] = 300,
        poll_interval: float = 1.0,
        max_poll_interval: float = 30.0,
        stop: asyncio.Event | None = None,
        on_error: OnError | None = None,
        deadline: float | None = None,
        heartbeat_every: float | None = None,
        retry_unreached: bool = True,
        claim_retries: int = CLAIM_RETRIES,
        max_outage: float | None = None,
    ) -> None:
        check_hooks(stop, on_error, event="an asyncio.Event", item="item")
        self.source = source
        self.concurrency = max(1, concurrency)
        self.batch = batch
        self.lease = lease
        self.poll_interval = poll_interval
        self.max_poll_interval = max(poll_interval, max_poll_interval)
        self.stop = stop
        self.on_error = on_error
        self.deadline = deadline
        self.heartbeat_every = heartbeat_every
        self.retry_unreached = retry_unreached
        self.claim_retries = claim_retries
        #: ``work``: transient claim errors are retried for this long (seconds) instead of
        #: ``claim_retries`` times, each retry reported to ``on_error``
        self.max_outage = max_outage
        self.report = WorkReport()
        #: True once a claim got an answer (even an empty one): the source is reachable
        self.reached = False
        self._fatal: BaseException | None = None
        self._halt = asyncio.Event()  # set when a lane hit a fatal claim error
        self._lanes: list[asyncio.Task[None]] = []
        self._spread = False
        self._until_empty = False

    # -- the lanes ----------------------------------------------------------------------

    async def run(self, *, until_empty: bool) -> WorkReport:
        """Claim and run items until empty (``until_empty``), or until ``stop`` is set or
        the deadline passes. Raises the claim error that stopped the run."""
        self._spread = not until_empty or self.concurrency == 1
        self._until_empty = until_empty
        lanes = self.concurrency if self._spread else 1
        self._lanes += [asyncio.create_task(self._lane()) for _ in range(lanes)]
        try:
            while pending := [lane for lane in self._lanes if not lane.done()]:
                await asyncio.wait(pending)
            for lane in self._lanes:
                lane.result()
        finally:
            for lane in self._lanes:
                lane.cancel()
        if self._fatal is not None:
            raise self._fatal
        return self.report

    def _open_other_lanes(self) -> None:
        if not self._spread:
            self._spread = True
            self._lanes += [asyncio.create_task(self._lane()) for _ in range(self.concurrency - 1)]

    def _stopping(self) -> bool:
        return self._halt.is_set() or (self.stop is not None and self.stop.is_set())

    def _lease_seconds(self) -> float:
        return self.lease() if callable(self.lease) else self.lease

    async def _lane(self) -> None:
        loop = asyncio.get_running_loop()
        lane = asyncio.current_task()
        wait = self.poll_interval
        retries = 0
        outage_started: float | None = None
        fuse = (
            None if self.source.complete_each else getattr(self.source, "complete_and_claim", None)
        )
        # the successes of the batch just run, not settled yet: they travel with the next
        # claim when the source can do both in one call (``fuse``), else they settle alone
        done: list[Any] = []
        while not self._stopping():
            if budget_spent(loop.time(), self.deadline):
                self.report.budget_exhausted = True
                await self._settle(done)
                return
            refused: Sequence[Any] = ()
            try:
                if done and fuse is not None:  # ``done`` is only kept when the source fuses
                    refused, claimed = await fuse(done, self.batch, self._lease_seconds())
                else:
                    claimed = await self.source.claim(self.batch, self._lease_seconds())
            except Exception as exc:
                if done:
                    # nothing of the fused call committed: the finished work is settled on
                    # its own, so a failing claim never makes handlers run again
                    await self._settle(done)
                done = []
                error = as_error(exc)
                transient = error.kind in TRANSIENT_KINDS and (self.reached or self.retry_unreached)
                if transient and self.max_outage is not None:
                    now = loop.time()
                    outage_started = now if outage_started is None else outage_started
                    left = outage_left(outage_started, now, self.max_outage)
                    if left > 0:
                        retries += 1
                        await self._report(error, None)
                        jitter = random.random()  # noqa: S311 - a retry spread, not a secret
                        await self._sleep(
                            min(left, outage_wait(retries, self.poll_interval, jitter))
                        )
                        continue
                elif should_retry_claim(transient, retries, self.claim_retries):
                    retries += 1
                    await self._sleep(claim_retry_wait(retries, self.poll_interval))
                    continue
                if self._fatal is None:
                    self._fatal = error
                self._halt.set()
                return
            done = []
            if refused:  # outside the try: reporting is not claiming
                await self._report_refused(refused)
            self.reached = True
            if retries:
                # the database is back: work enqueued as it came back (producers retrying)
                # must not wait out an idle wait that doubled before the outage
                wait = self.poll_interval
            retries = 0
            outage_started = None
            if not claimed:
                if self._until_empty:
                    return
                await self._sleep(wait)
                wait = next_idle_wait(wait, self.max_poll_interval)
                continue
            wait = self.poll_interval
            if len(claimed) >= self.batch:
                self._open_other_lanes()
            succeeded = await self._run_batch(claimed, lane)
            if fuse is None or self._stopping():
                await self._settle(succeeded)
            else:
                done = succeeded
        await self._settle(done)

    async def _sleep(self, delay: float) -> None:
        """Sleep, waking early when the run is told to stop."""
        waiters = [asyncio.ensure_future(self._halt.wait())]
        if self.stop is not None:
            waiters.append(asyncio.ensure_future(self.stop.wait()))
        try:
            await asyncio.wait(waiters, timeout=delay, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    # -- one batch ----------------------------------------------------------------------

    async def _run_batch(self, claimed: Sequence[Any], lane: asyncio.Task[Any] | None) -> list[Any]:
        """Run a claimed batch; the items that succeeded and still hold their lease, for the
        caller to settle (a ``complete_each`` source settled each already: none)."""
        source = self.source
        batch = Batch({item.id: item for item in claimed}, lane)
        first_beat = None
        if source.leases:
            # a timer, not a task: most batches finish before their first beat is due,
            # and a timer costs far less to set up and cancel on this hot path
            every = heartbeat_interval(
                self._lease_seconds(), self.heartbeat_every, source.heartbeat_floor
            )
            first_beat = asyncio.get_running_loop().call_later(
                every, start_heartbeat, batch, source, self._lease_seconds, every
            )
        succeeded: list[Any] = []
        try:
            for item in claimed:
                if batch.lost is not None and item.id in batch.lost:
                    await self._report(self._lost(batch, item), item)
                    continue
                if await self._run_one(batch, item):
                    if source.complete_each:
                        batch.unfinished.pop(item.id, None)
                        await self._settle([item])
                    succeeded.append(item)
                else:
                    batch.unfinished.pop(item.id, None)
            if batch.lost is not None:
                # done, but taken over before it was settled: the takeover's result stands
                lost = batch.lost
                kept = [item for item in succeeded if item.id not in lost]
                for item in succeeded:
                    if item.id in lost:
                        await self._report(self._lost(batch, item), item)
                succeeded = kept
            self.report.succeeded += len(succeeded)
            batch.unfinished.clear()  # nothing left to extend while the batch settles
            return [] if source.complete_each else succeeded
        finally:
            batch.unfinished.clear()
            if first_beat is not None:
                first_beat.cancel()
            for beat in batch.beats:
                beat.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await beat

    async def _run_one(self, batch: Batch, item: Any) -> bool:
        """Run one item's handler; True when it returned normally and still holds its lease
        (the caller counts and settles those)."""
        source = self.source
        batch.running = item.id
        try:
            result = source.start(item)
            if source.async_handler or inspect.isawaitable(result):
                result = await result
            if result is not None and (keep := getattr(source, "keep_result", None)) is not None:
                await keep(item, result)  # the handler's value, kept before the completion
        except Suspend as suspend:
            # the job is suspended and its lease released already (in the same round trip):
            # nothing to settle, neither a success nor a failure
            batch.running = None
            batch.unfinished.pop(item.id, None)
            self.report.suspended += 1
            if suspend.budget:  # the budget is as good as spent: claim nothing more
                self.deadline = asyncio.get_running_loop().time()
            return False
        except asyncio.CancelledError:
            batch.running = None
            if batch.cancelled != item.id or batch.lane is None:
                raise  # the run itself is being cancelled
            if batch.lane.uncancel() > 0:
                raise  # cancelled from outside as well: that one wins
            await self._report(self._lost(batch, item), item)
            return False
        except Retry as retry:
            batch.running = None
            if not await self._still_held(batch, item):
                return False
            self.report.failed += 1
            await self._record_failure(item, str(retry), retry.after, retry.code)
            return False
        except Skip as skip:
            batch.running = None
            if not await self._still_held(batch, item):
                return False
            skip_item = getattr(source, "skip", None)
            if skip_item is None:
                return True  # a source without skips: a plain success
            batch.unfinished.pop(item.id, None)
            try:
                done = await skip_item(item, skip.code)
            except Exception as exc:  # the item comes back when its lease ends
                await self._report(exc, item)
                return False
            if done:
                self.report.succeeded += 1
            else:
                await self._report(await self._refused(item), item)
            return False
        except Discard as discard:
            batch.running = None
            if not await self._still_held(batch, item):
                return False
            self.report.failed += 1
            await self._record_failure(item, error_text(discard), None, discard.code, True)
            return False
        except Exception as exc:
            batch.running = None
            if not await self._still_held(batch, item):
                return False
            self.report.failed += 1
            await self._record_failure(item, error_text(exc), None, code_of(exc))
            await self._report(exc, item)
            return False
        batch.running = None
        if batch.lost is None:  # the common case, without a coroutine per item
            return True
        return await self._still_held(batch, item)

    async def _still_held(self, batch: Batch, item: Any) -> bool:
        """False (and reported) when the heartbeat found ``item``'s lease lost."""
        if batch.lost is None:
            return True  # the common case: nothing was lost in this batch
        if batch.cancelled == item.id and batch.lane is not None and batch.lane.cancelling():
            # the handler swallowed our cancellation (or raised something else instead)
            batch.lane.uncancel()
        if item.id in batch.lost:
            await self._report(self._lost(batch, item), item)
            return False
        return True

    def _lost(self, batch: Batch, item: Any) -> DrainpipeError:
        return lease_lost(self.source.describe(item), batch.reasons.get(item.id))

    async def _refused(self, item: Any) -> DrainpipeError:
        """The error for a settlement the source refused: cancelled, or a lost lease."""
        reasons = await lost_reasons(self.source, [item])
        return lease_lost(self.source.describe(item), reasons.get(item.id))

    # -- settling -----------------------------------------------------------------------

    async def _settle(self, succeeded: list[Any]) -> None:
        if not succeeded:
            return
        try:
            refused = await self.source.complete(succeeded)
        except Exception as exc:
            # the handlers ran; their items come back after the lease, so say so
            for item in succeeded:
                await self._report(exc, item)
            return
        if refused:
            await self._report_refused(refused)

    async def _report_refused(self, refused: Sequence[Any]) -> None:
        """Completions the source refused: each reported as a lost lease, with its reason."""
        reasons = await lost_reasons(self.source, list(refused))
        for item in refused:
            await self._report(lease_lost(self.source.describe(item), reasons.get(item.id)), item)

    async def _record_failure(
        self,
        item: Any,
        text: str,
        retry_in: float | None,
        code: str | None = None,
        discard: bool = False,
    ) -> None:
        try:
            await self.source.fail(item, text, retry_in, code, discard)
        except Exception as exc:  # the item comes back when its lease ends
            await self._report(exc, item)

    async def _report(self, error: BaseException, item: Any) -> None:
        if self.on_error is None:
            source = self.source
            log_error(source.describe(item), error, logger=source.log, fields=source.fields(item))
        else:
            await call_hook(self.on_error, error, item)
