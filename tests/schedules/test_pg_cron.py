"""The pg_cron scheduler: on a second cluster with pg_cron preloaded (scripts/pg_cron_cluster.sh).

pg_cron 1.4 runs jobs only in ``cron.database_name`` (``postgres`` there), so the jobs
module is installed into that database; every test uses its own queue and schedule names.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest

import drainpipe
from drainpipe import DrainpipeError, install
from drainpipe.schedules import ScheduleDef
from tests.conftest import connect

CRON_URL = os.environ.get("PG_CRON_DATABASE_URL", "postgresql://postgres@127.0.0.1:5433/postgres")


def _unavailable(reason: str) -> None:
    """Skip, or fail when the run requires pg_cron (CI sets DRAINPIPE_REQUIRE_PG_CRON=1, so a
    broken cluster setup cannot pass as a green run with these tests skipped)."""
    if os.environ.get("DRAINPIPE_REQUIRE_PG_CRON", "") not in ("", "0"):
        pytest.fail(f"DRAINPIPE_REQUIRE_PG_CRON is set but {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def cron_url() -> str:
    try:
        with psycopg.connect(CRON_URL, connect_timeout=3, autocommit=True) as conn:
            preload = conn.execute("SHOW shared_preload_libraries").fetchone()
            if preload is None or "pg_cron" not in str(preload[0]):
                _unavailable(
                    f"the server at {CRON_URL} does not preload pg_cron (run scripts/pg_cron_cluster.sh)"
                )
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_cron")
    except psycopg.OperationalError as exc:
        _unavailable(
            f"no pg_cron cluster answers at {CRON_URL} (run scripts/pg_cron_cluster.sh): {exc}"
        )
    return CRON_URL


@pytest.fixture
async def cron_db(cron_url: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    conn = await connect(cron_url)
    await install(conn, ["jobs"], backend="table", scheduler="pg_cron")
    yield conn
    await conn.close()


@pytest.fixture
def names() -> dict[str, str]:
    tag = uuid.uuid4().hex[:10]
    return {"queue": f"q_{tag}", "prefix": f"dp-test-{tag}:"}


async def cron_jobs(conn: psycopg.AsyncConnection[Any], prefix: str) -> list[tuple[Any, ...]]:
    cur = await conn.execute(
        "SELECT jobname, schedule, command, database FROM cron.job WHERE starts_with(jobname, %s) ORDER BY jobname",
        (prefix,),
    )
    return await cur.fetchall()


async def cleanup(conn: psycopg.AsyncConnection[Any], prefix: str) -> None:
    await conn.execute(
        "SELECT cron.unschedule(jobid) FROM cron.job WHERE starts_with(jobname, %s)", (prefix,)
    )


@pytest.mark.pg_cron
async def test_schedule_is_a_pg_cron_job_whose_command_enqueues(
    cron_db: psycopg.AsyncConnection[Any], names: dict[str, str]
) -> None:
    queue, prefix = names["queue"], names["prefix"]
    jobs = drainpipe.Jobs(cron_db, {queue: dict[str, Any]}, scheduler="pg_cron")
    name = prefix + "nightly"
    try:
        await jobs.schedule(name, "30 2 * * *", queue, {"it's": "quoted"})
        [(jobname, schedule, command, database)] = await cron_jobs(cron_db, prefix)
        assert (jobname, schedule, database) == (name, "30 2 * * *", "postgres")

        # what pg_cron will run: the command enqueues the payload on the queue
        await cron_db.execute(command)
        [job] = await jobs.claim(queue)
        assert job.payload == {"it's": "quoted"} and job.max_attempts == 5

        [info] = await jobs.list_schedules(prefix=prefix)
        assert (info.name, info.cron, info.time_zone, info.queue, info.tenant, info.next_run) == (
            name,
            "30 2 * * *",
            "UTC",
            queue,
            None,
            None,
        )
        assert await jobs.list_schedules(prefix=prefix, tenant="acme") == []

        # the same name replaces the pg_cron job; macros pass through
        await jobs.schedule(name, "@daily", queue, {"v": 2})
        [(_, schedule, command, _)] = await cron_jobs(cron_db, prefix)
        assert schedule == "@daily" and '"v": 2' in command

        assert await jobs.run_schedules() == 0  # pg_cron runs them, not the drain
        assert await jobs.unschedule_all(tenant="acme") == 0
        assert await jobs.unschedule(name) is True
        assert await jobs.unschedule(name) is False
        assert await cron_jobs(cron_db, prefix) == []
    finally:
        await cleanup(cron_db, prefix)


@pytest.mark.pg_cron
async def test_utc_only_and_no_tenant(
    cron_db: psycopg.AsyncConnection[Any], names: dict[str, str]
) -> None:
    queue, prefix = names["queue"], names["prefix"]
    jobs = drainpipe.Jobs(cron_db, {queue: dict[str, Any]}, scheduler="pg_cron")
    try:
        for options in (
            {"time_zone": "Europe/Amsterdam"},
            {"tenant": "acme"},
            {"context": {"tenant": "acme"}},
        ):
            with pytest.raises(DrainpipeError) as caught:
                await jobs.schedule(prefix + "x", "0 9 * * *", queue, {}, **options)
            assert caught.value.kind == "invalid_request", options
        with pytest.raises(DrainpipeError) as caught:
            await jobs.schedule(prefix + "x", "5 minutes", queue, {})
        assert caught.value.kind == "invalid_request" and "pg_cron" in str(caught.value)
        with pytest.raises(DrainpipeError) as caught:
            await jobs.ensure_schedules(
                [ScheduleDef(prefix + "x", "@daily", queue, {})], prefix=prefix, tenant="acme"
            )
        assert caught.value.kind == "invalid_request"
        assert await cron_jobs(cron_db, prefix) == []

        # the SQL says the same to callers that skip Python
        sql = "SELECT drainpipe.schedule_job_v1(%s, '0 9 * * *', %s, '{}', %s, NULL, %s)"
        with pytest.raises(
            psycopg.errors.InvalidParameterValue, match=r"pg_cron runs schedules in cron\.timezone"
        ):
            await cron_db.execute(sql, (prefix + "x", queue, "Europe/Amsterdam", None))
        with pytest.raises(
            psycopg.errors.InvalidParameterValue, match="pg_cron schedules have no tenant"
        ):
            await cron_db.execute(sql, (prefix + "x", queue, "UTC", "acme"))
        assert await cron_jobs(cron_db, prefix) == []

        # "N seconds" is pg_cron's own syntax from 1.5 on; older versions reject it clearly
        version = await (
            await cron_db.execute("SELECT extversion FROM pg_extension WHERE extname = 'pg_cron'")
        ).fetchone()
        assert version is not None
        if tuple(int(p) for p in version[0].split("-")[0].split(".")[:2]) < (1, 5):
            with pytest.raises(DrainpipeError) as caught:
                await jobs.schedule(prefix + "fast", "30 seconds", queue, {})
            assert caught.value.kind == "invalid_input" and "pg_cron rejected" in str(caught.value)
        else:
            await jobs.schedule(prefix + "fast", "30 seconds", queue, {})
            assert len(await cron_jobs(cron_db, prefix)) == 1
    finally:
        await cleanup(cron_db, prefix)


@pytest.mark.pg_cron
async def test_ensure_schedules_on_pg_cron(
    cron_db: psycopg.AsyncConnection[Any], names: dict[str, str]
) -> None:
    queue, prefix = names["queue"], names["prefix"]
    jobs = drainpipe.Jobs(cron_db, {queue: dict[str, Any]}, scheduler="pg_cron")
    try:
        await jobs.schedule(prefix + "old", "@hourly", queue, {})
        result = await jobs.ensure_schedules(
            [
                ScheduleDef(prefix + "a", "0 9 * * MON-FRI", queue, {}),
                {"name": prefix + "b", "cron": "*/10 * * * *", "queue": queue, "payload": {"b": 1}},
            ],
            prefix=prefix,
        )
        assert result.scheduled == [prefix + "a", prefix + "b"] and result.removed == [
            prefix + "old"
        ]
        assert [row[:2] for row in await cron_jobs(cron_db, prefix)] == [
            (prefix + "a", "0 9 * * MON-FRI"),
            (prefix + "b", "*/10 * * * *"),
        ]
    finally:
        await cleanup(cron_db, prefix)


async def test_pg_cron_rules_are_checked_before_any_sql() -> None:
    # nothing listens on port 1: any SQL would fail with a network error, not invalid_request
    jobs = drainpipe.Jobs(
        "postgresql://postgres@127.0.0.1:1/none", {"pings": dict[str, Any]}, scheduler="pg_cron"
    )
    cases: list[dict[str, Any]] = [{"time_zone": "Asia/Kolkata"}, {"tenant": "acme"}]
    for options in cases:
        with pytest.raises(DrainpipeError) as caught:
            await jobs.schedule("x", "@daily", "pings", {}, **options)
        assert caught.value.kind == "invalid_request"
        assert "pg_cron" in str(caught.value) and 'scheduler="drain"' in str(caught.value)
    assert await jobs.run_schedules() == 0


async def test_pg_cron_module_without_the_extension_fails_clearly(db_url: str) -> None:
    # the main cluster has no pg_cron: the module still installs, schedule_job explains
    conn = await connect(db_url)
    try:
        await install(conn, ["jobs"], backend="pgmq", scheduler="pg_cron")
        jobs = drainpipe.Jobs(conn, {"pings": dict[str, Any]}, scheduler="pg_cron")
        with pytest.raises(DrainpipeError, match="schedule_job needs pg_cron"):
            await jobs.schedule("x", "@daily", "pings", {})
        assert await jobs.unschedule("x") is False
        assert await jobs.list_schedules() == []
        assert await (
            await conn.execute("SELECT count(*) FROM drainpipe.claim_due_schedules_v1(60, 10)")
        ).fetchone() == (0,)
    finally:
        await conn.close()


@pytest.mark.pg_cron
async def test_pg_cron_jobs_that_are_not_drainpipes_are_left_alone(
    cron_db: psycopg.AsyncConnection[Any], names: dict[str, str]
) -> None:
    # cron.job holds every pg_cron job of the cluster; one the user made by hand (a VACUUM)
    # whose name happens to share the prefix is not a schedule ensure_schedules may remove
    queue, prefix = names["queue"], names["prefix"]
    jobs = drainpipe.Jobs(cron_db, {queue: dict[str, Any]}, scheduler="pg_cron")
    try:
        await cron_db.execute(
            "SELECT cron.schedule(%s, '0 4 * * *', 'VACUUM')", (prefix + "vacuum",)
        )
        await jobs.schedule(prefix + "mine", "@hourly", queue, {})
        assert [info.name for info in await jobs.list_schedules(prefix=prefix)] == [prefix + "mine"]
        assert await jobs.unschedule(prefix + "vacuum") is False
        result = await jobs.ensure_schedules([], prefix=prefix)
        assert result.removed == [prefix + "mine"]
        assert [row[:3] for row in await cron_jobs(cron_db, prefix)] == [
            (prefix + "vacuum", "0 4 * * *", "VACUUM")
        ]
    finally:
        await cleanup(cron_db, prefix)
