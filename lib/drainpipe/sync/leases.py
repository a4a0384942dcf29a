# generated from lib/drainpipe/leases/__init__.py by ./scripts/sync-twin: do not edit.
# Change the async source (or tools/sync_twin.py) and run ./scripts/sync-twin again.
"""Leases: one holder at a time per key, for work that must not run twice at once.

    outcome = with_lease(db, "sync:acme", fn, seconds=60)   # fn(lease) runs only if acquired
    with lease(db, "sync:acme") as held:                    # held is a Lease or None
        ...

A lease expires after ``seconds`` unless extended; the next caller then takes it over and
the former holder's ``extend``/``release`` answer False. The SQL lives in
``sql/idempotency.sql`` (``acquire_lease``, ``extend_lease``, ``release_lease``); the
statements and row parsing in :mod:`drainpipe.leases.statements`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any, TypeVar

from ..db.sync import SyncDatabase, as_sync_database
from ..leases import statements as ops
from ..leases.lease_rules import MAX_LEASE_KEY as MAX_LEASE_KEY
from ..leases.lease_rules import LeaseOutcome as LeaseOutcome
from ..leases.lease_rules import _check_key, _check_scope, _instant, _positive_seconds

T = TypeVar("T")

logger = logging.getLogger("drainpipe.leases")


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
        """Hold the lease for ``seconds`` (default: the lease's own length) from now.

        False once the lease was lost: it expired and another caller took it over, or it
        was released. Stop the work then; someone else may be doing it."""
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
    """Hold the lease on ``key`` for the block: yields a :class:`Lease`, or ``None`` when
    another holder has it (the block then runs without it: check for ``None``).

    The lease is released when the block ends or raises. ``db`` is a DSN (a connection is
    opened and closed for this lease), a psycopg connection or pool, or a ``Database``.
    ``seconds`` must be > 0; ``key`` a non-empty string of at most 255 characters.
    ``now`` is the clock expiries are measured on (default: the database's); a test passes
    one it moves instead of waiting a lease out. Use one clock for every holder of a key."""
    key = _check_key(key)
    length = _positive_seconds(seconds)
    scope = _check_scope(scope)
    database, owned = _open(db)
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
            _release_quietly(held)
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

    Returns ``LeaseOutcome(acquired=False)`` without calling ``fn`` when another holder has
    the key (including a ``with_lease`` on the same key further up this call stack).
    If ``fn`` raises, the lease is released and the exception propagates."""
    with lease(db, key, seconds, scope, now=now) as held:
        if held is None:
            return LeaseOutcome(False)
        value = fn(held)
    return LeaseOutcome(True, value)


def _open(db: Any) -> tuple[SyncDatabase, bool]:
    if isinstance(db, str):
        # a DSN: one connection for this lease, closed with it, so nothing leaks per call
        return SyncDatabase(db, max_size=1), True
    return as_sync_database(db), False


def _release_quietly(held: Lease) -> None:
    try:
        held.release()
    except Exception:
        # never hide the block's own outcome; an unreleased lease expires by itself
        logger.exception("Releasing lease %r failed; it expires in %g s", held.key, held.seconds)
