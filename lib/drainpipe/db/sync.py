"""The synchronous executor of the sans-I/O operations (:mod:`drainpipe.statements`).

:class:`SyncDatabase` is :class:`drainpipe.db.Database` without an event loop: one
statement per call on a DSN (a ``psycopg_pool.ConnectionPool`` drainpipe opens on first
use), a pool you give, or a ``psycopg.Connection`` whose open transaction the statements
join. Errors go through the same translation (:func:`drainpipe.db.translate_error`,
:func:`drainpipe.db.connect_error`), so the sync twin answers with the same kinds and codes.
psycopg is imported on first use, as for the async executor.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from time import monotonic
from typing import TYPE_CHECKING, Any

from ..errors import DrainpipeError
from .connection_options import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_POOL_TIMEOUT,
    connect_options,
    positive_seconds,
    prepare_options,
)
from .error_translation import connect_error, database_error
from .json import _has_json_column, use_fast_json
from .outage import (
    PROBE_WRITABLE,
    Outage,
    ends_session,
    read_only,
    read_only_error,
    still_read_only,
)
from .parking import PARK_IDLE, PARK_ROUND, kept_cursor
from .poolers import decide_prepare_sync, names_pooler, prepare_mode, split_dsn

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

Row = tuple[Any, ...]


class SyncDatabase:
    """Runs one SQL statement per call, synchronously, on a DSN, a pool or a connection.

    * DSN: a ``ConnectionPool`` of autocommit connections, opened on first use; the first
      use fails at once with libpq's cause and a ``code`` when it cannot connect.
    * ``psycopg_pool.ConnectionPool``: a connection is borrowed per statement.
    * ``psycopg.Connection``: statements run on it. Not in autocommit mode, they join its
      open transaction and drainpipe never commits: a Django view's enqueue commits or
      rolls back with the view's own writes. A lock serialises drainpipe's statements on
      it (a heartbeat thread and the handler's thread may share it).
    """

    def __init__(
        self,
        db: Any,
        *,
        max_size: int = 10,
        timeout: float = DEFAULT_POOL_TIMEOUT,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        prepare: bool | None = None,
    ) -> None:
        self._dsn: str | None = None
        self._pool: psycopg_pool.ConnectionPool | None = None
        self._conn: psycopg.Connection[Any] | None = None
        self._owns_pool = False
        self._max_size = max_size
        self._timeout = positive_seconds(timeout, "timeout")
        self._connect_timeout = positive_seconds(connect_timeout, "connect_timeout")
        self._open_lock = threading.Lock()
        self._conn_lock = threading.RLock()
        # the database found away: calls probe instead of waiting on the pool (db.outage)
        self._outage = Outage()
        self._probe_lock = threading.Lock()
        self._connect_kwargs: dict[str, Any] = {}
        self._prepare: dict[str, Any] = {}  # prepare_threshold for a pool we open
        self._detect_direct = False  # prepare=None: each new connection is checked
        self._names_pooler = False
        # the parked connection of our own pool, as in the async Database (PARK_IDLE):
        # (connection, its cursor, when it left the pool, when it was parked), and how many
        # statements or borrowed connections are out; both under _park_lock (threads)
        self._parked: tuple[Any, Any, float, float] | None = None
        self._busy = 0
        self._park_lock = threading.Lock()
        # tuples, whatever rows a connection or pool of the caller's makes (a dict_row
        # pool is common in apps); None: the connection's own (ours make tuples)
        self._rows: Any = None
        if isinstance(db, str):
            self._dsn = split_dsn(db)[0]  # libpq refuses drainpipe's pgbouncer=true
            self._names_pooler = names_pooler(db)
            self._prepare = prepare_options(db, prepare)
            self._detect_direct = prepare_mode(db, prepare) == "detect"
        else:
            if prepare is not None:
                raise ValueError(
                    "prepare applies to a DSN; a pool or connection of yours keeps its own"
                    " prepare_threshold (pass prepare_threshold=None in its kwargs)"
                )
            # by class name: psycopg is not imported until it is needed. The async classes
            # are refused here (a sync call cannot await them).
            bases = {(c.__module__.partition(".")[0], c.__qualname__) for c in type(db).__mro__}
            if ("psycopg_pool", "ConnectionPool") in bases:
                self._pool = db
            elif ("psycopg", "Connection") in bases:
                self._conn = db
            else:
                raise TypeError(
                    "db must be a DSN string, a psycopg Connection or a psycopg_pool "
                    f"ConnectionPool, not {type(db).__name__} (the async ones belong to "
                    "drainpipe.Jobs and friends)"
                )
            from psycopg.rows import tuple_row  # psycopg is loaded: db is one of its objects

            self._rows = tuple_row

    @property
    def dsn(self) -> str | None:
        """The DSN drainpipe connects with (``pgbouncer=...`` taken out)."""
        return self._dsn

    @property
    def names_pooler(self) -> bool:
        """True when the DSN says a transaction pooler is in front (see
        :attr:`drainpipe.db.Database.names_pooler`)."""
        return self._names_pooler

    def _configure(self, conn: Any) -> None:
        use_fast_json(conn)
        if self._detect_direct:
            decide_prepare_sync(conn)

    @property
    def joins_transactions(self) -> bool:
        """True when statements run on the caller's connection (and its transaction)."""
        return self._conn is not None

    def _ensure_pool(self) -> psycopg_pool.ConnectionPool:
        if self._pool is not None:
            return self._pool
        with self._open_lock:
            if self._pool is None:
                import psycopg
                from psycopg_pool import ConnectionPool

                assert self._dsn is not None
                kwargs = connect_options(self._dsn, self._connect_timeout)
                kwargs["autocommit"] = True
                kwargs.update(self._prepare)
                self._connect_kwargs = kwargs
                # one connection first, in this thread: a missing database or a wrong
                # password fails now with libpq's cause, not after the pool's wait
                try:
                    psycopg.connect(self._dsn, **kwargs).close()
                except Exception as exc:
                    raise connect_error(exc) from exc
                pool: psycopg_pool.ConnectionPool = ConnectionPool(
                    self._dsn,
                    configure=self._configure,
                    min_size=1,
                    max_size=self._max_size,
                    timeout=self._timeout,
                    kwargs=kwargs,
                    open=False,
                    name="drainpipe-sync",
                )
                pool.open(wait=False)
                self._pool = pool
                self._owns_pool = True
        return self._pool

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """Borrow a connection; database errors inside become ``DrainpipeError``."""
        try:
            if self._conn is not None:
                with self._conn_lock:
                    yield self._conn
                return
            if self._outage.since is not None:
                self._probe()
            pool = self._ensure_pool()
            # counted as out, so no statement parks a connection while this one waits for
            # one; and a parked one goes back first (with a pool of one it is the only one)
            with self._park_lock:
                self._busy += 1
            try:
                self._unpark()
                with pool.connection() as conn:
                    yield conn
            finally:
                with self._park_lock:
                    self._busy -= 1
        except Exception as exc:
            error = database_error(exc)
            if error is None:
                raise
            raise error from exc

    def _unpark(self) -> None:
        """Give the parked connection back to the pool (it decides whether it stays)."""
        with self._park_lock:
            parked, self._parked = self._parked, None
        if parked is not None and self._pool is not None:
            self._pool.putconn(parked[0])

    def fetch(self, sql: str, params: Sequence[Any] | None = None) -> list[Row]:
        """Run one statement and return all its rows (as tuples)."""
        try:
            if self._conn is not None:
                with self._conn_lock:
                    cur = self._conn.cursor(row_factory=self._rows)
                    return self._run(cur, sql, params, late_json=True)
            if self._outage.since is not None:
                self._probe()
            if self._owns_pool and self._pool is not None:
                return self._fetch_own(self._pool, sql, params)
            # getconn/putconn rather than pool.connection(): no generator, no commit of an
            # autocommit connection; a pool of transactional ones is committed as it did
            pool = self._pool or self._ensure_pool()
            conn = pool.getconn()
            try:
                rows = self._run_borrowed(conn, sql, params)
                if not conn.autocommit:
                    conn.commit()
            except BaseException:
                if not conn.autocommit and not conn.closed:
                    with contextlib.suppress(Exception):
                        conn.rollback()
                raise
            finally:
                pool.putconn(conn)
            return rows
        except DrainpipeError:
            raise
        except Exception as exc:
            error = database_error(exc)
            if error is None:
                raise
            if self._dsn is not None and read_only(exc):
                error = read_only_error(exc)  # our session is on a standby: an outage
            if error.kind == "network" and self._owns_pool and self._pool is not None:
                # a busy pool's wait (PoolTimeout) is no outage
                if ends_session(exc) or read_only(exc):
                    self._outage.begin(error, monotonic())
                self._unpark()  # it may be as dead as the one that failed: checked too
                self._pool.check()  # drop the dead idle connections before a retry
            raise error from exc

    def _probe(self) -> None:
        """While the database is away a call waits at most ``timeout`` seconds, as it would
        for the pool: one plain connection attempt at most every OUTAGE_PROBE_INTERVAL, by
        one thread at a time; once one connects, a fresh pool (the old one's reconnection
        may sleep in its doubling backoff) and the call goes on."""
        import time

        deadline = monotonic() + self._timeout
        while True:
            with self._probe_lock:
                outage = self._outage
                if outage.since is None:
                    return
                if outage.probe_due(monotonic()) and self._probe_once(outage):
                    return
                now = monotonic()
                if now >= deadline:
                    raise outage.refusal(now)
                pause = min(outage.next_probe, deadline) - now
            time.sleep(max(pause, 0.01))

    def _probe_once(self, outage: Outage) -> bool:
        """One connection attempt; True (the outage is over) when it connected (to a server
        that takes writes, when the outage began with a read-only session)."""
        import psycopg

        assert self._dsn is not None
        try:
            with psycopg.connect(self._dsn, **self._connect_kwargs) as probe:
                row = probe.execute(PROBE_WRITABLE).fetchone() if outage.read_only else None
        except Exception as exc:
            outage.probe_failed(connect_error(exc), monotonic())
            return False
        if row is not None and row[0] == "on":
            outage.probe_failed(still_read_only(), monotonic())
            return False
        old = self._pool
        if old is not None:
            self._unpark()
            self._pool = None
            try:
                self._ensure_pool()
            except DrainpipeError as exc:
                outage.probe_failed(exc, monotonic())
                return False
            finally:
                old.close(timeout=0.0)
        outage.end()
        return True

    def _fetch_own(
        self, pool: psycopg_pool.ConnectionPool, sql: str, params: Sequence[Any] | None
    ) -> list[Row]:
        """:meth:`fetch` on the pool drainpipe opened for a DSN (autocommit connections):
        on the parked connection when there is one, else on one from the pool, which is
        parked afterwards when no other statement is out (PARK_IDLE, PARK_ROUND)."""
        with self._park_lock:
            # counted before any wait: a statement that finishes meanwhile must not park
            # the connection this one would wait for in the pool
            self._busy += 1
            parked, self._parked = self._parked, None
        try:
            now = monotonic()
            if parked is not None and now - parked[3] < PARK_IDLE:
                conn, cur, since, _ = parked
            else:
                if parked is not None:
                    pool.putconn(parked[0])  # idle too long: the pool's again
                conn = pool.getconn()
                cur, since = kept_cursor(conn, None, False), now
        except BaseException:
            with self._park_lock:
                self._busy -= 1
            raise
        try:
            cur.execute(sql, params)
            result = cur.pgresult
            rows: list[Row] = [] if result is None or result.nfields == 0 else cur.fetchall()
        except BaseException:
            with self._park_lock:
                self._busy -= 1
            pool.putconn(conn)  # the pool sees what state it is in
            raise
        with self._park_lock:
            self._busy -= 1
            park = not self._busy and self._parked is None and monotonic() - since < PARK_ROUND
            if park:
                self._parked = (conn, cur, since, monotonic())
        if not park:
            pool.putconn(conn)
        return rows

    def _run_borrowed(self, conn: Any, sql: str, params: Sequence[Any] | None) -> list[Row]:
        """A statement on a connection borrowed from a pool, with its kept cursor."""
        cur = kept_cursor(conn, self._rows, not self._owns_pool)
        return self._run(cur, sql, params, late_json=False)

    def _run(
        self, cur: Any, sql: str, params: Sequence[Any] | None, *, late_json: bool
    ) -> list[Row]:
        """``late_json``: a new cursor on the caller's connection, which gets the faster JSON
        loaders only when the result holds JSON (our cursor only)."""
        cur.execute(sql, params)
        result = cur.pgresult
        if result is None or result.nfields == 0:
            return []
        if late_json and _has_json_column(result):
            use_fast_json(cur)
        rows: list[Row] = cur.fetchall()
        return rows

    def close(self) -> None:
        """Close the pool drainpipe opened for a DSN (a pool or connection you gave stays open)."""
        if self._owns_pool and self._pool is not None:
            self._unpark()
            self._pool.close()
            self._pool = None


def as_sync_database(db: Any) -> SyncDatabase:
    """Wrap what the user gave (DSN, sync pool, sync connection, SyncDatabase)."""
    return db if isinstance(db, SyncDatabase) else SyncDatabase(db)
