"""Leases for synchronous code: :func:`lease` (a context manager) and :func:`with_lease`,
the twins of :func:`drainpipe.lease` and :func:`drainpipe.with_lease` (the same checks,
statements and answers; :mod:`drainpipe.leases` explains the semantics)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any, TypeVar

from ..db.sync import SyncDatabase, as_sync_database
from ..leases import LeaseOutcome, _check_key, _check_scope, _instant, _positive_seconds
from ..ops import leases as ops

T = TypeVar("T")

logger = logging.getLogger("drainpipe.leases")

__all__ = ["Lease", "LeaseOutcome", "lease", "with_lease"]


class Lease:
    """A held lease. ``holder`` is its token; ``seconds`` the length each extend grants."""

    def __init__(
        self,
        db: SyncDatabase,
        key: str,
        holder: str,
        seconds: float,
        scope: str,
        now: Callable[[], datetime] | None = None,
    ) -> None:
        self._db = db
        self._now = now
        self.key = key
        self.holder = holder
        self.seconds = seconds
        self.scope = scope
        self._lost = False
        self._released = False

    @property
    def lost(self) -> bool:
        """True once ``extend`` found the lease taken over (or it was released)."""
        return self._lost or self._released

    def extend(self, seconds: float | timedelta | None = None) -> bool:
        """Hold the lease for ``seconds`` (default: its own length) from now; False once lost."""
        length = self.seconds if seconds is None else _positive_seconds(seconds)
        if self.lost:
            return False
        extended = ops.parse_extend(
            self._db.fetch(
                ops.EXTEND,
                ops.extend_params(self.key, self.holder, length, self.scope, _instant(self._now)),
            )
        )
        if not extended:
            self._lost = True
        return extended

    def release(self) -> bool:
        """Free the key now. False when it was no longer ours (or released already)."""
        if self._released:
            return False
        self._released = True
        return ops.parse_release(
            self._db.fetch(ops.RELEASE, ops.release_params(self.key, self.holder, self.scope))
        )

    def __repr__(self) -> str:
        return f"Lease(key={self.key!r}, scope={self.scope!r}, holder={self.holder!r})"


@contextmanager
def lease(
    db: Any,
    key: str,
    seconds: float | timedelta = 60,
    scope: str = "",
    *,
    now: Callable[[], datetime] | None = None,
) -> Iterator[Lease | None]:
    """Hold the lease on ``key`` for the block: a :class:`Lease`, or ``None`` when another
    holder has it. Released when the block ends or raises. ``db``: a DSN (one connection,
    closed with the lease), a sync pool or connection (give leases an autocommit one: on a
    connection inside a transaction the lease joins it, see docs/design-choices.md)."""
    key = _check_key(key)
    length = _positive_seconds(seconds)
    scope = _check_scope(scope)
    owned = isinstance(db, str)
    database = SyncDatabase(db, max_size=1) if owned else as_sync_database(db)
    try:
        holder = ops.parse_acquire(
            database.fetch(ops.ACQUIRE, ops.acquire_params(key, length, scope, _instant(now)))
        )
        if holder is None:
            yield None
            return
        held = Lease(database, key, holder, length, scope, now)
        try:
            yield held
        finally:
            try:
                held.release()
            except Exception:  # never hide the block's outcome; the lease expires by itself
                logger.exception("Releasing lease %r failed; it expires in %g s", key, length)
    finally:
        if owned:
            database.close()


def with_lease(
    db: Any,
    key: str,
    fn: Callable[[Lease], T],
    *,
    seconds: float | timedelta = 60,
    scope: str = "",
    now: Callable[[], datetime] | None = None,
) -> LeaseOutcome[T]:
    """Run ``fn(lease)`` only if the lease on ``key`` can be taken; release it afterwards.
    ``LeaseOutcome(acquired=False)`` without calling ``fn`` when another holder has it."""
    with lease(db, key, seconds, scope, now=now) as held:
        if held is None:
            return LeaseOutcome(False)
        value = fn(held)
    return LeaseOutcome(True, value)
