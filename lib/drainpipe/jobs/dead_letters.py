"""Dead letters and the archive of a :class:`~drainpipe.jobs.Jobs`: list, retry, replay,
purge. Payloads of sealed (encrypted) jobs are opened when listed."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING

from ..backends import (
    SupportsListDead,
    SupportsPurgeArchive,
    SupportsReplay,
    SupportsRetryDead,
    lacking,
)
from ..models import DeadJob
from ..validation import INT8_MAX, positive_int, seconds

if TYPE_CHECKING:
    from ..backends import QueueBackend
    from ..keyring import Keyring

SEVEN_DAYS = timedelta(days=7)
THIRTY_DAYS = timedelta(days=30)


class DeadLetterMixin:
    backend: QueueBackend
    keyring: Keyring | None

    def _check_queue(self, queue: str) -> str:
        raise NotImplementedError

    def _opened(self, dead: DeadJob) -> DeadJob:
        if self.keyring is None:
            return dead
        from ..keyring import UnreadableCiphertext
        from .sealing import is_sealed, open_stored

        if not is_sealed(dead.payload):
            return dead
        try:
            payload, context = open_stored(self.keyring, dead.queue, dead.payload)
        except UnreadableCiphertext:
            return dead  # listed as stored: the sealed form, never a guess
        return DeadJob(
            id=dead.id,
            queue=dead.queue,
            payload=payload,
            context=context,
            attempts=dead.attempts,
            max_attempts=dead.max_attempts,
            last_error=dead.last_error,
            enqueued_at=dead.enqueued_at,
            died_at=dead.died_at,
        )

    async def list_dead(
        self, queue: str, *, limit: int = 100, cursor: int | None = None
    ) -> list[DeadJob]:
        """Dead letters newest first; pass the last id seen as ``cursor`` for older ones."""
        self._check_queue(queue)
        positive_int(limit, "limit", maximum=INT8_MAX)  # clamped to 1000 below
        if cursor is not None:
            positive_int(cursor, "cursor", minimum=0, maximum=INT8_MAX)
        backend = self.backend
        if not isinstance(backend, SupportsListDead):
            raise lacking(backend, "list_dead")
        found = await backend.list_dead(queue, limit=min(limit, 1000), before=cursor)
        return [self._opened(dead) for dead in found]

    async def retry_dead(
        self, queue: str, *, ids: Sequence[int] | None = None, limit: int = 1000
    ) -> int:
        """Replay the given dead jobs (or the newest ``limit``) not replayed yet, each as a
        child like ``replay``; returns how many went back."""
        self._check_queue(queue)
        positive_int(limit, "limit")
        if ids is not None:
            ids = [positive_int(i, "ids", minimum=0, maximum=INT8_MAX) for i in ids]
        backend = self.backend
        if not isinstance(backend, SupportsRetryDead):
            raise lacking(backend, "retry_dead")
        return int(await backend.retry_dead(queue, ids=ids, limit=limit))

    async def replay(self, queue: str, job_id: int) -> int | None:
        """Enqueue a dead job again as its child (same payload, dedupe key, tenant and
        max_attempts; ``parent_id`` = ``job_id``); the dead job stays dead with
        ``replayed_by``. The child's id, or None unless a dead job not replayed yet."""
        self._check_queue(queue)
        positive_int(job_id, "job_id", minimum=0, maximum=INT8_MAX)
        backend = self.backend
        if not isinstance(backend, SupportsReplay):
            raise lacking(backend, "replay")
        result = await backend.replay(queue, job_id)
        return None if result is None else int(result)

    async def purge_archive(
        self,
        queue: str,
        *,
        older_than: float | timedelta = SEVEN_DAYS,
        dead_older_than: float | timedelta = THIRTY_DAYS,
        batch: int = 10000,
    ) -> int:
        """Delete up to ``batch`` completed jobs older than ``older_than`` and dead letters
        older than ``dead_older_than``; live jobs are never touched."""
        self._check_queue(queue)
        positive_int(batch, "batch")
        backend = self.backend
        if not isinstance(backend, SupportsPurgeArchive):
            raise lacking(backend, "purge_archive")
        return int(
            await backend.purge_archive(
                queue,
                older_than=timedelta(seconds=seconds(older_than, "older_than")),
                dead_older_than=timedelta(seconds=seconds(dead_older_than, "dead_older_than")),
                batch=batch,
            )
        )
