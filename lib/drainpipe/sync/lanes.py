"""The threads of a sync twin's lane: the batch its heartbeat thread shares with it, and
that heartbeat thread (:class:`~drainpipe.sync.worker.SyncWorker` runs them)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any

from ..models import Job

__all__ = ["Batch", "Beats"]


class Batch:
    """What a batch's heartbeat thread shares with the lane running the batch."""

    def __init__(self, claimed: Sequence[Job[Any]]) -> None:
        self.lock = threading.Lock()
        self.unfinished = {job.id: job for job in claimed}
        self.lost: set[int] = set()
        self.reasons: dict[int, str] = {}  # why a lost job was lost, when known
        self.done = threading.Event()

    def is_lost(self, job: Job[Any]) -> bool:
        with self.lock:
            return job.id in self.lost

    def settled(self, job: Job[Any]) -> None:
        with self.lock:
            self.unfinished.pop(job.id, None)


class Beats:
    """A lane's heartbeat thread, handed each batch in turn (starting a thread per batch
    cost 15% of a fast drain); started with the lane's first batch, so an empty drain
    starts none."""

    def __init__(self, beat: Callable[[Batch], None]) -> None:
        self._beat = beat
        self._batches: queue.SimpleQueue[Batch | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def put(self, batch: Batch) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="drainpipe-heartbeat", daemon=True
            )
            self._thread.start()
        self._batches.put(batch)

    def _run(self) -> None:
        while (batch := self._batches.get()) is not None:
            self._beat(batch)

    def stop(self) -> None:
        if self._thread is not None:
            self._batches.put(None)
            self._thread.join()
