"""Connections, and the one place where Postgres errors become :class:`DrainpipeError`.

psycopg is imported on first use, not at import time: a serverless function that only
builds a route pays nothing for it until a request needs the database.
"""

from __future__ import annotations

import asyncio
import importlib.util
import re
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from functools import cache
from typing import TYPE_CHECKING, Any

from .errors import DrainpipeError, sql_error

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

Row = tuple[Any, ...]

# Transaction poolers (Supabase's port 6543, pgbouncer in transaction mode) cannot keep
# prepared statements across transactions, so we stop psycopg from preparing there.
_TRANSACTION_POOLER = re.compile(r":6543(/|$|\?)|pgbouncer=true")


def translate_error(exc: BaseException) -> DrainpipeError:
    """Map a database or connection exception to a :class:`DrainpipeError` of the contract.

    SQLSTATE 23505 → conflict (constraint kept as ``code``), 42501 → forbidden,
    P0001 → raised, 57014 → timeout, 40001/40P01 → serialization, 22xxx (and a value
    psycopg refuses to send, such as a NUL character) → invalid_input, 08xxx and connection
    failures (a session the server ended: 57P01-57P03, 53300) → network, else unexpected;
    drainpipe's SQL missing → unexpected with code ``NOT_INSTALLED``. The SQLSTATE table is
    :func:`drainpipe.errors.sql_error`, shared with the PostgREST backends.
    """
    if isinstance(exc, DrainpipeError):
        return exc
    import psycopg

    sqlstate: str | None = getattr(exc, "sqlstate", None)
    diag = getattr(exc, "diag", None)
    primary = getattr(diag, "message_primary", None) if diag is not None else None
    message = primary or str(exc).strip() or type(exc).__name__
    if sqlstate is not None:
        constraint = getattr(diag, "constraint_name", None) if diag is not None else None
        return sql_error(sqlstate, message, constraint=constraint)
    if isinstance(exc, psycopg.OperationalError | OSError | ConnectionError):
        return DrainpipeError("network", message)
    if isinstance(exc, psycopg.DataError):
        # refused by psycopg before sending (a NUL character in text): a bad value, like 22xxx
        return DrainpipeError("invalid_input", message)
    if type(exc).__module__.startswith("psycopg_pool"):
        # PoolTimeout / TooManyRequests: no connection could be had in time
        return DrainpipeError("network", message)
    return DrainpipeError("unexpected", message)


class Database:
    """Runs one SQL statement per call on a DSN, a pool or a single connection.

    * DSN: an ``AsyncConnectionPool`` opened on first use, autocommit connections.
    * pool: connections are borrowed per statement; the pool's own settings apply.
    * connection: statements run on it in order. If it is not in autocommit mode the
      statements join its current transaction and are *not* committed by drainpipe, so an
      enqueue can commit atomically with the caller's own writes.
    """

    def __init__(self, db: Any, *, max_size: int = 10, timeout: float = 10.0) -> None:
        self._dsn: str | None = None
        self._pool: psycopg_pool.AsyncConnectionPool | None = None
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._owns_pool = False
        self._max_size = max_size
        # how long a call waits for a pooled connection before failing with kind "network"
        self._timeout = timeout
        self._open_lock = asyncio.Lock()
        if isinstance(db, str):
            self._dsn = db
        else:
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

    @property
    def dsn(self) -> str | None:
        return self._dsn

    async def _ensure_pool(self) -> psycopg_pool.AsyncConnectionPool:
        if self._pool is not None:
            return self._pool
        async with self._open_lock:
            if self._pool is None:
                from psycopg_pool import AsyncConnectionPool

                assert self._dsn is not None
                kwargs: dict[str, Any] = {"autocommit": True}
                if _TRANSACTION_POOLER.search(self._dsn):
                    kwargs["prepare_threshold"] = None
                pool = AsyncConnectionPool(
                    self._dsn,
                    configure=_configure_connection,
                    min_size=1,
                    max_size=self._max_size,
                    timeout=self._timeout,
                    kwargs=kwargs,
                    open=False,
                    name="drainpipe",
                )
                try:
                    await pool.open(wait=False)
                except Exception as exc:
                    raise translate_error(exc) from exc
                self._pool = pool
                self._owns_pool = True
        return self._pool

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """Borrow a connection; database errors inside become ``DrainpipeError``."""
        try:
            if self._conn is not None:
                yield self._conn
                return
            pool = await self._ensure_pool()
            async with pool.connection() as conn:
                yield conn
        except Exception as exc:
            error = _database_error(exc)
            if error is None:
                raise
            raise error from exc

    async def fetch(self, sql: str, params: Sequence[Any] | None = None) -> list[Row]:
        """Run one statement and return all its rows (as tuples)."""
        # connection()'s work without its generator-based context manager: this runs once
        # per operation, and the extra layer was a measurable part of a single enqueue
        try:
            if self._conn is not None:
                return await self._run(self._conn, sql, params)
            pool = self._pool or await self._ensure_pool()
            async with pool.connection() as conn:
                return await self._run(conn, sql, params)
        except Exception as exc:
            error = _database_error(exc)
            if error is None:
                raise
            raise error from exc

    async def _run(self, conn: Any, sql: str, params: Sequence[Any] | None) -> list[Row]:
        cur = conn.cursor()
        await cur.execute(sql, params)
        result = cur.pgresult
        if result is None or result.nfields == 0:
            return []
        if not self._owns_pool and _has_json_column(result):
            # a connection or pool of the caller's: faster JSON for our cursor only, set up
            # only when the result holds JSON (psycopg applies it to this result)
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
            await self._pool.close()
            self._pool = None


