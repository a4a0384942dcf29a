"""Installing the SQL modules: idempotent, safe to race, pgmq's SQL-only install once."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from drainpipe import Jobs, install
from drainpipe.sqlmodules import render_module
from tests.conftest import clone_database, connect, drop_database, with_database


@pytest.fixture
def empty_db(server_dsn: str) -> Iterator[str]:
    name = clone_database(server_dsn, "template0")
    yield with_database(server_dsn, name)
    drop_database(server_dsn, name)


async def test_concurrent_installs_apply_once_and_work(empty_db: str) -> None:
    results = await asyncio.gather(*(install(empty_db, ["jobs"], backend="pgmq") for _ in range(4)))
    assert sorted(len(r) for r in results) == [0, 0, 0, 1]  # one applied, three saw it done
    async with await connect(empty_db) as c:
        row = await (await c.execute("SELECT count(*) FROM pgmq.meta")).fetchone()
        assert row == (0,)
        row = await (
            await c.execute("SELECT options FROM drainpipe.modules WHERE name = 'jobs'")
        ).fetchone()
        assert row == ({"backend": "pgmq", "scheduler": "drain"},)
    jobs = Jobs(empty_db, {"q": dict})
    assert await jobs.enqueue("q", {"a": 1}) == 1
    await jobs.backend.db.close()  # type: ignore[attr-defined]
    # applying again is a no-op; forcing re-applies without losing data
    assert await install(empty_db, ["jobs"]) == []
    assert await install(empty_db, ["jobs"], force=True) == ["jobs"]
    jobs = Jobs(empty_db, {"q": dict})
    assert (await jobs.stats())["q"].ready == 1
    await jobs.backend.db.close()  # type: ignore[attr-defined]


async def test_table_backend_needs_no_pgmq(empty_db: str) -> None:
    assert await install(empty_db, ["jobs"], backend="table") == ["jobs"]
    async with await connect(empty_db) as c:
        row = await (await c.execute("SELECT to_regclass('pgmq.meta') IS NULL")).fetchone()
        assert row == (True,)


async def test_bad_module_options_are_rejected(empty_db: str) -> None:
    with pytest.raises(ValueError, match="Unknown SQL module"):
        await install(empty_db, ["nope"])
    with pytest.raises(ValueError, match='backend must be "pgmq" or "table"'):
        await install(empty_db, ["jobs"], backend="redis")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match='scheduler must be "drain" or "pg_cron"'):
        render_module("jobs", scheduler="cron")


async def test_jobs_close_releases_the_pool_it_opened(empty_db: str) -> None:
    await install(empty_db, ["jobs"], backend="table")
    async with Jobs(empty_db, {"q": dict}) as jobs:
        await jobs.enqueue("q", {"a": 1})
        pool = jobs.backend.db._pool  # type: ignore[attr-defined]
        assert pool is not None and not pool.closed
    assert pool.closed
    async with await connect(empty_db) as conn:
        given = Jobs(conn, {"q": dict})
        await given.close()  # a connection the caller passed in stays open
        assert not conn.closed


async def test_table_layout_with_a_message_document_is_upgraded_in_place(empty_db: str) -> None:
    """The previous table layout kept payload and last error in a ``message`` document;
    installing moves them to columns and the jobs run on, attempts and errors kept."""
    async with await connect(empty_db) as c:
        await c.execute("CREATE SCHEMA drainpipe")
        await c.execute(
            """CREATE TABLE drainpipe.job_messages (
                   id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                   queue text NOT NULL,
                   message jsonb NOT NULL,
                   attempts integer NOT NULL DEFAULT 0,
                   max_attempts integer NOT NULL DEFAULT 5,
                   dedupe_key text,
                   enqueued_at timestamptz NOT NULL DEFAULT clock_timestamp(),
                   visible_at timestamptz NOT NULL DEFAULT clock_timestamp())"""
        )
        await c.execute(
            """INSERT INTO drainpipe.job_messages (queue, message, attempts, max_attempts, dedupe_key)
               VALUES ('q', '{"payload": {"n": 1}, "max_attempts": 5}', 0, 5, NULL),
                      ('q', '{"payload": {"n": 2}, "max_attempts": 3, "dedupe_key": "k",
                              "last_error": "boom"}', 1, 3, 'k')"""
        )
    assert await install(empty_db, ["jobs"], backend="table") == ["jobs"]
    async with await connect(empty_db) as c:
        cur = await c.execute(
            "SELECT id, payload, last_error, attempts, dedupe_key"
            " FROM drainpipe.job_messages ORDER BY id"
        )
        assert await cur.fetchall() == [
            (1, {"n": 1}, None, 0, None),
            (2, {"n": 2}, "boom", 1, "k"),
        ]
        cur = await c.execute(
            "SELECT count(*) FROM information_schema.columns"
            " WHERE table_schema = 'drainpipe' AND table_name = 'job_messages'"
            " AND column_name = 'message'"
        )
        assert await cur.fetchone() == (0,)
    async with Jobs(empty_db, {"q": dict}) as jobs:
        claimed = await jobs.claim("q", batch=10)
        assert [(j.payload, j.attempts, j.last_error) for j in claimed] == [
            ({"n": 1}, 1, None),
            ({"n": 2}, 2, "boom"),
        ]
        assert await jobs.fail(claimed[1], RuntimeError("again")) == "queued"
        assert await jobs.complete(claimed[0])


async def test_install_with_a_dsn_closes_the_pool_it_opened(empty_db: str) -> None:
    """``install(DSN)`` opens a pool of its own; it must be closed by the call (left open,
    its worker tasks die pending with the event loop, noisily)."""
    assert await install(empty_db, ["jobs"], backend="table") == ["jobs"]
    await asyncio.sleep(0)
    pool_tasks = [
        task
        for task in asyncio.all_tasks()
        if task.get_name().startswith("drainpipe-") and not task.done()
    ]
    assert pool_tasks == []
