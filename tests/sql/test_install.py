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
    assert await jobs.enqueue("q", {"a": 1}) > 0
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
