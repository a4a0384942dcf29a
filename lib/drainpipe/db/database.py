"""The async executor: one SQL statement per call on a DSN, a pool or a connection.

psycopg is imported on first use, not at import time: a serverless function that only
builds a route pays nothing for it until a request needs the database. Errors become
:class:`~drainpipe.errors.DrainpipeError` in :mod:`.error_translation`; how a pooled
connection is kept between statements is :mod:`.parking`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from time import monotonic
from typing import TYPE_CHECKING, Any

# asyncio is imported where the Database uses it, not here: the sync twin
# (drainpipe.sync) loads this package and must not load an event loop
from ..errors import DrainpipeError
from .connection_options import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_POOL_TIMEOUT,
    connect_options,
    positive_seconds,
    prepare_options,
    reporting_connection_class,
)
from .error_translation import connect_error, database_error, translate_error
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
from .poolers import decide_prepare, names_pooler, prepare_mode, split_dsn

if TYPE_CHECKING:
    import asyncio

    import psycopg
    import psycopg_pool

Row = tuple[Any, ...]


class Database:
    """Runs one SQL statement per call on a DSN, a pool or a single connection.

    * DSN: an ``AsyncConnectionPool`` opened on first use, autocommit connections. The
      first use fails at once, with libpq's message and a ``code``, when the first
      connection cannot be made (see :func:`connect_error`); ``connect_timeout`` bounds one
      attempt to connect, ``timeout`` a call's wait for a pooled connection.
    * pool: connections are borrowed per statement; the pool's own settings apply.
    * connection: statements run on it in order. If it is not in autocommit mode the
      statements join its current transaction and are *not* committed by drainpipe, so an
      enqueue can commit atomically with the caller's own writes.
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
        self._pool: psycopg_pool.AsyncConnectionPool | None = None
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._owns_pool = False
        self._max_size = max_size
        # how long a call waits for a pooled connection before failing with kind "network"
        self._timeout = positive_seconds(timeout, "timeout")
        # how long one attempt to open a connection may take (a DSN's own connect_timeout wins)
        self._connect_timeout = positive_seconds(connect_timeout, "connect_timeout")
        # the pool connects in the background and only logs its failures: the last one is
        # kept so that the error a caller gets names the cause, not just the wait
        import asyncio

        self._last_connect_error: BaseException | None = None
        self._first_connect_done: asyncio.Event | None = None
        self._open_lock = asyncio.Lock()
        # the database found away (a restart, a failover): calls probe instead of waiting
        # on the pool's doubling reconnect (see .outage)
        self._outage = Outage()
        self._probe_lock = asyncio.Lock()
        self._connect_kwargs: dict[str, Any] = {}
        self._retired: set[asyncio.Task[None]] = set()  # pools closing after a renewal
        self._prepare: dict[str, Any] = {}  # prepare_threshold for a pool we open
        self._detect_direct = False  # prepare=None: each new connection is checked
        self._names_pooler = False
        # the parked connection of our own pool (see PARK_IDLE): (connection, its cursor,
        # when it left the pool, when it was parked); and how many statements or borrowed
        # connections are out right now (one parks only when it is the last)
        self._parked: tuple[Any, Any, float, float] | None = None
        self._busy = 0
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
            # by class name, not isinstance: psycopg is not imported until it is needed.
            # The sync Connection / ConnectionPool are refused here: awaiting them fails later.
            bases = {(c.__module__.partition(".")[0], c.__qualname__) for c in type(db).__mro__}
            if ("psycopg_pool", "AsyncConnectionPool") in bases:
                self._pool = db
            elif ("psycopg", "AsyncConnection") in bases:
                self._conn = db
            else:
                raise TypeError(
                    "db must be a DSN string, a psycopg AsyncConnection or AsyncConnectionPool, "
                    f"not {type(db).__name__}"
                )
            from psycopg.rows import tuple_row  # psycopg is loaded: db is one of its objects

            self._rows = tuple_row

    @property
    def dsn(self) -> str | None:
        """The DSN drainpipe connects with (``pgbouncer=...`` taken out)."""
        return self._dsn

    @property
    def names_pooler(self) -> bool:
        """True when the DSN says a transaction pooler is in front (port 6543 or 6432,
        ``pgbouncer=true``): nothing is prepared, and LISTEN cannot work there."""
        return self._names_pooler

    async def _configure(self, conn: Any) -> None:
        use_fast_json(conn)
        if self._detect_direct:
            await decide_prepare(conn)

    async def _ensure_pool(self) -> psycopg_pool.AsyncConnectionPool:
        if self._pool is not None:
            return self._pool
        async with self._open_lock:
            if self._pool is None:
                import asyncio

                from psycopg_pool import AsyncConnectionPool

                assert self._dsn is not None
                kwargs = connect_options(self._dsn, self._connect_timeout)
                kwargs["autocommit"] = True
                kwargs.update(self._prepare)
                self._connect_kwargs = kwargs
                self._first_connect_done = asyncio.Event()
                self._last_connect_error = None
                pool = AsyncConnectionPool(
                    self._dsn,
                    configure=self._configure,
                    min_size=1,
                    max_size=self._max_size,
                    timeout=self._timeout,
                    kwargs=kwargs,
                    open=False,
                    name="drainpipe",
                    connection_class=reporting_connection_class(self._connect_finished),
                )
                try:
                    await pool.open(wait=False)
                except Exception as exc:
                    raise translate_error(exc) from exc
                # an attempt may take its connect_timeout, then the pool wait decides
                first_attempt = max(self._timeout, kwargs["connect_timeout"] + 1.0)
                await self._await_first_connection(pool, first_attempt)
                self._pool = pool
                self._owns_pool = True
        return self._pool

    async def _await_first_connection(
        self, pool: psycopg_pool.AsyncConnectionPool, wait: float
    ) -> None:
        """Wait for the pool's first connection attempt and fail at once when it failed.

        The first statement needs that connection anyway, so this costs no time; without
        it a missing database or a wrong password waited out the pool's ``timeout`` and
        surfaced as "couldn't get a connection", the cause only in the pool's log.
        """
        import asyncio

        assert self._first_connect_done is not None
        try:
            await asyncio.wait_for(self._first_connect_done.wait(), wait)
        except TimeoutError:
            await pool.close()
            raise DrainpipeError(
                "network",
                f"couldn't connect to the database within {wait:g} s",
                code="CONNECT_TIMEOUT",
            ) from None
        failure = self._last_connect_error
        if failure is not None:
            # the pool would retry in the background: stop it, the next call starts afresh
            await pool.close()
            raise connect_error(failure) from failure

    def _connect_finished(self, error: BaseException | None) -> None:
        self._last_connect_error = error
        if self._first_connect_done is not None:
            self._first_connect_done.set()

    def _error(self, exc: Exception) -> DrainpipeError | None:
        """The error for a failed call: a pool that waited in vain names why it could not
        connect (the last attempt's libpq message and its code), others are translated."""
        if self._dsn is not None and read_only(exc):
            return read_only_error(exc)  # our session is on a standby: an outage (.outage)
        failure = self._last_connect_error
        if failure is not None and type(exc).__name__ == "PoolTimeout":
            error = connect_error(failure)
            return DrainpipeError("network", f"{exc}; the last attempt: {error}", code=error.code)
        return database_error(exc)

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """Borrow a connection; database errors inside become ``DrainpipeError``."""
        try:
            if self._conn is not None:
                yield self._conn
                return
            if self._outage.since is not None:
                await self._probe()
            pool = await self._ensure_pool()
            # counted as out, so no statement parks a connection while this one waits for
            # one; and a parked one goes back first (with a pool of one it is the only one)
            self._busy += 1
            try:
                await self._unpark()
                async with pool.connection() as conn:
                    yield conn
            finally:
                self._busy -= 1
        except Exception as exc:
            error = self._error(exc)
            if error is None:
                raise
            self._note_outage(exc, error)
            raise error from exc

    async def _unpark(self) -> None:
        """Give the parked connection back to the pool (it decides whether it stays)."""
        parked, self._parked = self._parked, None
        if parked is not None and self._pool is not None:
            await self._pool.putconn(parked[0])

    async def fetch(self, sql: str, params: Sequence[Any] | None = None) -> list[Row]:
        """Run one statement and return all its rows (as tuples)."""
        # connection()'s work without its context managers: this runs once per operation.
        # getconn/putconn instead of pool.connection() halves the checkout's client CPU
        # (~4 us instead of ~9: no generator, no connection-level commit on autocommit
        # connections); what that commit did is kept for a pool of transactional ones.
        try:
            if self._conn is not None:
                # a cursor per statement: coroutines sharing this connection may interleave
                cur = self._conn.cursor(row_factory=self._rows)
                return await self._run(cur, sql, params, late_json=True)
            if self._outage.since is not None:
                await self._probe()
            if self._owns_pool and self._pool is not None:
                return await self._fetch_own(sql, params)
            pool = self._pool or await self._ensure_pool()
            conn = await pool.getconn()
            try:
                rows = await self._run_borrowed(conn, sql, params)
                if not conn.autocommit:
                    await conn.commit()
            except BaseException:
                if not conn.autocommit and not conn.closed:
                    with contextlib.suppress(Exception):
                        await conn.rollback()
                raise
            finally:
                await pool.putconn(conn)
            return rows
        except Exception as exc:
            error = self._error(exc)
            if error is None:
                raise
            if error.kind == "network":
                self._note_outage(exc, error)
                await self._discard_broken()
            raise error from exc

    def _note_outage(self, exc: BaseException, error: DrainpipeError) -> None:
        """Start (or go on with) an outage of our own pool's database when ``exc`` says the
        server is gone: a lost or refused session, a session found read-only (on a
        standby), or a pool wait whose last connection attempt failed. A pool merely busy
        is no outage."""
        if self._dsn is None or error.kind != "network":
            return
        pool_wait = type(exc).__name__ == "PoolTimeout"
        if (
            read_only(exc)
            or (pool_wait and self._last_connect_error is not None)
            or (not pool_wait and ends_session(exc))
        ):
            self._outage.begin(error, monotonic())

    async def _probe(self) -> None:
        """While the database is away a call waits, as it would for the pool, at most
        ``timeout`` seconds: one plain connection attempt at most every
        OUTAGE_PROBE_INTERVAL, by one caller at a time. Once one connects the call goes on
        (on a fresh pool when the pool's own reconnection failed meanwhile: it may sleep in
        its backoff for seconds); past the wait it fails with the last attempt's cause."""
        import asyncio

        deadline = monotonic() + self._timeout
        while True:
            async with self._probe_lock:
                outage = self._outage
                if outage.since is None:
                    return  # back (this call's probe or another's)
                if outage.probe_due(monotonic()) and await self._probe_once(outage):
                    return
                now = monotonic()
                if now >= deadline:
                    raise outage.refusal(now)
                pause = min(outage.next_probe, deadline) - now
            await asyncio.sleep(max(pause, 0.01))

    async def _probe_once(self, outage: Outage) -> bool:
        """One connection attempt; True (the outage is over) when it connected (to a server
        that takes writes, when the outage began with a read-only session)."""
        import psycopg

        assert self._dsn is not None
        kwargs = self._connect_kwargs or {
            **connect_options(self._dsn, self._connect_timeout),
            "autocommit": True,
        }
        try:
            probe = await psycopg.AsyncConnection.connect(self._dsn, **kwargs)
        except Exception as exc:
            outage.probe_failed(connect_error(exc), monotonic())
            return False
        try:
            writable = not outage.read_only or await self._takes_writes(probe)
        except Exception as exc:
            outage.probe_failed(connect_error(exc), monotonic())
            return False
        finally:
            await probe.close()
        if not writable:
            outage.probe_failed(still_read_only(), monotonic())
            return False
        if self._pool is not None and (self._last_connect_error is not None or outage.read_only):
            try:
                await self._renew_pool()
            except DrainpipeError as exc:  # gone again between the probe and the pool
                outage.probe_failed(exc, monotonic())
                return False
        outage.end()
        return True

    @staticmethod
    async def _takes_writes(probe: Any) -> bool:
        """Whether the server a probe reached takes writes (not a standby)."""
        row = await (await probe.execute(PROBE_WRITABLE)).fetchone()
        return row is not None and row[0] != "on"

    async def _renew_pool(self) -> None:
        """Replace our pool with a fresh one (which connects at once); the old one closes
        in the background, closing each borrowed connection as it comes back."""
        import asyncio

        old = self._pool
        await self._unpark()
        self._pool = None
        try:
            await self._ensure_pool()
        finally:
            if old is not None:
                task = asyncio.create_task(old.close(timeout=1.0))
                self._retired.add(task)
                task.add_done_callback(self._retired.discard)

    async def _discard_broken(self) -> None:
        """After a session the server ended (a restart, a failover, a pooler restart, a
        terminated backend), test the pool's idle connections and drop the dead ones, so a
        retry does not draw the next dead connection. Only on this error path: checking
        every connection at checkout would cost a round trip per statement."""
        import asyncio

        pool = self._pool
        if pool is None:
            return
        try:
            await self._unpark()  # it may be as dead as the one that failed: checked too
            await asyncio.wait_for(pool.check(), self._connect_timeout)
        except Exception:  # best effort: the retry (or the pool itself) finds out anyway
            return

    async def _fetch_own(self, sql: str, params: Sequence[Any] | None) -> list[Row]:
        """:meth:`fetch` on the pool drainpipe opened for a DSN (autocommit connections):
        on the parked connection when there is one, else on one from the pool, which is
        parked afterwards when no other statement is out (PARK_IDLE, PARK_ROUND)."""
        pool = self._pool
        assert pool is not None
        # counted before any wait: a statement that finishes meanwhile must not park the
        # connection this one would wait for in the pool
        self._busy += 1
        try:
            now = monotonic()
            parked, self._parked = self._parked, None
            if parked is not None and now - parked[3] < PARK_IDLE:
                conn, cur, since, _ = parked
            else:
                if parked is not None:
                    await pool.putconn(parked[0])  # idle too long: the pool's again
                conn = await pool.getconn()
                cur, since = kept_cursor(conn, None, False), now
        except BaseException:
            self._busy -= 1
            raise
        try:
            await cur.execute(sql, params)
            result = cur.pgresult
            rows: list[Row] = [] if result is None or result.nfields == 0 else await cur.fetchall()
        except BaseException:
            self._busy -= 1
            await pool.putconn(conn)  # the pool sees what state it is in
            raise
        self._busy -= 1
        if self._busy or self._parked is not None or monotonic() - since >= PARK_ROUND:
            await pool.putconn(conn)
        else:
            self._parked = (conn, cur, since, monotonic())
        return rows

    async def _run_borrowed(self, conn: Any, sql: str, params: Sequence[Any] | None) -> list[Row]:
        """A statement on a connection borrowed from a pool, with its kept cursor."""
        cur = kept_cursor(conn, self._rows, not self._owns_pool)
        return await self._run(cur, sql, params, late_json=False)

    async def _run(
        self, cur: Any, sql: str, params: Sequence[Any] | None, *, late_json: bool
    ) -> list[Row]:
        """``late_json``: a new cursor on a connection of the caller's, which gets the faster
        JSON loaders only when the result holds JSON (psycopg applies them to this result)."""
        await cur.execute(sql, params)
        result = cur.pgresult
        if result is None or result.nfields == 0:
            return []
        if late_json and _has_json_column(result):
            use_fast_json(cur)
        rows: list[Row] = await cur.fetchall()
        return rows

    async def fetchrow(self, sql: str, params: Sequence[Any] | None = None) -> Row | None:
        rows = await self.fetch(sql, params)
        return rows[0] if rows else None

    async def fetchval(self, sql: str, params: Sequence[Any] | None = None) -> Any:
        rows = await self.fetch(sql, params)
        return rows[0][0] if rows else None

    async def close(self) -> None:
        """Close the pool drainpipe opened for a DSN (a pool or connection you gave stays open)."""
        if self._owns_pool and self._pool is not None:
            await self._unpark()
            await self._pool.close()
            self._pool = None
        for task in list(self._retired):
            with contextlib.suppress(Exception):
                await task


def as_database(db: Any) -> Database:
    """Wrap whatever the user gave (DSN, pool, connection, Database) as a :class:`Database`."""
    return db if isinstance(db, Database) else Database(db)
