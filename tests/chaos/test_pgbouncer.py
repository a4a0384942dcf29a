"""drainpipe behind PgBouncer in transaction mode, with its defaults: no setting of the
user's. Jobs (work and drain) run exactly once, idempotency keys and leases admit one
holder, the webhook inbox processes each message once, the agent inbox's long poll wakes
without LISTEN, the sync twin works, and the ``_pg3_0`` failure of server-side prepares
cannot happen (it does, at once, with ``prepare=True``). Each test runs behind two
PgBouncers: Debian's 1.18 (no prepared-statement support) and one of 1.21 or newer with
``max_prepared_statements=100``, behind which the jobs, keys, leases and inboxes run with
``prepare=True`` and nothing goes wrong. See tests/chaos/pgbouncer.py for the poolers;
~20 s for the file."""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from drainpipe import AgentInboxes, Idempotency, Job, Jobs, WebhookInbox, lease
from drainpipe.db import Database
from drainpipe.sync import Jobs as SyncJobs
from tests.chaos.pgbouncer import KINDS, POOL_SIZE, PgBouncer, binary_for, version

QUEUES: dict[str, Any] = {"work": dict[str, Any]}
SECRET = "lease-secret-of-the-pooler-tests-0123"


HOW_TO_GET = {
    "no-prepares": "apt-get install pgbouncer; .ci/run does",
    "prepares": "bash scripts/pgbouncer_build.sh, or DRAINPIPE_PGBOUNCER=<a 1.21+ binary>",
}


@pytest.fixture(scope="module", params=KINDS)
def pgbouncer(request: pytest.FixtureRequest, server_dsn: str) -> Iterator[PgBouncer]:
    kind = str(request.param)
    if binary_for(kind) is None:
        if os.environ.get("DRAINPIPE_REQUIRE_CHAOS") == "1":
            pytest.fail(
                f"no pgbouncer for {kind} and DRAINPIPE_REQUIRE_CHAOS=1 ({HOW_TO_GET[kind]})"
            )
        pytest.skip(f"no pgbouncer for {kind} ({HOW_TO_GET[kind]})")
    bouncer = PgBouncer(server_dsn, kind).start()
    try:
        yield bouncer
    finally:
        bouncer.stop()


def prepare_of(bouncer: PgBouncer) -> bool | None:
    """What the clients of a test ask for: server-side prepares where the pooler passes
    them through, drainpipe's default (none behind a pooler) elsewhere."""
    return True if bouncer.prepares else None


def through(bouncer: PgBouncer, url: str) -> str:
    """The fresh test database ``url`` names, reached through the pooler."""
    from psycopg.conninfo import conninfo_to_dict

    return bouncer.dsn(str(conninfo_to_dict(url)["dbname"]))


async def statements_from_many_clients(dsn: str, prepare: bool | None) -> list[str]:
    """60 uses of one statement from each of three clients (4 connections each, 12 client
    sessions on 5 server sessions): the errors they got."""
    databases = [Database(dsn, max_size=4, prepare=prepare) for _ in range(3)]
    errors: list[str] = []

    async def one(db: Database, n: int) -> None:
        try:
            assert await db.fetchval("SELECT %s::int + 1", (n,)) == n + 1
        except Exception as exc:
            errors.append(str(exc))

    try:
        await asyncio.gather(*(one(db, n) for n in range(60) for db in databases))
    finally:
        for db in databases:
            await db.close()
    return errors


async def pooler_prepared_count(dsn: str) -> int:
    """The statements the pooler prepared under its own names, over every server session of
    the pool: one connection per session, each inside an open transaction so that no two
    share one (a single check lands on whichever session is free, which may be one the
    clients' statements never reached)."""
    conns = [await psycopg.AsyncConnection.connect(dsn) for _ in range(POOL_SIZE)]
    try:
        total = 0
        for conn in conns:
            cur = await conn.execute(
                "SELECT count(*) FROM pg_prepared_statements"
                " WHERE name LIKE 'PGBOUNCER%%' AND statement LIKE '%%::int + 1'"
            )
            total += (await cur.fetchone() or (0,))[0]
        return total
    finally:
        for conn in conns:
            await conn.close()


async def test_the_defaults_never_prepare_behind_pgbouncer(
    pgbouncer: PgBouncer, db_url: str
) -> None:
    dsn = through(pgbouncer, db_url)
    prepared = await statements_from_many_clients(dsn, True)
    if pgbouncer.prepares:
        # 1.21+ with max_prepared_statements: the pooler prepares on each server session
        # (under its own names), and the clients' statements run as prepared ones
        assert prepared == [], (version(pgbouncer.binary), prepared[:3])
        assert await pooler_prepared_count(dsn) >= 1
    else:
        # what drainpipe did on any port but 6543: statements prepared on one server
        # session meet another client's, or none ("_pg3_0" already exists / does not exist)
        assert any('prepared statement "_pg3_' in error for error in prepared), (
            version(pgbouncer.binary),
            prepared[:3],
        )
    assert await statements_from_many_clients(dsn, None) == []


