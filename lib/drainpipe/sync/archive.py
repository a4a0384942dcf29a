# generated from lib/drainpipe/jobs/archive.py by ./scripts/sync-twin: do not edit.
# Change the async source (or tools/sync_twin.py) and run ./scripts/sync-twin again.
"""Counts, dead letters and the archive of finished jobs (docs/reference.md section 2): ``stats``,
``list_dead`` and ``purge_archive`` of :class:`~drainpipe.Jobs`. ``drainpipe.sync.archive`` is
generated from this module (``./scripts/sync-twin``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ..jobs.job_rules import SEVEN_DAYS, THIRTY_DAYS

if TYPE_CHECKING:
    from ..models import DeadJob, QueueStats
    from .backend import SyncSqlBackend

__all__ = ["SyncArchiveMixin"]


class SyncArchiveMixin:
    """``stats``, ``list_dead`` and ``purge_archive`` of :class:`~drainpipe.Jobs`."""

    if TYPE_CHECKING:
        driver: SyncSqlBackend

        def _stats_names(self, queues: Sequence[str] | None) -> list[str]: ...
        def _list_dead_args(
            self, queue: str, limit: Any, cursor: Any
        ) -> tuple[int, int | None]: ...
        def _purge_args(
            self, queue: str, older_than: Any, dead_older_than: Any, batch: Any
        ) -> tuple[timedelta, timedelta]: ...
        def _opened(self, dead: DeadJob) -> DeadJob: ...

    def stats(self, queues: Sequence[str] | None = None) -> dict[str, QueueStats]:
        """Counts per queue (default: every declared queue) in one round trip."""
        names = self._stats_names(queues)
        return dict(self.driver.stats(names))

    def list_dead(
        self, queue: str, *, limit: int = 100, cursor: int | None = None
    ) -> list[DeadJob]:
        """Dead letters newest first; pass the last id seen as ``cursor`` for older ones."""
        limit, cursor = self._list_dead_args(queue, limit, cursor)
        found = self.driver.list_dead(queue, limit=limit, before=cursor)
        return [self._opened(dead) for dead in found]

    def purge_archive(
        self,
        queue: str,
        *,
        older_than: float | timedelta = SEVEN_DAYS,
        dead_older_than: float | timedelta = THIRTY_DAYS,
        batch: int = 10000,
    ) -> int:
        """Delete up to ``batch`` completed jobs older than ``older_than`` and dead letters
        older than ``dead_older_than``; live jobs are never touched."""
        older, dead_older = self._purge_args(queue, older_than, dead_older_than, batch)
        return int(
            self.driver.purge_archive(
                queue, older_than=older, dead_older_than=dead_older, batch=batch
            )
        )
