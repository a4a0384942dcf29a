"""PostgrestBackend: drainpipe's own functions over PostgREST (emulated by respx on real
Postgres), with every feature of a direct connection."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg
import pytest
import respx

import drainpipe
from drainpipe import DrainpipeError, Jobs, Retry
from drainpipe.backends.capabilities import SupportsBatches, SupportsDeadLetters, SupportsSchedules
from drainpipe.backends.pgmq_public import PgmqPublicBackend
from drainpipe.backends.postgrest import PostgrestBackend
from tests.conftest import connect
from tests.jobs.postgrest_emulation import (
    ANON_KEY,
    BASE,
    EXPOSED,
    SERVICE_KEY,
    PostgrestEmulation,
    postgrest_emulation,
)
from tests.jobs.test_pgmq_public import setup_pgmq_public

QUEUES: dict[str, Any] = {"emails": dict[str, Any], "reports": int}


@pytest.fixture
async def server(jobs_db_url: str) -> AsyncIterator[PostgrestEmulation]:
    async with postgrest_emulation(jobs_db_url) as (emulation, _):
        yield emulation


@pytest.fixture
async def backend(server: PostgrestEmulation) -> AsyncIterator[PostgrestBackend]:
    async with PostgrestBackend(BASE, SERVICE_KEY) as made:
        yield made


@pytest.fixture
def jobs(backend: PostgrestBackend) -> Jobs:
    return Jobs(backend, QUEUES)


# -- HTTP shape -------------------------------------------------------------------------


async def test_requests_are_named_arguments_in_the_api_schema(
    jobs: Jobs, server: PostgrestEmulation
) -> None:
    await jobs.enqueue("emails", {"to": "a@x"}, delay=1.5, dedupe_key="k", dedupe="waiting")
    request = server.requests[-1]
    assert str(request.url) == f"{BASE}/rest/v1/rpc/enqueue_v1"
    assert request.headers["content-profile"] == "drainpipe_api"
    assert request.headers["accept-profile"] == "drainpipe_api"
    assert request.headers["apikey"] == SERVICE_KEY
    assert request.headers["authorization"] == f"Bearer {SERVICE_KEY}"
    assert json.loads(request.content) == {
        "queue": "emails",
        "payload": {"to": "a@x"},
        "delay": 1.5,
        "max_attempts": 5,
        "dedupe_key": "k",
        "dedupe_running": False,
    }
    await jobs.enqueue("emails", {"to": "b@x"})
    assert server.calls()[-1] == ("enqueue_v1", {"queue": "emails", "payload": {"to": "b@x"}})


def test_it_is_a_full_backend_and_exported() -> None:
    backend = PostgrestBackend(f"{BASE}/rest/v1/", SERVICE_KEY)
    assert drainpipe.PostgrestBackend is PostgrestBackend
    assert backend.rest_url == f"{BASE}/rest/v1" and backend.leases and backend.name == "postgrest"
    for capability in (SupportsBatches, SupportsDeadLetters, SupportsSchedules):
        assert isinstance(backend, capability)
    with pytest.raises(ValueError, match="http"):
        PostgrestBackend("project.supabase.co", SERVICE_KEY)
    with pytest.raises(ValueError, match="service-role key"):
        PostgrestBackend(BASE, "")


# -- fenced settlement, retries, heartbeats ---------------------------------------------


async def test_a_stale_completion_is_refused(jobs: Jobs, jobs_db_url: str) -> None:
    job_id = await jobs.enqueue("emails", {"to": "a@x"})
    [stale] = await jobs.claim("emails", lease=0.05)
    await asyncio.sleep(0.1)
    [fresh] = await jobs.claim("emails", lease=60)
    assert (stale.id, fresh.id, stale.attempts, fresh.attempts) == (job_id, job_id, 1, 2)
    assert await jobs.complete(stale) is False
    assert await jobs.fail(stale, "late") is None
    assert await jobs.extend(stale, 60) is False
    assert await jobs.extend(fresh, 60) is True
    assert await jobs.complete(fresh) is True
    assert await jobs.complete(fresh) is False
    assert (await jobs.stats(["emails"]))["emails"].ready == 0


async def test_fail_stores_the_error_and_schedules_the_retry_then_dead_letters(
    jobs: Jobs,
) -> None:
    job_id = await jobs.enqueue("emails", {"n": 1}, max_attempts=2)
    [first] = await jobs.claim("emails", lease=60)
    assert await jobs.fail(first, "boom", retry_in=0) == "queued"
    [second] = await jobs.claim("emails", lease=60)  # at once: retry_in=0, not the lease
    assert (second.attempts, second.last_error) == (2, "boom")
    assert await jobs.fail(second, "boom again") == "dead"
    [dead] = await jobs.list_dead("emails")
    assert (dead.id, dead.attempts, dead.last_error, dead.payload) == (
        job_id,
        2,
        "boom again",
        {"n": 1},
    )
    assert dead.died_at is not None and dead.died_at.tzinfo is not None
    stats = (await jobs.stats())["emails"]
    assert (stats.dead, stats.ready) == (1, 0)
    new_id = await jobs.replay("emails", job_id)
    assert new_id is not None and new_id != job_id
    assert await jobs.replay("emails", job_id) is None


async def test_heartbeat_keeps_a_long_job_from_being_claimed(jobs: Jobs, jobs_db_url: str) -> None:
    await jobs.enqueue("emails", {"n": 1})
    thief = Jobs(jobs_db_url, QUEUES)  # a direct connection, racing the HTTPS worker
    stolen: list[Any] = []

    async def slow(payload: Any, job: Any) -> None:
        for _ in range(4):  # 3 s: past the lease, which only the heartbeats keep alive
            await asyncio.sleep(0.75)
            stolen.extend(await thief.claim("emails", lease=60))

    # a 2 s lease: heartbeats every ~0.7 s over the emulated HTTPS hop, with room for a busy
    # machine (a 1 s lease lost a heartbeat's race under load)
    report = await jobs.drain("emails", slow, lease=2)
    assert (report.succeeded, report.failed, stolen) == (1, 0, [])
    await thief.backend.db.close()  # type: ignore[attr-defined]


async def test_https_workers_racing_never_share_a_job(
    jobs: Jobs, backend: PostgrestBackend, jobs_db_url: str
) -> None:
    ids = set(await jobs.enqueue_many("emails", [{"n": i} for i in range(60)]))

    async def claim_all(worker: Any) -> list[int]:
        got: list[int] = []
        while batch := await worker.read("emails", lease=60, batch=4):
            got += [job.id for job in batch]
        return got

    direct = Jobs(jobs_db_url, QUEUES)  # and one over a direct connection
    async with PostgrestBackend(BASE, SERVICE_KEY) as other:
        results = await asyncio.gather(
            claim_all(backend), claim_all(other), claim_all(backend), claim_all(direct.backend)
        )
    await direct.backend.db.close()  # type: ignore[attr-defined]
    claimed = [job_id for result in results for job_id in result]
    assert len(claimed) == len(set(claimed)) == 60 and set(claimed) == ids


# -- dedupe, batches, dead letters, purge ----------------------------------------------


async def test_dedupe_coalesces_concurrent_enqueues(jobs: Jobs) -> None:
    ids = await asyncio.gather(
        *(jobs.enqueue("emails", {"n": i}, dedupe_key="one") for i in range(10))
    )
    assert len(set(ids)) == 1
    [job] = await jobs.claim("emails")
    # "waiting" does not coalesce onto a running job: exactly one follow-up
    follow_up = await jobs.enqueue("emails", {"n": 99}, dedupe_key="one", dedupe="waiting")
    assert follow_up != job.id
    again = await jobs.enqueue("emails", {"n": 100}, dedupe_key="one", dedupe="waiting")
    assert again == follow_up


async def test_batches_are_one_request_each(jobs: Jobs, server: PostgrestEmulation) -> None:
    ids = await jobs.enqueue_many("emails", [{"n": i} for i in range(5)], max_attempts=3)
    assert len(server.calls("enqueue_many_v1")) == 1 and len(ids) == 5
    backend = jobs.backend
    assert isinstance(backend, PostgrestBackend)
    claimed = await backend.read("emails", lease=60, batch=5)
    assert [job.id for job in claimed] == ids and {job.max_attempts for job in claimed} == {3}
    assert await backend.extend_many(claimed, 120) == set(ids)
    assert await backend.complete_many(claimed[:3]) == [True, True, True]
    assert await backend.complete_many(claimed) == [False] * 3 + [True, True]
    assert await backend.send_many("emails", []) == []


async def test_retry_dead_and_purge(jobs: Jobs) -> None:
    ids = [await jobs.enqueue("emails", {"n": i}, max_attempts=1) for i in range(3)]
    for job in await jobs.claim("emails", batch=3):
        assert await jobs.fail(job, "x") == "dead"
    assert [d.id for d in await jobs.list_dead("emails", limit=2)] == ids[::-1][:2]
    assert [d.id for d in await jobs.list_dead("emails", cursor=ids[1])] == [ids[0]]
    assert await jobs.retry_dead("emails", ids=[ids[0]]) == 1
    [again] = await jobs.claim("emails")
    assert await jobs.complete(again)
    # the completed one: both storages keep finished jobs as records until purged
    assert await jobs.purge_archive("emails", older_than=timedelta(0)) == 1
    # the two dead letters left (the table also keeps the replayed one as the retry's parent)
    purged = await jobs.purge_archive(
        "emails", older_than=timedelta(0), dead_older_than=timedelta(0)
    )
    assert purged >= 2 and await jobs.list_dead("emails") == []
    assert (await jobs.stats(["emails"]))["emails"].dead == 0


# -- schedules and the drain route's work ------------------------------------------------


async def test_schedules_over_postgrest(jobs: Jobs, server: PostgrestEmulation) -> None:
    await jobs.schedule("digest", "*/5 * * * *", "reports", 7, time_zone="Europe/Amsterdam")
    await jobs.schedule("t1:nightly", "0 3 * * *", "reports", 8, tenant="t1")
    [digest, nightly] = await jobs.list_schedules()
    assert (digest.name, digest.time_zone, digest.queue) == (
        "digest",
        "Europe/Amsterdam",
        "reports",
    )
    assert nightly.tenant == "t1" and nightly.next_run is not None
    assert [s.name for s in await jobs.list_schedules(prefix="t1:")] == ["t1:nightly"]
    assert await jobs.unschedule_all(tenant="t1") == 1
    assert await jobs.unschedule("digest") is True
    assert await jobs.unschedule("digest") is False


async def test_run_schedules_enqueues_each_due_run_once(jobs: Jobs, jobs_db_url: str) -> None:
    await jobs.schedule("tick", "1 minute", "reports", 1)
    async with await connect(jobs_db_url) as c:
        await c.execute(
            "UPDATE drainpipe.job_schedules SET next_run = now() - interval '90 s'"
            " WHERE name = 'tick'"
        )
    first, second = await asyncio.gather(jobs.run_schedules(), jobs.run_schedules())
    assert first + second == 1
    [run] = await jobs.claim("reports")
    assert run.payload == 1
    [info] = await jobs.list_schedules()
    assert info.next_run is not None and info.next_run > datetime.now(UTC)


async def test_the_drain_route_works_over_postgrest(jobs: Jobs, server: PostgrestEmulation) -> None:
    await jobs.enqueue_many("emails", [{"n": i} for i in range(4)])
    seen: list[int] = []

    async def handle(payload: dict[str, Any], job: Any) -> None:
        seen.append(payload["n"])
        if payload["n"] == 3:
            raise Retry(after=3600)

    route = jobs.drain_route(
        secret="s3cret-0123456789abcdef0123456789abcdef",
        handlers={"emails": handle},
        budget=5,
        batch=2,
    )
    transport = httpx.ASGITransport(app=route)
    async with httpx.AsyncClient(transport=transport, base_url="http://route") as client:
        with respx.mock(assert_all_called=False) as local:
            local.route(host="route").pass_through()
            response = await client.post(
                "/", headers={"Authorization": "Bearer s3cret-0123456789abcdef0123456789abcdef"}
            )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["queues"]["emails"] == {"succeeded": 3, "failed": 1}
    assert sorted(seen) == [0, 1, 2, 3]
    stats = (await jobs.stats(["emails"]))["emails"]
    assert (stats.ready, stats.in_flight) == (0, 1)  # waiting out its hour of backoff
    assert {"claim_due_schedules_v1", "claim_v1", "complete_and_claim_v1", "fail_coded_v1"} <= {
        fn for fn, _ in server.calls()
    }


# -- errors: PostgREST's shapes -------------------------------------------------------------


async def test_an_unexposed_schema_is_one_clear_error(jobs_db_url: str) -> None:
    async with (
        postgrest_emulation(jobs_db_url, exposed=("public", "pgmq_public")),
        PostgrestBackend(BASE, SERVICE_KEY) as backend,
    ):
        with pytest.raises(DrainpipeError) as caught:
            await Jobs(backend, QUEUES).enqueue("emails", {})
        with pytest.raises(DrainpipeError) as checked:
            await backend.check()
    for error in (caught.value, checked.value):
        assert (error.kind, error.code) == ("invalid_request", "SCHEMA_NOT_EXPOSED")
        assert "does not expose the schema drainpipe_api" in error.message
        assert "Exposed schemas" in error.message and "config.toml" in error.message


async def test_detect_falls_back_to_pgmq_public_once(db_url: str) -> None:
    await setup_pgmq_public(db_url, ("emails",))  # pgmq_public needs the pgmq storage
    async with postgrest_emulation(db_url, exposed=("public", "pgmq_public")) as (server, _):
        found = await PostgrestBackend.detect(BASE, SERVICE_KEY)
        assert isinstance(found, PgmqPublicBackend)
        await Jobs(found, QUEUES).enqueue("emails", {"n": 1})
        await found.aclose()
        with pytest.raises(DrainpipeError) as caught:
            await PostgrestBackend.detect(BASE, SERVICE_KEY, fallback=False)
        assert caught.value.code == "SCHEMA_NOT_EXPOSED"
    assert [fn for fn, _ in server.calls()] == ["api_info_v1", "send", "api_info_v1"]

    async with postgrest_emulation(db_url):
        chosen = await PostgrestBackend.detect(BASE, SERVICE_KEY)
        assert isinstance(chosen, PostgrestBackend)
        info = await chosen.check()
        assert info["api"] == 1 and info["jobs"] == {"backend": "pgmq", "scheduler": "drain"}
        await chosen.aclose()


async def test_a_raised_exception_a_missing_function_and_a_wrong_key(
    backend: PostgrestBackend, jobs_db_url: str, server: PostgrestEmulation
) -> None:
    # drainpipe's SQL refusing a value (22023): PostgREST's 400 with the SQLSTATE as code
    with pytest.raises(DrainpipeError) as caught:
        await backend.rpc("schedule_v1", {"name": "x", "cron": "nope", "queue": "reports"})
    assert (caught.value.kind, caught.value.code) == ("invalid_input", "22023")
    assert caught.value.message.startswith("drainpipe_api.schedule_v1: Invalid schedule nope")

    # a plain RAISE EXCEPTION (P0001), with its detail and hint, as PostgREST shapes it
    async with await connect(jobs_db_url) as c:
        await c.execute(
            """CREATE FUNCTION drainpipe_api.boom_v1(reason text) RETURNS void
               LANGUAGE plpgsql AS $$ BEGIN
                   RAISE EXCEPTION 'boom: %', reason USING DETAIL = 'the detail', HINT = 'a hint';
               END $$;
               GRANT EXECUTE ON FUNCTION drainpipe_api.boom_v1(text) TO service_role"""
        )
    with pytest.raises(DrainpipeError) as caught:
        await backend.rpc("boom_v1", {"reason": "why"})
    assert (caught.value.kind, caught.value.code) == ("raised", "P0001")
    assert caught.value.message == ("drainpipe_api.boom_v1: boom: why (the detail) (hint: a hint)")
    assert server.requests[-1].url.path == "/rest/v1/rpc/boom_v1"

    with pytest.raises(DrainpipeError) as caught:
        await backend.rpc("no_such_function_v1", {"queue": "emails"})
    assert caught.value.code == "NOT_INSTALLED" and "rest-api" in caught.value.message

    with pytest.raises(DrainpipeError) as caught:
        await backend.rpc("claim_v1", {"queue": "emails", "unknown": 1})
    assert caught.value.code == "NOT_INSTALLED"  # PGRST202: no function takes those names

    async with PostgrestBackend(BASE, ANON_KEY) as anon:
        with pytest.raises(DrainpipeError) as caught:
            await anon.read("emails", lease=30, batch=1)
    assert caught.value.kind == "forbidden"
    async with PostgrestBackend(BASE, "wrong") as wrong:
        with pytest.raises(DrainpipeError) as caught:
            await wrong.read("emails", lease=30, batch=1)
    assert (caught.value.kind, caught.value.code) == ("unauthorized", "PGRST301")


async def test_the_module_missing_is_not_installed(jobs_db_url: str) -> None:
    async with postgrest_emulation(jobs_db_url), PostgrestBackend(BASE, SERVICE_KEY) as backend:
        async with await connect(jobs_db_url) as c:
            await c.execute("DELETE FROM drainpipe.modules WHERE name = 'jobs'")
        with pytest.raises(DrainpipeError) as no_jobs:
            await backend.check()  # the API is there, the jobs module it wraps is not
        async with await connect(jobs_db_url) as c:
            await c.execute("DROP SCHEMA drainpipe_api CASCADE")
        with pytest.raises(DrainpipeError) as caught:
            await backend.check()
    assert (no_jobs.value.kind, no_jobs.value.code) == ("unexpected", "NOT_INSTALLED")
    assert "the jobs module is not installed" in no_jobs.value.message
    assert (caught.value.kind, caught.value.code) == ("unexpected", "NOT_INSTALLED")
    assert "drainpipe sql apply --modules rest-api" in caught.value.message


@pytest.mark.parametrize(
    ("answer", "kind"),
    [
        (httpx.Response(503, text="upstream connect error"), "network"),
        (httpx.Response(504, text="gateway timeout"), "timeout"),
        (httpx.Response(200, text="<html>maintenance</html>"), "unexpected"),
        (httpx.Response(200, json={"code": "57014", "message": "canceling statement"}), "timeout"),
        (httpx.Response(200, json="yes"), "unexpected"),
        (httpx.ConnectError("connection refused"), "network"),
        (httpx.ReadTimeout("read timed out"), "timeout"),
    ],
)
async def test_http_failures_and_odd_answers_get_kinds(answer: Any, kind: str) -> None:
    with respx.mock() as router:
        router.post(f"{BASE}/rest/v1/rpc/complete_v1").mock(side_effect=[answer])
        async with PostgrestBackend(BASE, SERVICE_KEY) as made:
            with pytest.raises(DrainpipeError) as caught:
                await made.complete(_job())
    assert caught.value.kind == kind
    assert str(caught.value).startswith("drainpipe_api.complete_v1: ")


def _job() -> Any:
    from drainpipe.models import Job, JobContext

    now = datetime.now(UTC)
    return Job(
        id=1, queue="emails", payload=1, context=JobContext(), attempts=1, max_attempts=5,
        enqueued_at=now, visible_until=now, last_error=None,
    )  # fmt: skip


async def test_api_roles_cannot_call_the_api_directly(jobs_db_url: str) -> None:
    async with await connect(jobs_db_url) as c:
        for role in ("anon", "authenticated"):
            await c.execute(f"SET ROLE {role}")
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                await c.execute("SELECT drainpipe_api.claim_v1('emails')")
            await c.execute("RESET ROLE")
        rows = await (
            await c.execute(
                "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
                " WHERE n.nspname = 'drainpipe_api' AND NOT p.prosecdef"
            )
        ).fetchall()
        overloaded = await (
            await c.execute(
                "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
                " WHERE n.nspname = 'drainpipe_api' GROUP BY p.proname HAVING count(*) > 1"
            )
        ).fetchall()
    assert rows == []  # every function runs as its owner
    assert overloaded == []  # PostgREST picks by argument names: one function per name


@pytest.mark.parametrize("exposed", [("public",), EXPOSED])
async def test_a_drain_route_that_cannot_work_over_postgrest_answers_503(
    jobs_db_url: str, exposed: tuple[str, ...]
) -> None:
    # not exposed, or exposed without the rest-api module: the deployment is not ready, so a
    # cron caller sees a 503 Problem saying what to do, never a 200 report
    if exposed == EXPOSED:
        async with await connect(jobs_db_url) as c:
            await c.execute("DROP SCHEMA drainpipe_api CASCADE")
    async with (
        postgrest_emulation(jobs_db_url, exposed=exposed),
        PostgrestBackend(BASE, SERVICE_KEY) as backend,
    ):
        route = Jobs(backend, QUEUES).drain_route(
            secret="s3cret-0123456789abcdef0123456789abcdef", handlers={"emails": _noop}
        )
        transport = httpx.ASGITransport(app=route)
        async with httpx.AsyncClient(transport=transport, base_url="http://route") as client:
            with respx.mock(assert_all_called=False) as local:
                local.route(host="route").pass_through()
                response = await client.post(
                    "/", headers={"Authorization": "Bearer s3cret-0123456789abcdef0123456789abcdef"}
                )
    assert response.status_code == 503, response.text
    problem = response.json()
    assert problem["more"] is False
    if exposed == EXPOSED:
        assert problem["code"] == "NOT_INSTALLED" and "rest-api" in problem["detail"]
    else:
        assert problem["code"] == "SCHEMA_NOT_EXPOSED" and "Exposed schemas" in problem["detail"]


async def _noop(payload: Any, job: Any) -> None:
    return None


async def test_the_https_only_example_drains_over_postgrest(
    jobs: Jobs, server: PostgrestEmulation, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    from tests.conftest import ROOT

    spec = importlib.util.spec_from_file_location(
        "postgrest_example", ROOT / "examples/postgrest/drain.py"
    )
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    await jobs.enqueue("emails", {"to": "a@example.com", "subject": "hi"})

    async def call() -> httpx.Response:
        transport = httpx.ASGITransport(app=example.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://fn") as client:
            with respx.mock(assert_all_called=False) as local:
                local.route(host="fn").pass_through()
                return await client.get(
                    "/", headers={"Authorization": "Bearer s3cret-0123456789abcdef0123456789abcdef"}
                )

    monkeypatch.delenv("SUPABASE_URL", raising=False)
    unconfigured = await call()
    assert unconfigured.status_code == 503
    assert unconfigured.json()["code"] == "NOT_CONFIGURED"
    assert "SUPABASE_URL" in unconfigured.json()["detail"]

    monkeypatch.setenv("SUPABASE_URL", BASE)
    monkeypatch.setenv("SUPABASE_SERVICE_ROLE_KEY", SERVICE_KEY)
    monkeypatch.setenv("CRON_SECRET", "s3cret-0123456789abcdef0123456789abcdef")
    response = await call()
    assert response.status_code == 200, response.text
    assert response.json()["queues"]["emails"] == {"succeeded": 1, "failed": 0}
    await example.app.aclose()
    # the next minute's call, after a cold start (aclose: the next request builds again)
    await jobs.enqueue("emails", {"to": "b@example.com", "subject": "again"})
    response = await call()
    assert response.status_code == 200, response.text
    assert response.json()["queues"]["emails"] == {"succeeded": 1, "failed": 0}
    await example.app.aclose()
