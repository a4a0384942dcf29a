"""Coming back quickly after the database was away (a restart, a crash, a failover).

psycopg_pool reconnects a lost connection in the background with a doubling wait (1, 2,
4, 8, 16 s ...), so once the server is back a pool may sleep for many seconds before it
tries again, and every caller waits out the pool's ``timeout`` meanwhile. Measured with a
pg_auto_failover formation, workers took 9-33 s to complete jobs after the promotion.

So :class:`~drainpipe.db.Database` (and the sync twin) watch their own pool: a failure
that says the server or the way to it is gone starts an :class:`Outage`. While it lasts a
call does not wait on the pool: one caller at a time opens a plain connection (a *probe*,
the same DSN, so a multi-host DSN finds the new primary), at most every
:data:`OUTAGE_PROBE_INTERVAL` seconds, and every call waits for a probe to connect, at most
the pool's ``timeout`` (then ``network`` with the last probe's cause). When a probe
connects, the pool is replaced by a fresh one if its own reconnection failed meanwhile (a
fresh pool connects at once), and the calls go on. A database that stays down
sees one connection attempt per :data:`OUTAGE_PROBE_INTERVAL` from each process, never a
retry storm.

A write refused because the session is read-only (SQLSTATE 25006) on drainpipe's own pool
is an outage too, code ``READ_ONLY``: the session reached a standby (an old primary that
restarted as one after a switchover, or a DNS name that still points at the old writer),
and so may every session in the pool. The probe then also asks the server whether it takes
writes (``transaction_read_only``), and when one does the pool is replaced, whatever its
own reconnection did.
"""

from __future__ import annotations

from typing import Final

from ..errors import DrainpipeError

#: Seconds between two probes while the database is away.
OUTAGE_PROBE_INTERVAL: Final = 0.5


#: The SQLSTATE of a write in a read-only session (a standby's, or ``default_transaction_read_only``).
READ_ONLY_STATE: Final = "25006"
#: The ``code`` of the ``network`` error a write refused as read-only on drainpipe's own pool
#: gets (the outage's cause while it lasts).
READ_ONLY: Final = "READ_ONLY"


def read_only(exc: BaseException) -> bool:
    """True for a write refused because the session is read-only (SQLSTATE 25006)."""
    return getattr(exc, "sqlstate", None) == READ_ONLY_STATE


def read_only_error(exc: BaseException) -> DrainpipeError:
    """The error of a write a read-only session of drainpipe's own pool refused."""
    diag = getattr(exc, "diag", None)
    message = getattr(diag, "message_primary", None) or str(exc).strip()
    return DrainpipeError(
        "network",
        f"the session is read-only (a standby, not the primary): {message}",
        code=READ_ONLY,
    )


#: What a probe asks when the outage began with a read-only session: "on" on a standby.
PROBE_WRITABLE: Final = "SHOW transaction_read_only"


def still_read_only() -> DrainpipeError:
    """A probe's failure when the server it reached does not take writes (yet)."""
    return DrainpipeError(
        "network", "the server reached is read-only (a standby, not the primary)", code=READ_ONLY
    )


def ends_session(exc: BaseException) -> bool:
    """True for a failure that says the server, or the way to it, is gone: a connection
    lost or refused (psycopg's ``OperationalError``, which covers the server ending
    sessions: 57P01-57P03) or a socket error."""
    import psycopg

    return isinstance(exc, psycopg.OperationalError | OSError)


class Outage:
    """When the database was found away, the cause, and when the next probe is due."""

    def __init__(self) -> None:
        self.since: float | None = None
        self.next_probe = 0.0
        self.error: DrainpipeError | None = None
        #: the pool's sessions may be on a standby: a probe must find a server that takes
        #: writes, and the pool is replaced once one does
        self.read_only = False

    @property
    def on(self) -> bool:
        return self.since is not None

    def begin(self, error: DrainpipeError, now: float) -> None:
        """A call failed because the database is away (the first probe may go at once)."""
        if self.since is None:
            self.since = now
            self.next_probe = now
        self.error = error
        if error.code == READ_ONLY:
            self.read_only = True

    def probe_due(self, now: float) -> bool:
        return now >= self.next_probe

    def probe_failed(self, error: DrainpipeError, now: float) -> None:
        self.error = error
        self.next_probe = now + OUTAGE_PROBE_INTERVAL

    def end(self) -> None:
        self.since = None
        self.error = None
        self.read_only = False

    def refusal(self, now: float) -> DrainpipeError:
        """The error a call gets while the database is away and no probe is due."""
        since = self.since if self.since is not None else now
        cause = self.error
        return DrainpipeError(
            "network",
            f"the database has been unreachable for {now - since:.1f} s"
            f" (the next connection attempt in {max(0.0, self.next_probe - now):.1f} s)"
            + (f": {cause}" if cause is not None else ""),
            code=cause.code if cause is not None and cause.code else "CONNECTION_FAILED",
        )