@pytest.mark.parametrize("backend", ["pgmq", "table"])
async def test_jobs_run_exactly_once_through_pgbouncer(
    pgbouncer: PgBouncer, fresh_database: Any, backend: str
) -> None:
    dsn = through(pgbouncer, fresh_database(backend))
    runs: Counter[int] = Counter()
    total = 300
    stop = asyncio.Event()

    async def handle(payload: dict[str, Any], job: Job[Any]) -> None:
        runs[payload["n"]] += 1
        if sum(runs.values()) >= total - 50:
            stop.set()

    databases = [Database(dsn, prepare=prepare_of(pgbouncer)) for _ in range(3)]
    async with Jobs(databases[0], QUEUES) as producer:
        await producer.enqueue_many("work", [{"n": n} for n in range(total - 50)])
        workers = [Jobs(db, QUEUES) for db in databases[1:]]
        try:
            await asyncio.wait_for(
                asyncio.gather(
                    *(
                        w.work("work", handle, concurrency=3, batch=5, lease=30, stop=stop)
                        for w in workers
                    )
                ),
                60,
            )
            await producer.enqueue_many("work", [{"n": n} for n in range(total - 50, total)])
            drained = await workers[0].drain("work", handle, concurrency=2, batch=10, lease=30)
        finally:
            for w in workers:
                await w.close()
            for db in databases[1:]:
                await db.close()
        assert drained.succeeded == 50
        assert set(runs) == set(range(total)) and set(runs.values()) == {1}
        stats = (await producer.stats(["work"]))["work"]
        assert (stats.ready, stats.in_flight, stats.dead) == (0, 0, 0)
    await databases[0].close()


async def test_keys_leases_inboxes_and_the_sync_twin_through_pgbouncer(
    pgbouncer: PgBouncer, db_url: str
) -> None:
    dsn = through(pgbouncer, db_url)
    db = Database(dsn, max_size=8, prepare=prepare_of(pgbouncer))
    try:
        # idempotency: 20 requests with one key at once, one runs
        keys = Idempotency(db)
        begun = await asyncio.gather(*(keys.begin("pay-1", "fp") for _ in range(20)))
        assert Counter(b.state for b in begun)["started"] == 1

        # leases: one holder of a key at a time
        async def hold() -> bool:
            async with lease(db, "nightly-report", 30) as held:
                if held is None:
                    return False
                await asyncio.sleep(0.2)  # held while the others try
                return True

        assert sum(await asyncio.gather(*(hold() for _ in range(8)))) == 1

        # the webhook inbox: each stored message processed once (duplicates kept out)
        box = WebhookInbox(db, source="billing")
        for n in range(30):
            await box.store(id=f"m{n}", payload={"n": n})
            await box.store(id=f"m{n}", payload={"n": n})
        handled: Counter[int] = Counter()
        report = await box.process(
            lambda message: handled.update([message.payload["n"]]), batch=7, lease=30
        )
        assert report.succeeded == 30 and set(handled.values()) == {1} and len(handled) == 30

        # the agent inbox's long poll, without LISTEN: an event stored while it waits
        agents = AgentInboxes(db, lease_secret=SECRET)
        inbox_id = await agents.create("support", lease_seconds=60)
        await agents.subscribe(inbox_id, "billing")
        await agents.inbox(inbox_id).next(max=10, ack="pickup")  # the 30 stored above
        started = time.monotonic()
        waiting = asyncio.create_task(agents.inbox(inbox_id).next(wait=10))
        await asyncio.sleep(0.3)
        await box.store(id="late", payload={"n": "late"})
        events = await asyncio.wait_for(waiting, 10)
        assert len(events) == 1 and time.monotonic() - started < 2.5
        assert await agents.ack(events[0].id, events[0].lease_id or "") is True
        await agents.close()
    finally:
        await db.close()

    # the sync twin: enqueue and drain
    def sync_round() -> int:
        seen: list[int] = []
        with SyncJobs(dsn, QUEUES) as jobs:
            jobs.enqueue_many("work", [{"n": n} for n in range(20)])
            jobs.drain("work", lambda payload, job: seen.append(payload["n"]), batch=4)
        assert sorted(seen) == list(range(20))
        return len(seen)

    assert await asyncio.to_thread(sync_round) == 20


async def test_the_clis_timeouts_never_reach_another_client(
    pgbouncer: PgBouncer, db_url: str
) -> None:
    # a session SET statement_timeout stayed on a server session the pooler lent to the
    # next clients (unrelated psql sessions then had the CLI's timeout)
    from drainpipe.cli import connect as cli_connect

    dsn = through(pgbouncer, db_url)
    cli = await cli_connect(dsn, timeout_seconds=7)
    try:
        for _ in range(3):
            await cli.execute("SELECT 1")
    finally:
        await cli.close()
    others = [await psycopg.AsyncConnection.connect(dsn, autocommit=True) for _ in range(8)]
    try:
        seen = set()
        for other in others:
            cur = await other.execute("SHOW statement_timeout")
            seen.add((await cur.fetchone() or ("?",))[0])
        assert seen == {"0"}, seen
    finally:
        for other in others:
            await other.close()
