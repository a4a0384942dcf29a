"""Schedules under the drain scheduler, on real Postgres (both job storage backends)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from pydantic import BaseModel, Field

import drainpipe
from drainpipe import DrainpipeError
from drainpipe.schedules import EnsureResult, ScheduleDef, ScheduleInfo, iso_instant, run_key
from drainpipe.schedules.cron import next_cron_run
from tests.conftest import connect


class Report(BaseModel):
    kind: str = Field(min_length=1)


QUEUES = {"reports": Report, "pings": dict[str, Any]}


def jobs_on(
    conn: psycopg.AsyncConnection[Any], now: Callable[[], datetime] | None = None
) -> drainpipe.Jobs:
    return drainpipe.Jobs(conn, QUEUES, now=now)


@pytest.fixture
async def db(jobs_db_url: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """A connection to a fresh database, once per storage backend: for what touches jobs."""
    conn = await connect(jobs_db_url)
    yield conn
    await conn.close()


@pytest.fixture
async def one_db(db_url: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """One fresh database: for what only touches schedules (the same on both backends)."""
    conn = await connect(db_url)
    yield conn
    await conn.close()


async def stored_keys(conn: psycopg.AsyncConnection[Any], backend: str, queue: str) -> list[str]:
    """Dedupe keys of the live jobs of a queue, straight from storage (the table keeps
    finished jobs as records: only unfinished rows are live)."""
    if backend == "table":
        sql = (
            "SELECT dedupe_key FROM drainpipe.job_messages"
            " WHERE queue = %s AND finished_at IS NULL ORDER BY id"
        )
        rows = await (await conn.execute(sql, (queue,))).fetchall()
    else:
        exists = await (
            await conn.execute("SELECT to_regclass(%s)", (f"pgmq.q_{queue}",))
        ).fetchone()
        if exists is None or exists[0] is None:
            return []
        rows = await (
            await conn.execute(f"SELECT message->>'dedupe_key' FROM pgmq.q_{queue} ORDER BY msg_id")
        ).fetchall()
    return [row[0] for row in rows]


async def schedule_rows(conn: psycopg.AsyncConnection[Any]) -> list[tuple[Any, ...]]:
    cur = await conn.execute(
        "SELECT name, cron, time_zone, queue, payload, tenant, next_run, last_run, first_after"
        " FROM drainpipe.job_schedules ORDER BY name"
    )
    return await cur.fetchall()


async def set_next_run(conn: psycopg.AsyncConnection[Any], name: str, sql_instant: str) -> datetime:
    cur = await conn.execute(
        f"UPDATE drainpipe.job_schedules SET next_run = date_trunc('milliseconds', {sql_instant})"
        " WHERE name = %s RETURNING next_run",
        (name,),
    )
    row = await cur.fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


def test_iso_and_run_key() -> None:
    moment = datetime(2026, 1, 1, 10, 0, tzinfo=UTC)
    assert iso_instant(moment) == "2026-01-01T10:00:00Z"
    assert iso_instant(moment.replace(microsecond=123999)) == "2026-01-01T10:00:00.123Z"
    assert iso_instant(moment.replace(microsecond=999)) == "2026-01-01T10:00:00Z"
    assert run_key("nightly", moment) == "schedule:nightly:2026-01-01T10:00:00Z"


async def test_schedule_list_replace_unschedule(one_db: psycopg.AsyncConnection[Any]) -> None:
    clock = [datetime(2025, 3, 29, 12, 0, 0, 456789, tzinfo=UTC)]
    jobs = jobs_on(one_db, now=lambda: clock[0])
    await jobs.schedule(
        "nightly", " 30 2 * * * ", "reports", {"kind": "daily"}, time_zone="Europe/Amsterdam"
    )
    [info] = await jobs.list_schedules()
    assert isinstance(info, ScheduleInfo)
    # 02:30 does not exist in Amsterdam on 2025-03-30: the run is at 03:00 local
    assert (info.name, info.cron, info.time_zone, info.queue, info.tenant) == (
        "nightly",
        "30 2 * * *",
        "Europe/Amsterdam",
        "reports",
        None,
    )
    assert info.next_run == datetime(2025, 3, 30, 1, 0, tzinfo=UTC)
    assert info.last_run is None and info.leased_until is None and info.created_at is not None

    # same cron and zone: the next run is kept even though the clock moved
    clock[0] += timedelta(days=3)
    await jobs.schedule(
        "nightly", "30 2 * * *", "reports", {"kind": "changed"}, time_zone="Europe/Amsterdam"
    )
    [info] = await jobs.list_schedules()
    assert info.next_run == datetime(2025, 3, 30, 1, 0, tzinfo=UTC)
    [(*_, payload, _tenant, _next, _last, _first)] = await schedule_rows(one_db)
    assert payload == {"kind": "changed"}

    # another zone: recomputed from now (2025-04-01 12:00Z) → 2025-04-02 02:30 New York
    await jobs.schedule(
        "nightly", "30 2 * * *", "reports", {"kind": "x"}, time_zone="America/New_York"
    )
    [info] = await jobs.list_schedules()
    assert info.next_run == datetime(2025, 4, 2, 6, 30, tzinfo=UTC)

    # milliseconds are kept, microseconds dropped
    await jobs.schedule("fast", "90 seconds", "pings", {})
    [fast, _] = await jobs.list_schedules()
    assert fast.next_run == datetime(2025, 4, 1, 12, 1, 30, 456000, tzinfo=UTC)

    assert await jobs.unschedule("nightly") is True
    assert await jobs.unschedule("nightly") is False
    assert [s.name for s in await jobs.list_schedules()] == ["fast"]


async def test_list_by_prefix_tenant_and_unschedule_all(
    one_db: psycopg.AsyncConnection[Any],
) -> None:
    jobs = jobs_on(one_db)
    await jobs.schedule("t:b", "@daily", "pings", {}, tenant="acme")
    await jobs.schedule(
        "t:a", "@hourly", "pings", {}, context={"tenant": "acme"}
    )  # tenant from context
    await jobs.schedule("t_c", "@daily", "pings", {}, tenant="other")
    await jobs.schedule("u:%", "@daily", "pings", {})
    assert [s.name for s in await jobs.list_schedules()] == ["t:a", "t:b", "t_c", "u:%"]
    assert [s.name for s in await jobs.list_schedules(prefix="t:")] == ["t:a", "t:b"]
    assert [s.name for s in await jobs.list_schedules(prefix="u:%")] == ["u:%"]
    assert [s.name for s in await jobs.list_schedules(prefix="t", tenant="acme")] == ["t:a", "t:b"]
    assert await jobs.unschedule_all(tenant="acme") == 2
    assert await jobs.unschedule_all(tenant="acme") == 0
    assert [s.name for s in await jobs.list_schedules()] == ["t_c", "u:%"]
    with pytest.raises(DrainpipeError) as caught:
        await jobs.unschedule_all(tenant="")
    assert caught.value.kind == "validation"


async def test_a_drain_that_missed_a_day_enqueues_one_run(
    db: psycopg.AsyncConnection[Any], backend_name: str
) -> None:
    jobs = jobs_on(db)
    await jobs.schedule("minutely", "* * * * *", "pings", {"n": 1})
    due = await set_next_run(db, "minutely", "clock_timestamp() - interval '1 day'")
    assert await jobs.run_schedules() == 1
    assert await stored_keys(db, backend_name, "pings") == [run_key("minutely", due)]
    [info] = await jobs.list_schedules()
    now = datetime.now(UTC)
    # missed runs collapse: the next run counts from now, not from the old due time
    assert now < info.next_run <= now + timedelta(minutes=1)  # type: ignore[operator]
    assert info.last_run == due and info.leased_until is None
    assert await jobs.run_schedules() == 0
    [job] = await jobs.claim("pings")
    assert job.payload == {"n": 1} and job.max_attempts == 5


async def test_interval_counts_from_the_later_of_now_and_due(
    db: psycopg.AsyncConnection[Any],
) -> None:
    jobs = jobs_on(db)
    await jobs.schedule("every-hour", "1 hour", "pings", {})
    await set_next_run(db, "every-hour", "clock_timestamp() - interval '5 hours'")
    before = datetime.now(UTC)
    assert await jobs.run_schedules() == 1
    [info] = await jobs.list_schedules()
    assert before + timedelta(hours=1) - timedelta(milliseconds=1) <= info.next_run  # type: ignore[operator]
    assert info.next_run <= datetime.now(UTC) + timedelta(hours=1)  # type: ignore[operator]


async def test_concurrent_drains_never_enqueue_a_run_twice(
    jobs_db_url: str, backend_name: str
) -> None:
    admin = await connect(jobs_db_url)
    left, right = await connect(jobs_db_url), await connect(jobs_db_url)
    try:
        setup = jobs_on(admin)
        for i in range(20):
            await setup.schedule(f"s{i:02d}", "*/5 * * * *", "pings", {"i": i})
        await admin.execute(
            "UPDATE drainpipe.job_schedules SET next_run = date_trunc('milliseconds', clock_timestamp()) - interval '10 minutes'"
        )

        async def drain(jobs: drainpipe.Jobs) -> int:
            total = 0
            for _ in range(12):
                total += await jobs.run_schedules(batch=3)
            return total

        counts = await asyncio.gather(drain(jobs_on(left)), drain(jobs_on(right)))
        assert sum(counts) == 20
        assert all(count > 0 for count in counts)  # both really took part
        keys = await stored_keys(admin, backend_name, "pings")
        assert len(keys) == 20 and len(set(keys)) == 20
        # and once more at the same moment: nothing is due any more
        again = await asyncio.gather(jobs_on(left).run_schedules(), jobs_on(right).run_schedules())
        assert list(again) == [0, 0]
    finally:
        for conn in (admin, left, right):
            await conn.close()


async def test_advance_only_succeeds_for_the_claimed_run(
    one_db: psycopg.AsyncConnection[Any],
) -> None:
    jobs = jobs_on(one_db)
    await jobs.schedule("s", "@hourly", "pings", {})
    due = await set_next_run(one_db, "s", "clock_timestamp() - interval '1 minute'")
    [row] = await (
        await one_db.execute("SELECT * FROM drainpipe.claim_due_schedules_v1(60, 10)")
    ).fetchall()
    assert row[0] == "s" and row[5] == due
    # leased: a second claim sees nothing
    assert (
        await (
            await one_db.execute("SELECT * FROM drainpipe.claim_due_schedules_v1(60, 10)")
        ).fetchall()
        == []
    )
    token = row[7]
    advance = "SELECT drainpipe.advance_schedule_v1(%s, %s, %s, %s)"
    later = due + timedelta(hours=1)
    assert (
        await (
            await one_db.execute(advance, ("s", due - timedelta(milliseconds=1), later, token))
        ).fetchone()
    ) == (False,)
    # the microseconds a client might add are floored away on both sides
    assert (
        await (
            await one_db.execute(advance, ("s", due + timedelta(microseconds=700), later, token))
        ).fetchone()
    ) == (True,)
    assert (await (await one_db.execute(advance, ("s", due, later, token))).fetchone()) == (
        False,
    )  # already advanced
    # a rewrite while a drain holds the schedule: the old claim can no longer advance it
    await set_next_run(one_db, "s", "clock_timestamp() - interval '1 minute'")
    [row] = await (
        await one_db.execute("SELECT * FROM drainpipe.claim_due_schedules_v1(60, 10)")
    ).fetchall()
    await jobs.schedule("s", "@daily", "pings", {})
    assert (await (await one_db.execute(advance, ("s", row[5], later, row[7]))).fetchone()) == (
        False,
    )


async def test_a_drain_whose_claim_ran_out_cannot_advance_the_next_claim(
    one_db: psycopg.AsyncConnection[Any],
) -> None:
    jobs = jobs_on(one_db)
    await jobs.schedule("s", "@hourly", "pings", {})
    due = await set_next_run(one_db, "s", "clock_timestamp() - interval '1 minute'")
    claim = "SELECT name, next_run, claim_token FROM drainpipe.claim_due_schedules_v1(60, 10)"
    [(_, _, stale)] = await (await one_db.execute(claim)).fetchall()
    # drain A stalls past its lease; drain B claims the same due run
    await one_db.execute(
        "UPDATE drainpipe.job_schedules SET locked_until = clock_timestamp() - interval '1 s'"
    )
    [(_, _, fresh)] = await (await one_db.execute(claim)).fetchall()
    assert fresh != stale
    advance = "SELECT drainpipe.advance_schedule_v1(%s, %s, %s, %s)"
    later = due + timedelta(hours=1)
    assert (await (await one_db.execute(advance, ("s", due, later, stale))).fetchone()) == (False,)
    assert (await (await one_db.execute(advance, ("s", due, later, fresh))).fetchone()) == (True,)


async def test_trigger_written_schedules_run_on_the_next_drain(
    db: psycopg.AsyncConnection[Any], backend_name: str
) -> None:
    await db.execute(
        """
        CREATE TABLE public.tenants (id text PRIMARY KEY, cron text NOT NULL, tz text NOT NULL);
        CREATE FUNCTION public.tenant_schedule() RETURNS trigger
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
        BEGIN
            PERFORM drainpipe.schedule_job_v1(
                'tenant:' || NEW.id || ':report', NEW.cron, 'reports',
                jsonb_build_object('kind', 'tenant-' || NEW.id), NEW.tz, NULL, NEW.id);
            RETURN NEW;
        END $$;
        CREATE TRIGGER tenants_schedule AFTER INSERT OR UPDATE ON public.tenants
            FOR EACH ROW EXECUTE FUNCTION public.tenant_schedule();
        GRANT SELECT, INSERT, UPDATE ON public.tenants TO authenticated;
        """
    )
    # an API user (no rights on drainpipe) writes the row; the trigger writes the schedule
    await db.execute("SET ROLE authenticated")
    await db.execute("INSERT INTO public.tenants VALUES ('acme', '* * * * *', 'Asia/Kolkata')")
    await db.execute("RESET ROLE")
    [info] = await jobs_on(db).list_schedules(tenant="acme")
    assert (
        info.name == "tenant:acme:report"
        and info.next_run is None
        and info.time_zone == "Asia/Kolkata"
    )

    # a drain whose clock is five minutes on: the first run (the minute after the write) is due
    ahead = jobs_on(db, now=lambda: datetime.now(UTC) + timedelta(minutes=5))
    [(*_, first_after)] = await schedule_rows(db)
    first = next_cron_run("* * * * *", "Asia/Kolkata", first_after)
    assert await ahead.run_schedules() == 1
    assert await stored_keys(db, backend_name, "reports") == [run_key("tenant:acme:report", first)]
    [job] = await ahead.claim("reports")
    assert job.payload == {"kind": "tenant-acme"}
    assert job.context.tenant is None  # the schedule's tenant is not the job's context
    [info] = await ahead.list_schedules()
    assert (
        info.last_run == first and info.next_run is not None and info.next_run > datetime.now(UTC)
    )

    # a new cron clears the next run; the following drain computes it, enqueueing nothing
    await db.execute("UPDATE public.tenants SET cron = '0 3 * * *' WHERE id = 'acme'")
    [(_name, cron, *_rest, next_run, last_run, first_after)] = await schedule_rows(db)
    assert (cron, next_run, last_run) == ("0 3 * * *", None, first)
    assert await jobs_on(db).run_schedules() == 0
    [info] = await jobs_on(db).list_schedules()
    assert info.next_run == next_cron_run("0 3 * * *", "Asia/Kolkata", first_after)
    assert info.next_run.astimezone(drainpipe.schedules.cron.zone("Asia/Kolkata")).hour == 3
    # same cron again from the trigger: the computed next run is kept
    await db.execute("UPDATE public.tenants SET tz = 'Asia/Kolkata' WHERE id = 'acme'")
    [again] = await jobs_on(db).list_schedules()
    assert again.next_run == info.next_run


async def test_sql_checks_shape_and_zone_and_drain_skips_unreadable_crons(
    db: psycopg.AsyncConnection[Any], backend_name: str
) -> None:
    jobs = jobs_on(db)
    backend: Any = jobs.backend
    with pytest.raises(DrainpipeError) as caught:
        await backend.schedule(
            "x", "@daily", "pings", {}, time_zone="Mars/Olympus", next_run=None, tenant=None
        )
    assert caught.value.kind == "invalid_input" and "Unknown time zone Mars/Olympus" in str(
        caught.value
    )
    with pytest.raises(DrainpipeError) as caught:
        await backend.schedule(
            "x", "every day", "pings", {}, time_zone="UTC", next_run=None, tenant=None
        )
    assert caught.value.kind == "invalid_input" and "expected five cron fields" in str(caught.value)
    with pytest.raises(DrainpipeError) as caught:
        await backend.schedule(
            "x", "0 seconds", "pings", {}, time_zone="UTC", next_run=None, tenant=None
        )
    assert caught.value.kind == "invalid_input"
    with pytest.raises(DrainpipeError) as caught:
        await backend.schedule(
            "x", "@daily", "Bad-Queue", {}, time_zone="UTC", next_run=None, tenant=None
        )
    assert caught.value.kind == "invalid_input"
    assert await schedule_rows(db) == []

    # five tokens pass the SQL shape check but not the parser: never run, never block others
    await backend.schedule(
        "bad", "61 * * * *", "pings", {}, time_zone="UTC", next_run=None, tenant=None
    )
    await jobs.schedule("good", "* * * * *", "pings", {})
    await set_next_run(db, "good", "clock_timestamp() - interval '1 minute'")
    assert await jobs.run_schedules() == 1
    bad = (await jobs.list_schedules(prefix="bad"))[0]
    assert bad.next_run is None and bad.leased_until is not None
    assert len(await stored_keys(db, backend_name, "pings")) == 1


async def test_context_envelope_travels_with_scheduled_runs(
    db: psycopg.AsyncConnection[Any],
) -> None:
    jobs = jobs_on(db)
    context = {"tenant": "acme", "actor": {"id": "u1", "kind": "user"}}
    await jobs.schedule("ctx", "* * * * *", "reports", {"kind": "a"}, context=context)
    await jobs.schedule("plain", "* * * * *", "reports", {"kind": "b"}, tenant="other")
    await db.execute(
        "UPDATE drainpipe.job_schedules SET next_run = date_trunc('milliseconds', clock_timestamp()) - interval '1 minute'"
    )
    assert await jobs.run_schedules() == 2
    by_kind = {job.payload["kind"]: job for job in await jobs.claim("reports", batch=10)}
    assert by_kind["a"].context.tenant == "acme" and by_kind["a"].context.actor == drainpipe.Actor(
        "u1", "user"
    )
    assert by_kind["b"].context.tenant is None and by_kind["b"].context.actor is None
    assert {s.name: s.tenant for s in await jobs.list_schedules()} == {
        "ctx": "acme",
        "plain": "other",
    }


@pytest.mark.parametrize(
    ("call", "kind", "path", "message"),
    [
        (
            {"time_zone": "Mars/Olympus"},
            "validation",
            ["n", "time_zone"],
            'Unknown time zone "Mars/Olympus"',
        ),
        (
            {"cron": "every day"},
            "validation",
            ["n", "cron"],
            'Invalid cron "every day": expected 5 fields (minute hour day month weekday)',
        ),
        (
            {"cron": "0 24 * * *"},
            "validation",
            ["n", "cron"],
            'Invalid cron "0 24 * * *": "24" is outside 0-23',
        ),
        (
            {"cron": "0 0 30 2 *"},
            "validation",
            ["n", "cron"],
            'Invalid cron "0 0 30 2 *": it never matches a date',
        ),
        (
            {"cron": "0 seconds"},
            "validation",
            ["n", "cron"],
            'Invalid cron "0 seconds": the interval must be positive',
        ),
        # Postgres's \\s does not split on a no-break space: Python must refuse it too, or
        # the SQL check answers invalid_input after Python let it through
        ({"cron": "0\u00a03 * * *"}, "validation", ["n", "cron"], None),
        ({"cron": "1" * 5000 + " * * * *"}, "validation", ["n", "cron"], None),
        ({"payload": {"kind": ""}}, "validation", ["n", "payload", "kind"], None),
        ({"payload": "nope"}, "validation", ["n", "payload"], None),
        (
            {"queue": "nowhere"},
            "invalid_request",
            None,
            'Unknown queue "nowhere". Queues: reports, pings',
        ),
        ({"name": ""}, "validation", ["name"], None),
        ({"name": "x" * 201}, "validation", ["name"], None),
        ({"tenant": ""}, "validation", ["n", "tenant"], None),
        ({"context": {"actor": {"id": 5}}}, "validation", ["n", "context", "actor"], None),
    ],
)
async def test_bad_input_writes_nothing(
    one_db: psycopg.AsyncConnection[Any],
    call: dict[str, Any],
    kind: str,
    path: list[Any] | None,
    message: str | None,
) -> None:
    jobs = jobs_on(one_db)
    args: dict[str, Any] = {
        "name": "n",
        "cron": "@daily",
        "queue": "reports",
        "payload": {"kind": "k"},
        **call,
    }
    with pytest.raises(DrainpipeError) as caught:
        await jobs.schedule(
            args.pop("name"), args.pop("cron"), args.pop("queue"), args.pop("payload"), **args
        )
    assert caught.value.kind == kind
    if message is not None:
        assert str(caught.value) == message
    if path is not None:
        assert (
            caught.value.issues is not None and caught.value.issues[0]["path"][: len(path)] == path
        )
    assert await schedule_rows(one_db) == []


async def test_ensure_schedules(one_db: psycopg.AsyncConnection[Any]) -> None:
    jobs = jobs_on(one_db)
    await jobs.schedule("app:old", "@daily", "pings", {})
    await jobs.schedule("app:keep", "*/5 * * * *", "pings", {})
    await jobs.schedule("other:x", "@daily", "pings", {})
    await jobs.schedule("app:t-other", "@daily", "pings", {}, tenant="t2")
    due = await set_next_run(one_db, "app:keep", "clock_timestamp() - interval '1 minute'")
    result = await jobs.ensure_schedules(
        [
            ScheduleDef("app:keep", "*/5 * * * *", "pings", {"v": 2}),
            {
                "name": "app:new",
                "cron": "0 9 * * MON",
                "queue": "reports",
                "payload": {"kind": "w"},
                "time_zone": "Europe/Amsterdam",
                "tenant": "t9",
            },
        ],
        prefix="app:",
        tenant="t1",
    )
    assert result == EnsureResult(
        scheduled=["app:keep", "app:new"], removed=[]
    )  # nothing of t1 to remove
    listed = {s.name: s for s in await jobs.list_schedules()}
    assert set(listed) == {"app:keep", "app:new", "app:old", "app:t-other", "other:x"}
    assert listed["app:keep"].tenant == "t1" and listed["app:new"].tenant == "t9"  # own tenant wins
    assert listed["app:keep"].next_run == due  # same cron and zone: the due run is kept

    result = await jobs.ensure_schedules(
        [ScheduleDef("app:keep", "*/5 * * * *", "pings", {"v": 3})], prefix="app:"
    )
    assert result.scheduled == ["app:keep"]
    assert result.removed == ["app:new", "app:old", "app:t-other"]
    assert [s.name for s in await jobs.list_schedules()] == ["app:keep", "other:x"]
    # running it twice changes nothing
    again = await jobs.ensure_schedules(
        [ScheduleDef("app:keep", "*/5 * * * *", "pings", {"v": 3})], prefix="app:"
    )
    assert again == EnsureResult(scheduled=["app:keep"], removed=[])
    assert (await jobs.list_schedules(prefix="app:"))[0].next_run == due


@pytest.mark.parametrize(
    ("definitions", "kind", "message"),
    [
        (
            [
                ScheduleDef("app:a", "@daily", "pings", {}),
                ScheduleDef("app:b", "61 * * * *", "pings", {}),
            ],
            "validation",
            'Invalid cron "61 * * * *": "61" is outside 0-59',
        ),
        (
            [
                ScheduleDef("app:a", "@daily", "pings", {}),
                ScheduleDef("zzz:b", "@daily", "pings", {}),
            ],
            "invalid_request",
            'Schedule "zzz:b" does not start with "app:"',
        ),
        (
            [
                ScheduleDef("app:a", "@daily", "pings", {}),
                ScheduleDef("app:a", "@hourly", "pings", {}),
            ],
            "invalid_request",
            'Schedule "app:a" is defined twice',
        ),
        (
            [
                ScheduleDef("app:a", "@daily", "pings", {}),
                ScheduleDef("app:b", "@daily", "reports", {"kind": 1}),
            ],
            "validation",
            None,
        ),
        (
            [ScheduleDef("app:a", "@daily", "pings", {}, time_zone="Nowhere/City")],
            "validation",
            None,
        ),
        (
            [{"name": "app:a", "cron": "@daily", "queue": "pings"}],
            "invalid_request",
            "Schedule definition 0 needs payload",
        ),
        (
            [{"name": "app:a", "cron": "@daily", "queue": "pings", "payload": {}, "tz": "UTC"}],
            "invalid_request",
            None,
        ),
    ],
)
async def test_ensure_schedules_failures_write_nothing(
    one_db: psycopg.AsyncConnection[Any], definitions: list[Any], kind: str, message: str | None
) -> None:
    jobs = jobs_on(one_db)
    await jobs.schedule("app:old", "@daily", "pings", {})
    before = await schedule_rows(one_db)
    with pytest.raises(DrainpipeError) as caught:
        await jobs.ensure_schedules(definitions, prefix="app:")
    assert caught.value.kind == kind
    if message is not None:
        assert str(caught.value) == message
    assert await schedule_rows(one_db) == before
    with pytest.raises(DrainpipeError) as caught:
        await jobs.ensure_schedules([], prefix="")
    assert caught.value.kind == "invalid_request"
    assert await schedule_rows(one_db) == before


async def test_privileges(one_db: psycopg.AsyncConnection[Any]) -> None:
    call = "SELECT drainpipe.schedule_job_v1('p', '@daily', 'pings', '{}', 'UTC', NULL, NULL)"
    for role in ("anon", "authenticated"):
        await one_db.execute(f"SET ROLE {role}")
        for sql in (
            call,
            "SELECT * FROM drainpipe.claim_due_schedules_v1(60, 10)",
            "SELECT * FROM drainpipe.job_schedules",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                await one_db.execute(sql)
        await one_db.execute("RESET ROLE")
    await one_db.execute("SET ROLE service_role")
    await one_db.execute(call)
    rows = await (
        await one_db.execute("SELECT name FROM drainpipe.list_schedules_v1(NULL, NULL)")
    ).fetchall()
    await one_db.execute("RESET ROLE")
    assert rows == [("p",)]


class _MinimalBackend:
    api_version = 1
    name = "minimal"
    leases = False

    async def send(self, *args: Any, **kwargs: Any) -> int:
        raise AssertionError("not called")

    async def read(self, *args: Any, **kwargs: Any) -> list[Any]:
        return []

    async def complete(self, *args: Any) -> bool:
        return False

    async def fail(self, *args: Any) -> None:
        return None

    async def extend(self, *args: Any) -> bool:
        return False


async def test_backend_without_schedules() -> None:
    jobs = drainpipe.Jobs(_MinimalBackend(), QUEUES)
    assert await jobs.run_schedules() == 0
    for call in (
        jobs.schedule("a", "@daily", "pings", {}),
        jobs.unschedule("a"),
        jobs.list_schedules(),
        jobs.unschedule_all(tenant="t"),
        jobs.ensure_schedules([], prefix="a"),
    ):
        with pytest.raises(DrainpipeError) as caught:
            await call
        assert caught.value.kind == "invalid_request"


@pytest.mark.parametrize("plan_mode", ["auto", "force_generic_plan"])
async def test_claim_due_schedules_stays_on_its_indexes(
    one_db: psycopg.AsyncConnection[Any], plan_mode: str
) -> None:
    # a large multi-tenant table where nothing is due: the claim must not walk it
    await one_db.execute(
        "INSERT INTO drainpipe.job_schedules (name, cron, queue, next_run)"
        " SELECT 's' || g, '@daily', 'pings', clock_timestamp() + g * interval '1 second'"
        " FROM generate_series(1, 20000) g"
    )
    await one_db.execute("ANALYZE drainpipe.job_schedules")
    plans: list[str] = []
    one_db.add_notice_handler(lambda diag: plans.append(diag.message_primary or ""))
    for setting in (
        "LOAD 'auto_explain'",
        "SET auto_explain.log_min_duration = 0",
        "SET auto_explain.log_nested_statements = on",
        "SET auto_explain.log_analyze = on",
        "SET auto_explain.log_level = notice",
        f"SET plan_cache_mode = {plan_mode}",
    ):
        await one_db.execute(setting)
    for _ in range(6):  # past the 5 custom plans, so a generic plan is really used
        assert (
            await (
                await one_db.execute("SELECT * FROM drainpipe.claim_due_schedules_v1(60, 100)")
            ).fetchall()
            == []
        )
    plan = next(p for p in reversed(plans) if "Update on job_schedules" in p)
    assert "job_schedules_due_idx" in plan and "job_schedules_pkey" in plan
    assert "Seq Scan" not in plan
    # the due range is bounded in the index, not filtered row by row
    assert all(int(n) < 100 for n in re.findall(r"Rows Removed by Filter: (\d+)", plan)), plan


async def test_a_same_cron_rewrite_during_a_drain_does_not_run_the_due_run_twice(
    jobs_db_url: str, backend_name: str
) -> None:
    # ensure_schedules at every deploy rewrites schedules with the cron they already have;
    # one landing while a drain enqueues a run must not leave that run due for the next
    # drain (which would enqueue it again once the first job finished)
    admin, draining = await connect(jobs_db_url), await connect(jobs_db_url)
    try:
        deploy = jobs_on(admin)
        await deploy.schedule("nightly", "0 3 * * *", "pings", {"v": 1})
        due = await set_next_run(admin, "nightly", "clock_timestamp() - interval '1 minute'")
        drain = jobs_on(draining)
        send = drain.backend.send

        async def send_then_deploy(*args: Any, **kwargs: Any) -> int:
            job_id = await send(*args, **kwargs)
            await deploy.schedule("nightly", "0 3 * * *", "pings", {"v": 2})
            return job_id

        drain.backend.send = send_then_deploy  # type: ignore[method-assign]
        assert await drain.run_schedules() == 1
        drain.backend.send = send  # type: ignore[method-assign]
        [info] = await deploy.list_schedules()
        assert info.last_run == due and info.next_run is not None and info.next_run > due
        [job] = await deploy.claim("pings")
        assert job.payload == {"v": 1}  # the run claimed before the rewrite
        assert await deploy.complete(job)
        assert await drain.run_schedules() == 0
        assert await stored_keys(admin, backend_name, "pings") == []
        # the rewrite took: the next run carries the new payload
        await set_next_run(admin, "nightly", "clock_timestamp() - interval '1 second'")
        assert await drain.run_schedules() == 1
        [job] = await deploy.claim("pings")
        assert job.payload == {"v": 2}
    finally:
        await admin.close()
        await draining.close()


async def test_ensure_schedules_failing_while_writing_removes_nothing_and_converges(
    one_db: psycopg.AsyncConnection[Any],
) -> None:
    # each schedule is its own write: a database error halfway (here a trigger refusing one
    # name) leaves the earlier ones written, removes nothing, and calling again finishes
    jobs = jobs_on(one_db)
    await jobs.schedule("app:old", "@daily", "pings", {})
    await one_db.execute(
        """
        CREATE FUNCTION public.refuse_b() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.name = 'app:b' THEN RAISE EXCEPTION 'no b today'; END IF;
            RETURN NEW;
        END $$;
        CREATE TRIGGER refuse_b BEFORE INSERT ON drainpipe.job_schedules
            FOR EACH ROW EXECUTE FUNCTION public.refuse_b();
        """
    )
    definitions = [
        ScheduleDef("app:a", "@hourly", "pings", {}),
        ScheduleDef("app:b", "@hourly", "pings", {}),
        ScheduleDef("app:c", "@hourly", "pings", {}),
    ]
    with pytest.raises(DrainpipeError) as caught:
        await jobs.ensure_schedules(definitions, prefix="app:")
    assert caught.value.kind == "raised"
    assert [row[0] for row in await schedule_rows(one_db)] == ["app:a", "app:old"]
    await one_db.execute("DROP TRIGGER refuse_b ON drainpipe.job_schedules")
    result = await jobs.ensure_schedules(definitions, prefix="app:")
    assert result == EnsureResult(scheduled=["app:a", "app:b", "app:c"], removed=["app:old"])
    assert [row[0] for row in await schedule_rows(one_db)] == ["app:a", "app:b", "app:c"]
