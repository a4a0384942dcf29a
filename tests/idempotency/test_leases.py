"""Leases against real Postgres, raced over separate connections."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

import drainpipe
from drainpipe.errors import DrainpipeError
from tests.conftest import connect


async def lease_rows(conn: psycopg.AsyncConnection[Any]) -> list[tuple[Any, ...]]:
    cur = await conn.execute("SELECT scope, key, holder::text FROM drainpipe.leases ORDER BY 1, 2")
    return await cur.fetchall()


async def test_ten_concurrent_with_lease_calls_run_fn_once(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    connections = [await connect(db_url) for _ in range(10)]
    runs = 0
    entered = asyncio.Event()
    gate = asyncio.Event()

    async def fn(held: drainpipe.Lease) -> str:
        nonlocal runs
        runs += 1
        entered.set()
        await gate.wait()  # hold the lease while the others try
        return held.holder

    try:
        tasks = [
            asyncio.create_task(drainpipe.with_lease(c, "nightly", fn, seconds=30))
            for c in connections
        ]
        async with asyncio.timeout(10):
            await entered.wait()
            while sum(t.done() for t in tasks) < 9:
                await asyncio.sleep(0.01)
        [(_, _, holder)] = await lease_rows(conn)
        gate.set()
        outcomes = await asyncio.gather(*tasks)
    finally:
        for c in connections:
            await c.close()
    acquired = [o for o in outcomes if o.acquired]
    assert runs == 1 and len(acquired) == 1
    assert acquired[0].value == holder
    assert all(o.value is None for o in outcomes if not o.acquired)
    assert await lease_rows(conn) == []  # released after fn returned


async def test_an_expired_lease_is_taken_over_and_the_old_holder_loses_it(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    first_conn, second_conn = await connect(db_url), await connect(db_url)
    try:
        async with drainpipe.lease(first_conn, "report", seconds=30) as first:
            assert first is not None
            assert await first.extend() is True
            assert (await drainpipe.with_lease(second_conn, "report", _holder)).acquired is False
            # the first holder stalled past its lease (aged, not slept)
            await conn.execute(
                "UPDATE drainpipe.leases SET expires_at = now() - interval '1 second'"
            )

            async def take_over(second: drainpipe.Lease) -> bool:
                extended = await first.extend(60)
                # the former holder's release changes nothing either
                released = await first.release()
                assert [row[2] for row in await lease_rows(conn)] == [second.holder]
                assert await second.extend() is True
                return extended or released

            outcome = await drainpipe.with_lease(second_conn, "report", take_over)
            assert outcome.acquired is True and outcome.value is False
            assert first.lost is True and await first.extend() is False
    finally:
        await first_conn.close()
        await second_conn.close()
    assert await lease_rows(conn) == []


async def test_a_raising_fn_releases_the_lease(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    async def boom(held: drainpipe.Lease) -> None:
        assert len(await lease_rows(conn)) == 1
        raise RuntimeError("the job failed")

    with pytest.raises(RuntimeError, match="the job failed"):
        await drainpipe.with_lease(conn, "k", boom)
    assert await lease_rows(conn) == []
    assert (await drainpipe.with_lease(conn, "k", _holder)).acquired is True

    async def block() -> None:
        async with drainpipe.lease(conn, "k") as held:
            assert held is not None
            raise KeyError("inside the block")

    with pytest.raises(KeyError):
        await block()
    assert await lease_rows(conn) == []


async def test_extend_moves_the_expiry_and_leases_are_not_reentrant(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    async def nested(held: drainpipe.Lease) -> drainpipe.LeaseOutcome[str]:
        assert await held.extend(600) is True
        cur = await conn.execute("SELECT expires_at - now() FROM drainpipe.leases")
        assert (await cur.fetchone())[0].total_seconds() == pytest.approx(600, abs=5)  # type: ignore[index]
        return await drainpipe.with_lease(conn, "k", _holder)

    outcome = await drainpipe.with_lease(conn, "k", nested, seconds=5)
    assert outcome.acquired is True
    assert outcome.value is not None and outcome.value.acquired is False


async def test_scopes_partition_keys_and_a_dsn_works(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    async with (
        drainpipe.lease(db_url, "k", scope="tenant-a") as a,
        drainpipe.lease(db_url, "k", scope="tenant-b") as b,
        drainpipe.lease(db_url, "k", scope="tenant-a") as again,
    ):
        assert a is not None and b is not None and again is None
        assert [row[:2] for row in await lease_rows(conn)] == [("tenant-a", "k"), ("tenant-b", "k")]
    assert await lease_rows(conn) == []


@pytest.mark.parametrize(
    ("key", "seconds", "kind"),
    [
        ("", 60, "invalid_request"),
        ("x" * 256, 60, "invalid_request"),
        (None, 60, "invalid_request"),
        ("a\x00b", 60, "invalid_request"),
        ("k", 0, "validation"),
        ("k", -1, "validation"),
        ("k", float("nan"), "validation"),
        ("k", "60", "validation"),
    ],
)
async def test_bad_input_is_a_clear_error_before_any_sql(
    conn: psycopg.AsyncConnection[Any], key: Any, seconds: Any, kind: str
) -> None:
    with pytest.raises(DrainpipeError) as info:
        await drainpipe.with_lease(conn, key, _holder, seconds=seconds)
    assert info.value.kind == kind
    assert await lease_rows(conn) == []


async def test_extend_rejects_bad_seconds(conn: psycopg.AsyncConnection[Any]) -> None:
    async with drainpipe.lease(conn, "k") as held:
        assert held is not None
        with pytest.raises(DrainpipeError) as info:
            await held.extend(0)
        assert info.value.kind == "validation"
        assert await held.extend(1) is True


async def test_purge_sweeps_leases_nobody_released(conn: psycopg.AsyncConnection[Any]) -> None:
    holders = [
        (await (await conn.execute(f"SELECT drainpipe.acquire_lease_v1('{k}')")).fetchone())
        for k in "ab"
    ]
    assert all(h is not None and h[0] is not None for h in holders)
    await conn.execute(
        "UPDATE drainpipe.leases SET expires_at = now() - interval '1 second' WHERE key = 'a'"
    )
    await conn.execute("SELECT drainpipe.purge_idempotency_keys_v1()")
    assert [row[1] for row in await lease_rows(conn)] == ["b"]


async def _holder(held: drainpipe.Lease) -> str:
    return held.holder


async def test_extend_after_release_is_false_and_never_touches_the_next_holder(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    async with drainpipe.lease(conn, "k", seconds=60) as held:
        assert held is not None
        assert await held.release() is True
        assert await held.release() is False
        assert await held.extend() is False and held.lost is True
        other = await connect(db_url)
        try:
            async with drainpipe.lease(other, "k", seconds=60) as next_holder:
                assert next_holder is not None
                assert await held.extend(120) is False  # fenced: no resurrection
                [(_, _, holder)] = await lease_rows(conn)
                assert holder == next_holder.holder
        finally:
            await other.close()
    assert await lease_rows(conn) == []


async def _open_connections(conn: psycopg.AsyncConnection[Any], dbname: str) -> int:
    cur = await conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
        (dbname,),
    )
    return int((await cur.fetchone())[0])  # type: ignore[index]


@pytest.mark.parametrize("autocommit", [True, False])
async def test_with_lease_on_a_pool_commits_and_leaves_the_pool_open(
    db_url: str, conn: psycopg.AsyncConnection[Any], autocommit: bool
) -> None:
    from psycopg_pool import AsyncConnectionPool

    async def visible_to_others(held: drainpipe.Lease) -> list[Any]:
        return await lease_rows(conn)  # another connection sees the committed lease

    pool = AsyncConnectionPool(
        db_url, min_size=1, max_size=2, open=False, kwargs={"autocommit": autocommit}
    )
    await pool.open()
    try:
        for _ in range(2):
            outcome = await drainpipe.with_lease(pool, "k", visible_to_others)
            assert outcome.acquired is True
            assert [row[1] for row in outcome.value or []] == ["k"]
            assert await lease_rows(conn) == []
        assert not pool.closed
        async with pool.connection() as borrowed:
            assert await (await borrowed.execute("SELECT 1")).fetchone() == (1,)
    finally:
        await pool.close()


async def test_with_lease_on_a_dsn_closes_its_connection(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    dbname = conn.info.dbname
    before = await _open_connections(conn, dbname)

    async def check(held: drainpipe.Lease) -> int:
        assert [row[1] for row in await lease_rows(conn)] == ["k"]
        return await _open_connections(conn, dbname)

    outcome = await drainpipe.with_lease(db_url, "k", check)
    assert outcome.acquired is True and outcome.value == before + 1  # one connection, ours
    assert await lease_rows(conn) == []
    for _ in range(50):  # the backend exits just after the client closes
        if await _open_connections(conn, dbname) == before:
            break
        await asyncio.sleep(0.02)
    assert await _open_connections(conn, dbname) == before
