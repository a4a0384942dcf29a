"""``work`` rides out outages: sessions the server ends (a pooler or Supavisor restart, a
failover, ``pg_terminate_backend``) and a database that stays away for a while. ``drain``
keeps the contract's 3 retries; ``work`` retries for ``max_outage`` seconds, reporting each
retry, then raises."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import psycopg
import psycopg_pool
import pytest

from drainpipe import DrainpipeError, Job, Jobs
from drainpipe.engine import Runner
from drainpipe.engine.core import outage_left, outage_wait
from tests.conftest import connect
from tests.engine.test_engine import FlakySource, Item

QUEUES: dict[str, Any] = {"raw": dict[str, Any]}


def test_outage_waits_double_up_to_the_cap_with_jitter_and_end_with_the_outage() -> None:
    assert [outage_wait(n, 0.25, 0.0) for n in (1, 2, 3)] == [0.125, 0.25, 0.5]
    assert outage_wait(3, 1.0, 0.999) < 2.0
    # capped at 2 s before the jitter: a worker tries again within 2 s of a failover
    assert outage_wait(20, 1.0, 0.5) == 2 * 0.75
    assert outage_left(started=100.0, now=130.0, max_outage=60.0) == 30.0
    assert outage_left(started=100.0, now=170.0, max_outage=60.0) == 0.0


async def _terminate_sessions(admin: psycopg.AsyncConnection[Any], dbname: str) -> int:
    cur = await admin.execute(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
        " WHERE datname = %s AND pid <> pg_backend_pid()",
        (dbname,),
    )
    row = await cur.fetchone()
    return int(row[0]) if row else 0


async def test_work_keeps_going_when_every_pooled_session_is_terminated(jobs_db_url: str) -> None:
    # a warm pool of 8 sessions, as a busy service has: after a pooler restart each one is
    # dead, and a retry that does not discard them draws the next dead one (3 retries per
    # lane were not enough: work raised "terminating connection due to administrator command")
    pool = psycopg_pool.AsyncConnectionPool(
        jobs_db_url, min_size=8, max_size=8, kwargs={"autocommit": True}, open=False
    )
    await pool.open(wait=True)
    jobs = Jobs(pool, QUEUES)
    admin = await connect(jobs_db_url)
    dbname = str((await (await admin.execute("SELECT current_database()")).fetchone() or [""])[0])
    try:
        await jobs.enqueue_many("raw", [{"i": i} for i in range(40)])
        done: set[int] = set()
        errors: list[BaseException] = []
        stop = asyncio.Event()
        killed: list[int] = []

        async def handle(payload: dict[str, Any], job: Job[Any]) -> None:
            done.add(payload["i"])
            if len(done) in (5, 20):  # twice, while the worker is busy
                await pool.wait()  # the pool is full again: every session is killed
                killed.append(await _terminate_sessions(admin, dbname))
            if len(done) == 40:
                stop.set()

        await asyncio.wait_for(
            jobs.work(
                "raw",
                handle,
                concurrency=2,
                batch=2,
                lease=1,
                poll_interval=0.05,
                stop=stop,
                on_error=lambda error, job: errors.append(error),
                max_outage=20,
            ),
            timeout=30,
        )
        assert done == set(range(40)) and killed and min(killed) >= 7
        assert any(isinstance(e, DrainpipeError) and e.kind == "network" for e in errors)
        # every job ran; one whose completion died with its session comes back after its
        # lease and runs again, so nothing is lost
        assert (await jobs.stats(["raw"]))["raw"].dead == 0
    finally:
        await admin.close()
        await pool.close()


class Unreachable:
    """A backend whose database is away: every claim fails as a connection failure."""

    api_version = 1
    name = "unreachable"
    leases = True

    def __init__(self) -> None:
        self.reads = 0

    async def send(self, *args: Any, **kwargs: Any) -> int:
        raise DrainpipeError("network", "connection refused")

    async def read(self, queue: str, *, lease: float, batch: int) -> list[Any]:
        self.reads += 1
        raise DrainpipeError("network", "connection refused", code="CONNECTION_REFUSED")

    async def complete(self, job: Any) -> bool:
        return False

    async def fail(self, job: Any, error: str, retry_in: float | None = None) -> None:
        return None

    async def extend(self, job: Any, lease: float) -> bool:
        return False


async def test_work_gives_up_once_the_outage_lasts_longer_than_max_outage() -> None:
    backend = Unreachable()
    jobs = Jobs(backend, QUEUES)
    reported: list[BaseException] = []
    started = time.monotonic()
    with pytest.raises(DrainpipeError) as caught:
        await jobs.work(
            "raw",
            lambda payload, job: None,  # type: ignore[arg-type, return-value]
            poll_interval=0.05,
            max_outage=0.4,
            on_error=lambda error, job: reported.append(error),
        )
    assert caught.value.kind == "network" and caught.value.code == "CONNECTION_REFUSED"
    elapsed = time.monotonic() - started
    assert 0.4 <= elapsed < 2.0
    assert backend.reads > 4 and len(reported) == backend.reads - 1  # each retry reported


async def test_drain_keeps_the_three_retries_of_the_contract() -> None:
    backend = Unreachable()
    jobs = Jobs(backend, QUEUES)
    with pytest.raises(DrainpipeError, match="connection refused"):
        await jobs.drain("raw", lambda payload, job: None)  # type: ignore[arg-type, return-value]
    assert backend.reads == 4  # the first claim and 3 retries


async def test_work_without_max_outage_keeps_the_three_retries() -> None:
    backend = Unreachable()
    jobs = Jobs(backend, QUEUES)
    with pytest.raises(DrainpipeError, match="connection refused"):
        await jobs.work(
            "raw",
            lambda payload, job: None,  # type: ignore[arg-type, return-value]
            poll_interval=0.01,
            max_outage=None,
        )
    assert backend.reads == 4


class ScriptedSource(FlakySource):
    """Claims answer from a script: ``[]`` (nothing to do), an exception (the database is
    away), or items; the time of each claim is kept."""

    def __init__(self, script: list[Any], stop: asyncio.Event) -> None:
        super().__init__([])
        self.script = script
        self.stop = stop
        self.at: list[float] = []

    log = logging.getLogger("tests.outages")

    def fields(self, item: Item | None) -> dict[str, Any]:
        return {}

    async def claim(self, batch: int, lease: float) -> list[Item]:
        self.at.append(time.monotonic())
        step = self.script.pop(0) if self.script else []
        if isinstance(step, BaseException):
            raise step
        if not self.script and step:
            self.stop.set()
        return list(step)


async def test_after_an_outage_an_idle_worker_polls_again_at_its_first_interval() -> None:
    # an idle worker's polls double (0.05, 0.1, 0.2, 0.4 s here); the database goes away
    # and comes back. Work enqueued as it comes back waited out the doubled wait of before
    # the outage (up to max_poll_interval: 30 s by default; 3.7 s after a failover, where
    # the producer enqueued 0.3 s after the new primary took writes): the idle wait now
    # starts again from poll_interval once a claim goes through after an outage
    away = [DrainpipeError("network", "the database is away") for _ in range(3)]
    stop = asyncio.Event()
    source = ScriptedSource([[], [], [], [], *away, [], [Item(1)]], stop)
    runner = Runner(source, poll_interval=0.05, max_poll_interval=5.0, max_outage=10, stop=stop)
    await asyncio.wait_for(runner.run(until_empty=False), 10)
    assert source.completed == [1]
    back = 4 + len(away)  # the first claim that went through after the outage
    assert source.at[back + 1] - source.at[back] < 0.3, source.at[back + 1] - source.at[back]
