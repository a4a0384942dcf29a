"""The sync twin's run of a claimable source whose items settle one by one (the webhook
inbox: :mod:`drainpipe.sync.inbox_source`), behind ``drainpipe.sync.WebhookInbox.process``.

Written by hand: the async runner (:mod:`drainpipe.engine.runner`) is built on tasks and
cancellation, which have no sync twin. Its semantics are kept, computed with the same pure
core and reported the same way (:mod:`drainpipe.engine.core`):

* claim ``batch`` items, run their handlers in order on the caller's thread, complete each
  success fenced by its attempt; until a claim comes back empty or the deadline passes
  (checked before each claim: claimed items always finish);
* while a batch runs, a heartbeat thread extends every unsettled item every half lease (or
  ``heartbeat_every``) in one round trip;
* a raising handler fails its item (``Retry(after=...)`` with that delay, ``Discard`` at
  once, neither reported to ``on_error``); ``Skip`` is a success (the inbox keeps no codes);
* transient claim errors are retried 3 times (1, 2, 4 s), any other is raised.

A thread cannot be cancelled: a heartbeat that finds a lease lost cannot stop the running
handler. It runs to its end, its outcome is dropped (no settlement is sent) and
``on_error`` gets ``conflict``/``LEASE_LOST``, as the async twin reports after cancelling.
"""

from __future__ import annotations

import inspect
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..codes import Discard, Skip, code_of
from ..engine.core import (
    as_error,
    budget_spent,
    claim_retry_wait,
    heartbeat_interval,
    lease_lost,
    log_error,
    should_retry_claim,
)
from ..errors import TRANSIENT_KINDS, Retry
from ..models import WorkReport
from ..validation import error_text
from .inbox_source import _InboxSource

#: ``on_error(error, item)``: a plain function; ``item`` is None for a claim error
SyncSourceOnError = Callable[[BaseException, Any], Any]

#: the first wait between transient claim retries (then doubling), as the async runner's
_CLAIM_RETRY_WAIT = 1.0


class _Batch:
    """What a batch's heartbeat thread shares with the thread running the batch."""

    def __init__(self, claimed: Sequence[Any]) -> None:
        self.lock = threading.Lock()
        self.unfinished = {item.id: item for item in claimed}
        self.lost: set[int] = set()
        self.done = threading.Event()

    def settled(self, item: Any) -> None:
        with self.lock:
            self.unfinished.pop(item.id, None)

    def is_lost(self, item: Any) -> bool:
        with self.lock:
            return item.id in self.lost


class SourceRunner:
    """One ``process`` call over ``source``; options checked by the caller."""

    def __init__(
        self,
        source: _InboxSource,
        *,
        batch: int,
        lease: float,
        deadline: float | None,
        on_error: SyncSourceOnError | None,
        heartbeat_every: float | None,
    ) -> None:
        if on_error is not None and not callable(on_error):
            raise TypeError("on_error must be callable: on_error(error, item)")
        self.source = source
        self.batch = batch
        self.lease = lease
        self.deadline = deadline
        self.on_error = on_error
        self.every = heartbeat_interval(lease, heartbeat_every, source.heartbeat_floor)
        self.report = WorkReport()

    def run(self) -> WorkReport:
        """Claim and run batches until a claim comes back empty or the deadline passed.
        Raises the claim error that ended the run."""
        retries = 0
        while True:
            if budget_spent(time.monotonic(), self.deadline):
                self.report.budget_exhausted = True
                return self.report
            try:
                claimed = self.source.claim(self.batch, self.lease)
            except Exception as exc:
                error = as_error(exc)
                if should_retry_claim(error.kind in TRANSIENT_KINDS, retries):
                    retries += 1
                    time.sleep(claim_retry_wait(retries, _CLAIM_RETRY_WAIT))
                    continue
                raise error from exc
            retries = 0
            if not claimed:
                return self.report
            self._run_batch(claimed)

    def _run_batch(self, claimed: Sequence[Any]) -> None:
        batch = _Batch(claimed)
        beat = threading.Thread(
            target=self._heartbeat, args=(batch,), name="drainpipe-heartbeat", daemon=True
        )
        beat.start()
        try:
            for item in claimed:
                if batch.is_lost(item):
                    self._report(self._lost(item), item)
                    continue
                if self._run_one(batch, item):
                    batch.settled(item)
                    self._settle(item)
                    self.report.succeeded += 1
                else:
                    batch.settled(item)
        finally:
            batch.done.set()
            beat.join()

    def _run_one(self, batch: _Batch, item: Any) -> bool:
        """Run one handler; True when it returned normally and its item is still held."""
        try:
            result = self.source.start(item)
            if inspect.isawaitable(result):
                getattr(result, "close", lambda: None)()  # never run: no event loop here
                raise TypeError(
                    "drainpipe.sync processes with plain functions; the handler returned an"
                    " awaitable"
                )
        except Retry as retry:
            if self._still_held(batch, item):
                self.report.failed += 1
                self._record_failure(item, str(retry), retry.after, retry.code)
            return False
        except Skip:
            return self._still_held(batch, item)
        except Discard as discard:
            if self._still_held(batch, item):
                self.report.failed += 1
                self._record_failure(item, error_text(discard), None, discard.code, True)
            return False
        except Exception as exc:
            if self._still_held(batch, item):
                self.report.failed += 1
                self._record_failure(item, error_text(exc), None, code_of(exc))
                self._report(exc, item)
            return False
        return self._still_held(batch, item)

    def _still_held(self, batch: _Batch, item: Any) -> bool:
        """False (and reported) when the heartbeat found ``item``'s lease lost."""
        if batch.is_lost(item):
            self._report(self._lost(item), item)
            return False
        return True

    def _lost(self, item: Any) -> Exception:
        return lease_lost(self.source.describe(item))

    def _heartbeat(self, batch: _Batch) -> None:
        """Extend every unsettled item every ``every`` seconds until the batch is done."""
        while not batch.done.wait(self.every):
            with batch.lock:
                items = list(batch.unfinished.values())
            if not items:
                continue
            try:
                held = self.source.extend(items, self.lease)
            except Exception:  # a missed beat is retried next time; the items keep running
                self.source.log.warning(
                    "drainpipe: heartbeat failed for %s",
                    self.source.describe(None),
                    exc_info=True,
                    extra={**self.source.fields(None), "code": None},
                )
                continue
            with batch.lock:
                # an item settled while the extend was on its way is not lost
                gone = {i.id for i in items if i.id not in held and i.id in batch.unfinished}
                for item_id in gone:
                    del batch.unfinished[item_id]
                batch.lost |= gone

    def _settle(self, item: Any) -> None:
        try:
            refused = self.source.complete([item])
        except Exception as exc:  # the handler ran; the item comes back after its lease
            self._report(exc, item)
            return
        for each in refused:
            self._report(self._lost(each), each)

    def _record_failure(
        self,
        item: Any,
        text: str,
        retry_in: float | None,
        code: str | None = None,
        discard: bool = False,
    ) -> None:
        try:
            self.source.fail(item, text, retry_in, code, discard)
        except Exception as exc:  # the item comes back when its lease ends
            self._report(exc, item)

    def _report(self, error: BaseException, item: Any) -> None:
        if self.on_error is None:
            source = self.source
            log_error(source.describe(item), error, logger=source.log, fields=source.fields(item))
        else:
            self.on_error(error, item)
