"""Wake-ups for long polls on a long-lived server: one session connection LISTENs on
``drainpipe_agent_inbox`` (the fan-out and releases NOTIFY it with the inbox id) and wakes
the polls of that inbox at once instead of at their next backoff step.

Only where a process lives on (``drainpipe serve``, uvicorn, a container): a serverless
function's pooled connections must not LISTEN, and its polls keep the 100 ms → 1 s steps.
A listener that cannot connect or loses its connection is dropped quietly; polls then
still find events at their next step.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Final

log = logging.getLogger("drainpipe.agents")

CHANNEL: Final = "drainpipe_agent_inbox"


class Wakeups:
    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self._task: asyncio.Task[None] | None = None
        self._ready: asyncio.Event | None = None
        self._conn: Any = None
        self.failed = False
        #: whether the listening session reaches the server itself (None: not connected yet)
        self.direct: bool | None = None

    async def start(self) -> None:
        """Connect and LISTEN (once); waits until the LISTEN is in place."""
        if self._task is None and not self.failed:
            self._ready = asyncio.Event()
            self._task = asyncio.create_task(self._run(), name="drainpipe-agent-wakeups")
        if self._ready is not None:
            await self._ready.wait()

    async def _run(self) -> None:
        import psycopg

        assert self._ready is not None
        try:
            self._conn = await psycopg.AsyncConnection.connect(
                self._dsn, autocommit=True, connect_timeout=5
            )
            await self._warn_unless_direct(self._conn)
            await self._conn.execute(f"LISTEN {CHANNEL}")
        except Exception as exc:  # polls fall back to their backoff steps
            log.warning("agent inbox wake-ups are off: %s", exc)
            self.failed = True
            self._ready.set()
            return
        self._ready.set()
        try:
            async for note in self._conn.notifies():
                for waiter in self._waiters.get(note.payload, ()):
                    waiter.set()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("agent inbox wake-ups stopped: %s", exc)
            self.failed = True
        finally:
            with contextlib.suppress(Exception):
                await self._conn.close()

    async def _warn_unless_direct(self, conn: Any) -> None:
        """Say so when the session does not reach the server itself: behind a transaction
        pooler a LISTEN hears nothing once its transaction is over, and polls then wait
        for their next step (up to 1 s) instead of waking at once."""
        from ..db.poolers import DIRECT_CHECK_SQL, is_direct

        cur = await conn.execute(DIRECT_CHECK_SQL)
        self.direct = is_direct(conn, await cur.fetchone())
        if not self.direct:
            log.warning(
                "agent inbox wake-ups: this connection does not reach the Postgres server"
                " directly (a pooler or proxy is in front); behind a transaction pooler"
                " LISTEN hears nothing and long polls wake only at their 100 ms -> 1 s"
                " steps: give listen=True a direct DSN"
            )

    def arm(self, inbox_id: str) -> asyncio.Event:
        """An event set by the next notification for the inbox (arm before you look, so a
        notification between the look and the wait is not missed)."""
        waiter = asyncio.Event()
        self._waiters.setdefault(inbox_id, set()).add(waiter)
        return waiter

    def disarm(self, inbox_id: str, waiter: asyncio.Event) -> None:
        waiters = self._waiters.get(inbox_id)
        if waiters is not None:
            waiters.discard(waiter)
            if not waiters:
                del self._waiters[inbox_id]

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
            self._task = None