async def _configure_connection(conn: Any) -> None:
    use_fast_json(conn)


@cache
def _fast_json_loaders() -> dict[tuple[str, bool], type[Any]] | None:
    """psycopg loaders that hand json/jsonb straight to orjson, by (type, binary); None
    without orjson. Loader classes of our own rather than ``set_json_loads``: that one
    wraps the function in psycopg's generic loader, a Python call more per value."""
    if importlib.util.find_spec("orjson") is None:
        return None
    import json

    import orjson
    from psycopg.adapt import Loader
    from psycopg.pq import Format

    loads, decode_error = orjson.loads, orjson.JSONDecodeError
    # orjson reads integers beyond 64 bits as floats (or refuses them); jsonb keeps them
    # exact, and so must we: a document with a run of 19 or more digits is read by json,
    # which reads every integer as an int. (translate + find: a regex costs twice as much)
    digits_to_zero = bytes.maketrans(b"123456789", b"000000000")
    long_run = b"0" * 19

    def load(data: Any) -> Any:
        text = bytes(data)
        if long_run not in text.translate(digits_to_zero):
            try:
                return loads(text)
            except decode_error:
                pass
        return json.loads(text)

    class OrjsonLoader(Loader):
        def load(self, data: Any) -> Any:
            return load(data)

    class OrjsonBinaryLoader(OrjsonLoader):
        format = Format.BINARY  # json's binary form is its text

    class OrjsonbBinaryLoader(Loader):
        format = Format.BINARY

        def load(self, data: Any) -> Any:
            return load(data[1:])  # jsonb's binary form: a version byte, then the text

    return {
        ("json", False): OrjsonLoader,
        ("jsonb", False): OrjsonLoader,
        ("json", True): OrjsonBinaryLoader,
        ("jsonb", True): OrjsonbBinaryLoader,
    }


_JSON_OIDS = frozenset({114, 3802})  # json, jsonb


def _has_json_column(result: Any) -> bool:
    return any(result.ftype(column) in _JSON_OIDS for column in range(result.nfields))


@cache
def _orjson_dumps() -> Callable[[Any], Any] | None:
    if importlib.util.find_spec("orjson") is None:
        return None
    import json

    import orjson

    dumps, options = orjson.dumps, orjson.OPT_NON_STR_KEYS

    def fast_dumps(value: Any) -> Any:
        try:
            return dumps(value, option=options)
        except TypeError:  # an integer beyond 64 bits, a type only json knows
            return json.dumps(value)

    return fast_dumps


def jsonb(value: Any) -> Any:
    """A jsonb parameter, serialised with orjson when it is installed (several times faster
    than ``json.dumps``; everything drainpipe stores is plain JSON data by then)."""
    from psycopg.types.json import Jsonb

    return Jsonb(value, dumps=_orjson_dumps())


def use_fast_json(context: Any) -> None:
    """Decode json/jsonb with orjson on a connection or cursor: parsing payloads is most of
    a worker's client-side CPU, and orjson does it several times faster than ``json``."""
    loaders = _fast_json_loaders()
    if loaders is not None:
        adapters = context.adapters
        for (name, _binary), loader in loaders.items():
            adapters.register_loader(name, loader)


def _database_error(exc: Exception) -> DrainpipeError | None:
    """The contract's error for a database or connection failure; None for anything else
    (a DrainpipeError already, or an error that is not the database's)."""
    if isinstance(exc, DrainpipeError) or not _is_database_error(exc):
        return None
    return translate_error(exc)


def _is_database_error(exc: BaseException) -> bool:
    module = type(exc).__module__
    return module.startswith(("psycopg", "psycopg_pool")) or isinstance(exc, OSError)


def as_database(db: Any) -> Database:
    """Wrap whatever the user gave (DSN, pool, connection, Database) as a :class:`Database`."""
    return db if isinstance(db, Database) else Database(db)
