"""The drain route under a real uvicorn server on loopback, called with httpx."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

import drainpipe
from drainpipe.db import Database
from drainpipe.dev.server import start_server
from drainpipe.jobs.drain_route import DrainRoute, MonitorRequest
from tests.conftest import connect

SECRET = "s3cret-token-0123456789abcdef0123456789abcdef"
AUTH = {"Authorization": f"Bearer {SECRET}"}
CLOSED_PORT_DSN = "postgresql://postgres@127.0.0.1:1/nowhere?connect_timeout=2"


class Email(BaseModel):
    to: str


class Sms(BaseModel):
    number: str


@asynccontextmanager
async def serve(app: Any) -> AsyncIterator[httpx.AsyncClient]:
    """``app`` on a free loopback port with uvicorn; a client whose base URL points at it."""
    server = await start_server(app)
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            yield client
    finally:
        await server.stop()


@pytest.fixture
async def jobs(db_url: str) -> AsyncIterator[drainpipe.Jobs]:
    jobs = drainpipe.Jobs(db_url, {"emails": Email, "sms": Sms})
    yield jobs
    await jobs.backend.db.close()  # type: ignore[attr-defined]


class Recorder:
    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []
        self.errors: list[tuple[BaseException, Any]] = []

    def handler(self, queue: str, *, fail_on: str | None = None, sleep: float = 0.0) -> Any:
        async def handle(payload: Any, job: drainpipe.Job[Any]) -> None:
            self.seen.append((queue, payload))
            if sleep:
                await asyncio.sleep(sleep)
            if fail_on is not None and getattr(payload, "to", None) == fail_on:
                raise RuntimeError(f"cannot send to {fail_on}")

        return handle

    def on_error(self, error: BaseException, job: Any) -> None:
        self.errors.append((error, job))


# -- construction ------------------------------------------------------------------------


def test_construction_rejects_a_missing_secret_and_undeclared_queues() -> None:
    jobs = drainpipe.Jobs(CLOSED_PORT_DSN, {"emails": Email})
    rec = Recorder()
    for secret in (None, ""):
        with pytest.raises(ValueError, match="needs a secret"):
            jobs.drain_route(secret=secret, handlers={"emails": rec.handler("emails")})
    with pytest.raises(ValueError, match=r'Unknown queue "sms"\. Queues: emails'):
        jobs.drain_route(secret=SECRET, handlers={"sms": rec.handler("sms")})
    with pytest.raises(ValueError, match="budget"):
        jobs.drain_route(secret=SECRET, handlers={}, budget=-1)
    with pytest.raises(ValueError, match="batch"):
        jobs.drain_route(secret=SECRET, handlers={}, batch=0)
    assert isinstance(jobs.drain_route(secret=SECRET, handlers={}), DrainRoute)


# -- method and authorization: no database, no monitor -----------------------------------


async def test_unauthorized_and_wrong_methods_never_touch_the_database() -> None:
    # the database does not exist: any call to it would fail slowly (and not with 401)
    jobs = drainpipe.Jobs(CLOSED_PORT_DSN, {"emails": Email})
    started: list[Any] = []

    class Monitor:
        def on_start(self, request: Any) -> None:
            started.append(request)

    route = jobs.drain_route(
        secret=SECRET, handlers={"emails": Recorder().handler("emails")}, monitor=Monitor()
    )
    async with serve(route) as client:
        began = time.monotonic()
        for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": SECRET + "x"}):
            response = await client.get("/api/drain", headers=headers)
            assert response.status_code == 401
            assert response.headers["content-type"] == "application/problem+json"
            assert response.headers["www-authenticate"].startswith("Bearer")
            body = response.json()
            assert body["kind"] == "unauthorized" and body["status"] == 401
            assert body["instance"] == "/api/drain"
            assert body["detail"] == "The drain route needs its bearer secret"
        for method in ("PUT", "DELETE", "PATCH", "HEAD"):
            response = await client.request(method, "/api/drain", headers=AUTH)
            assert response.status_code == 405
            assert response.headers["allow"] == "GET, POST"
        assert time.monotonic() - began < 1.0
    assert started == []


async def test_bearer_prefix_is_optional_and_case_insensitive() -> None:
    jobs = drainpipe.Jobs(CLOSED_PORT_DSN, {"emails": Email})
    # no handlers and no schedules: an authorized call needs no database either
    route = jobs.drain_route(secret=SECRET, handlers={}, schedules=False)
    async with serve(route) as client:
        for value in (SECRET, f"Bearer {SECRET}", f"bearer {SECRET}", f"BEARER  {SECRET}"):
            response = await client.post("/", headers={"Authorization": value})
            assert response.status_code == 200, value
            assert response.json() == {
                "schedules": 0,
                "queues": {},
                "budgetExhausted": False,
                "errors": 0,
                "more": False,
            }
    assert route.authorized(f"Bearer {SECRET}") and not route.authorized(f"Basic {SECRET}")


async def test_problem_formatter_rewrites_the_401_body() -> None:
    jobs = drainpipe.Jobs(CLOSED_PORT_DSN, {"emails": Email})

    def problem(body: dict[str, Any], error: drainpipe.DrainpipeError) -> dict[str, Any]:
        return {"error": error.kind}

    route = jobs.drain_route(secret=SECRET, handlers={}, problem=problem)
    async with serve(route) as client:
        response = await client.get("/")
    assert response.status_code == 401 and response.json() == {"error": "unauthorized"}
    assert "www-authenticate" in response.headers


# -- draining --------------------------------------------------------------------------------


async def test_report_counts_match_what_the_handlers_saw(jobs: drainpipe.Jobs) -> None:
    rec = Recorder()
    await jobs.enqueue_many("emails", [{"to": "a@x"}, {"to": "bad@x"}, {"to": "c@x"}])
    await jobs.enqueue_many("sms", [{"number": "1"}, {"number": "2"}])
    route = jobs.drain_route(
        secret=SECRET,
        handlers={"emails": rec.handler("emails", fail_on="bad@x"), "sms": rec.handler("sms")},
        on_error=rec.on_error,
        batch=2,
    )
    async with serve(route) as client:
        response = await client.get("/api/drain", headers=AUTH)
        assert response.status_code == 200
        assert response.json() == {
            "schedules": 0,
            "queues": {
                "emails": {"succeeded": 2, "failed": 1},
                "sms": {"succeeded": 2, "failed": 0},
            },
            "budgetExhausted": False,
            "errors": 0,
            "more": False,
        }
        assert [q for q, _ in rec.seen] == ["emails"] * 3 + ["sms"] * 2
        assert sorted(p.to for q, p in rec.seen if q == "emails") == ["a@x", "bad@x", "c@x"]
        # the handler's failure went to on_error with its job, not into "errors"
        [(error, job)] = rec.errors
        # on_error sees the job as its handler saw it: with the validated payload
        assert isinstance(error, RuntimeError) and job.payload.to == "bad@x"
        stats = await jobs.stats()
        assert (stats["emails"].ready, stats["emails"].in_flight) == (0, 1)  # in its backoff
        assert stats["sms"].ready == 0
        # a second call finds nothing: the same jobs are never handled twice
        again = (await client.post("/api/drain", headers=AUTH)).json()
        assert again["queues"] == {
            "emails": {"succeeded": 0, "failed": 0},
            "sms": {"succeeded": 0, "failed": 0},
        }
        assert len(rec.seen) == 5


async def test_budget_zero_claims_nothing_and_says_more(jobs: drainpipe.Jobs) -> None:
    rec = Recorder()
    await jobs.enqueue("emails", {"to": "a@x"})
    route = jobs.drain_route(secret=SECRET, handlers={"emails": rec.handler("emails")}, budget=0)
    async with serve(route) as client:
        report = (await client.get("/", headers=AUTH)).json()
    assert report == {
        "schedules": 0,
        "queues": {},
        "budgetExhausted": True,
        "errors": 0,
        "more": True,
    }
    assert rec.seen == []
    [job] = await jobs.claim("emails")
    assert job.attempts == 1  # never claimed before


async def test_a_short_budget_stops_between_jobs_and_reports_more(jobs: drainpipe.Jobs) -> None:
    rec = Recorder()
    await jobs.enqueue_many("emails", [{"to": f"{i}@x"} for i in range(3)])
    await jobs.enqueue("sms", {"number": "1"})
    route = jobs.drain_route(
        secret=SECRET,
        handlers={"emails": rec.handler("emails", sleep=0.3), "sms": rec.handler("sms")},
        budget=0.1,
    )
    async with serve(route) as client:
        report = (await client.get("/", headers=AUTH)).json()
    # the claimed job finished; the deadline stopped the next claim; sms was not reached
    assert report["queues"] == {"emails": {"succeeded": 1, "failed": 0}}
    assert report["budgetExhausted"] is True and report["more"] is True
    assert report["errors"] == 0
    assert len(rec.seen) == 1
    stats = await jobs.stats()
    assert stats["emails"].ready == 2 and stats["sms"].ready == 1


async def test_a_handler_outliving_the_budget_keeps_its_lease(
    db_url: str, jobs: drainpipe.Jobs
) -> None:
    job_id = await jobs.enqueue("emails", {"to": "slow@x"})
    running = asyncio.Event()
    finished: list[int] = []

    async def slow(payload: Email, job: drainpipe.Job[Email]) -> None:
        running.set()
        await asyncio.sleep(3.5)
        finished.append(job.id)

    # budget 0.2 s, margin 1.5 s (a beat every 0.5 s, the lease 1.5 s ahead: a loaded
    # machine's stall does not lose it): the lease must be renewed past the deadline, twice
    # over, to survive
    route = jobs.drain_route(secret=SECRET, handlers={"emails": slow}, budget=0.2, lease_margin=1.5)
    rival = drainpipe.Jobs(db_url, {"emails": Email})
    watcher = await connect(db_url)
    checks: list[bool] = []
    stolen: list[Any] = []

    called: list[asyncio.Future[Any]] = []

    async def watch() -> None:
        await running.wait()
        # until the handler finishes, or the call returns without it (a lost lease)
        while not finished and not called[0].done():
            row = await (
                await watcher.execute(
                    "SELECT vt > clock_timestamp() FROM pgmq.q_emails WHERE msg_id = %s", (job_id,)
                )
            ).fetchone()
            if row is not None:
                checks.append(bool(row[0]))
            stolen.extend(await rival.claim("emails", lease=30))
            await asyncio.sleep(0.1)

    try:
        async with serve(route) as client:
            called.append(asyncio.ensure_future(client.get("/", headers=AUTH)))
            await watch()
            response = await called[0]
    finally:
        await watcher.close()
        await rival.backend.db.close()  # type: ignore[attr-defined]
    report = response.json()
    assert finished == [job_id]
    assert report["queues"] == {"emails": {"succeeded": 1, "failed": 0}}
    assert report["budgetExhausted"] is True and report["more"] is False
    assert len(checks) >= 8 and all(checks), checks
    assert stolen == []
    assert (await jobs.stats())["emails"].in_flight == 0


async def test_leases_cover_the_rest_of_the_budget_plus_a_margin(jobs: drainpipe.Jobs) -> None:
    await jobs.enqueue("emails", {"to": "a@x"})
    await jobs.enqueue("sms", {"number": "1"})
    left: dict[str, float] = {}

    async def handle(payload: Any, job: drainpipe.Job[Any]) -> None:
        left[job.queue] = (job.visible_until - drainpipe_now()).total_seconds()

    route = jobs.drain_route(
        secret=SECRET, handlers={"emails": handle, "sms": handle}, budget=20, lease=5
    )
    async with serve(route) as client:
        assert (await client.get("/", headers=AUTH)).status_code == 200
    # 20 s budget + 30 s margin wins over the 5 s lease option
    assert 45 < left["emails"] <= 50.5 and 45 < left["sms"] <= 50.5


def drainpipe_now() -> Any:
    from datetime import UTC, datetime

    return datetime.now(UTC)


# -- errors and monitors ---------------------------------------------------------------------


async def test_a_queue_whose_claim_fails_counts_one_error(conn: Any, jobs: drainpipe.Jobs) -> None:
    rec = Recorder()
    await jobs.enqueue("emails", {"to": "a@x"})
    await jobs.enqueue("sms", {"number": "1"})
    # break the emails queue's storage: its claim now fails with a non-transient error
    await conn.execute("ALTER TABLE pgmq.q_emails RENAME COLUMN vt TO vt_broken")
    route = jobs.drain_route(
        secret=SECRET,
        handlers={"emails": rec.handler("emails"), "sms": rec.handler("sms")},
        on_error=rec.on_error,
    )
    async with serve(route) as client:
        response = await client.get("/", headers=AUTH)
    assert response.status_code == 200
    report = response.json()
    assert report["errors"] == 1
    assert report["queues"] == {
        "emails": {"succeeded": 0, "failed": 0},
        "sms": {"succeeded": 1, "failed": 0},
    }
    [(error, job)] = rec.errors
    assert isinstance(error, drainpipe.DrainpipeError) and job is None
    assert [q for q, _ in rec.seen] == ["sms"]


async def test_monitor_hooks_that_raise_go_to_on_error_only(jobs: drainpipe.Jobs) -> None:
    rec = Recorder()
    await jobs.enqueue("emails", {"to": "a@x"})

    class Broken:
        def on_start(self, request: Any) -> None:
            raise RuntimeError("start hook broke")

        async def on_finish(self, result: Any, token: Any) -> None:
            raise RuntimeError("finish hook broke")

    route = jobs.drain_route(
        secret=SECRET,
        handlers={"emails": rec.handler("emails")},
        monitor=Broken(),
        on_error=rec.on_error,
    )
    async with serve(route) as client:
        response = await client.get("/", headers=AUTH)
    assert response.status_code == 200
    report = response.json()
    assert report["errors"] == 0
    assert report["queues"] == {"emails": {"succeeded": 1, "failed": 0}}
    assert [(str(e), j) for e, j in rec.errors] == [
        ("start hook broke", None),
        ("finish hook broke", None),
    ]


async def test_monitor_gets_the_request_then_the_result_and_its_token(
    jobs: drainpipe.Jobs,
) -> None:
    calls: list[tuple[str, Any]] = []

    class Monitor:
        async def on_start(self, request: Any) -> str:
            calls.append(("start", request.headers["x-run"]))
            return "token-1"

        def on_finish(self, result: dict[str, Any], token: Any) -> None:
            calls.append(("finish", (result["queues"], token)))

    route = jobs.drain_route(
        secret=SECRET, handlers={"emails": Recorder().handler("emails")}, monitor=Monitor()
    )
    async with serve(route) as client:
        await client.get("/", headers={**AUTH, "X-Run": "42"})
    assert calls == [
        ("start", "42"),
        ("finish", ({"emails": {"succeeded": 0, "failed": 0}}, "token-1")),
    ]


async def test_schedules_run_first_and_their_failure_counts_one_error(db_url: str) -> None:
    if not hasattr(drainpipe.Jobs, "run_schedules"):
        pytest.skip("schedules are not built yet")
    rec = Recorder()

    class FailingSchedules(drainpipe.Jobs):
        async def run_schedules(self, *, lease: float = 60, batch: int = 100) -> int:
            raise drainpipe.DrainpipeError("timeout", "schedules timed out")

    jobs = FailingSchedules(db_url, {"emails": Email})
    await jobs.enqueue("emails", {"to": "a@x"})
    route = jobs.drain_route(
        secret=SECRET, handlers={"emails": rec.handler("emails")}, on_error=rec.on_error
    )
    try:
        async with serve(route) as client:
            report = (await client.get("/", headers=AUTH)).json()
    finally:
        await jobs.backend.db.close()  # type: ignore[attr-defined]
    assert report["schedules"] == 0 and report["errors"] == 1
    assert report["queues"] == {"emails": {"succeeded": 1, "failed": 0}}
    [(error, job)] = rec.errors
    assert str(error) == "schedules timed out" and job is None


async def test_due_schedules_are_enqueued_then_drained_in_the_same_call(
    conn: Any, jobs: drainpipe.Jobs
) -> None:
    if not hasattr(drainpipe.Jobs, "run_schedules"):
        pytest.skip("schedules are not built yet")
    rec = Recorder()
    await jobs.schedule("hourly-digest", "@hourly", "emails", {"to": "digest@x"})
    # make it due now (the next run of @hourly is up to an hour away)
    await conn.execute("UPDATE drainpipe.job_schedules SET next_run = now() - interval '1 second'")
    route = jobs.drain_route(secret=SECRET, handlers={"emails": rec.handler("emails")})
    async with serve(route) as client:
        report = (await client.get("/", headers=AUTH)).json()
    assert report["schedules"] == 1
    assert report["queues"] == {"emails": {"succeeded": 1, "failed": 0}}
    assert [p.to for _, p in rec.seen] == ["digest@x"]


async def test_an_empty_drain_costs_one_round_trip_per_queue_plus_schedules(db_url: str) -> None:
    database = Database(db_url)
    statements: list[str] = []
    original = database.connection

    def counting() -> Any:
        statements.append("borrow")
        return original()

    database.connection = counting  # type: ignore[method-assign]
    jobs = drainpipe.Jobs(database, {"emails": Email, "sms": Sms})
    route = jobs.drain_route(
        secret=SECRET,
        handlers={"emails": Recorder().handler("emails"), "sms": Recorder().handler("sms")},
    )
    try:
        async with serve(route) as client:
            report = (await client.get("/", headers=AUTH)).json()
    finally:
        await database.close()
    assert report["queues"] == {
        "emails": {"succeeded": 0, "failed": 0},
        "sms": {"succeeded": 0, "failed": 0},
    }
    schedules = 1 if hasattr(drainpipe.Jobs, "run_schedules") else 0
    assert len(statements) <= 2 + schedules


async def test_handle_takes_a_starlette_request(jobs: drainpipe.Jobs) -> None:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    rec = Recorder()
    await jobs.enqueue("emails", {"to": "a@x"})
    route = jobs.drain_route(secret=SECRET, handlers={"emails": rec.handler("emails")})

    async def endpoint(request: Request) -> Response:
        response: Response = await route.handle(request)
        return response

    app = Starlette(routes=[Route("/cron/drain", endpoint, methods=["GET", "POST", "PUT"])])
    async with serve(app) as client:
        assert (await client.put("/cron/drain", headers=AUTH)).status_code == 405
        denied = await client.get("/cron/drain")
        assert denied.status_code == 401 and denied.json()["instance"] == "/cron/drain"
        report = (await client.get("/cron/drain", headers=AUTH)).json()
    assert report["queues"] == {"emails": {"succeeded": 1, "failed": 0}}


async def test_webhook_inboxes_are_processed_after_the_queues(
    db_url: str, jobs: drainpipe.Jobs
) -> None:
    inbox = drainpipe.WebhookInbox(db_url, source="billing")
    order: list[str] = []

    async def on_message(message: Any) -> None:
        order.append(f"inbox:{message.message_id}")

    async def on_email(payload: Email, job: drainpipe.Job[Email]) -> None:
        order.append(f"email:{payload.to}")

    await inbox.store(id="evt_1", payload={"amount": 5}, type="invoice.paid")
    await jobs.enqueue("emails", {"to": "a@x"})
    route = jobs.drain_route(
        secret=SECRET, handlers={"emails": on_email}, inboxes=[(inbox, on_message)]
    )
    try:
        async with serve(route) as client:
            report = (await client.get("/", headers=AUTH)).json()
    finally:
        await inbox.close()
    assert order == ["email:a@x", "inbox:evt_1"]
    assert report["inboxes"] == {"billing": {"succeeded": 1, "failed": 0}}
    assert report["errors"] == 0 and report["more"] is False
    with pytest.raises(ValueError, match="listed twice"):
        jobs.drain_route(secret=SECRET, handlers={}, inboxes=[(inbox, on_message)] * 2)


# -- a fair drain ------------------------------------------------------------------------------


async def test_a_backlog_in_one_queue_does_not_starve_the_webhook_inbox(
    db_url: str, jobs: drainpipe.Jobs
) -> None:
    inbox = drainpipe.WebhookInbox(db_url, source="billing")
    await jobs.enqueue_many("emails", [{"to": f"{n}@x"} for n in range(10_000)])  # one trip
    await inbox.store(id="evt_paid", payload={"amount": 5}, type="invoice.paid")
    handled: list[str] = []

    async def on_message(message: Any) -> None:
        handled.append(message.message_id)

    route = jobs.drain_route(
        secret=SECRET,
        handlers={"emails": Recorder().handler("emails"), "sms": Recorder().handler("sms")},
        inboxes=[(inbox, on_message)],
        budget=1.5,
    )
    try:
        async with serve(route) as client:
            started = time.monotonic()
            response = await client.get("/", headers=AUTH)
            took = time.monotonic() - started
    finally:
        await inbox.close()
    report = response.json()
    assert response.status_code == 200, report
    assert handled == ["evt_paid"]
    assert report["inboxes"] == {"billing": {"succeeded": 1, "failed": 0}}
    emails = report["queues"]["emails"]["succeeded"]
    assert 0 < emails < 10_000
    assert report["queues"]["sms"] == {"succeeded": 0, "failed": 0}
    assert report["more"] is True and report["budgetExhausted"] is True
    assert report["errors"] == 0
    assert took < 5
    stats = (await jobs.stats(["emails"]))["emails"]
    assert stats.ready == 10_000 - emails


async def test_time_a_source_leaves_unused_goes_back_to_the_one_with_a_backlog(
    jobs: drainpipe.Jobs,
) -> None:
    rec = Recorder()
    await jobs.enqueue_many("emails", [{"to": f"{n}@x"} for n in range(100)])
    await jobs.enqueue("sms", {"number": "1"})
    # each email takes 20 ms: 100 of them outlast the 0.6 s budget; sms needs one claim
    route = jobs.drain_route(
        secret=SECRET,
        handlers={"emails": rec.handler("emails", sleep=0.02), "sms": rec.handler("sms")},
        budget=0.6,
    )
    started = time.monotonic()
    report = await route.run()
    took = time.monotonic() - started
    assert report["queues"]["sms"] == {"succeeded": 1, "failed": 0}
    # emails' first share was half the budget; sms finished at once, so emails went on in
    # a second round until the whole budget was spent (without that: about 0.3 s)
    assert took >= 0.55, took
    assert [q for q, _ in rec.seen].index("sms") < len(rec.seen) - 1  # emails ran after sms
    assert report["more"] is True


# -- a drain that could not work is not a 200 -----------------------------------------------------


async def _pool(dsn: str, wait: float) -> Any:
    from psycopg_pool import AsyncConnectionPool

    pool = AsyncConnectionPool(dsn, min_size=1, max_size=2, timeout=wait, open=False)
    await pool.open(wait=False)
    return pool


async def test_an_unreachable_database_is_a_503_network_answered_fast(
    server_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    from tests.conftest import with_database

    # a database that does not exist, and a port nobody listens on; the connection gives
    # up after 1 s (db.py's own connect timeout is another concern: here the route must
    # not add claim-retry waits on top). Through a pool of ours and through a DSN.
    missing = with_database(server_dsn, "dp_no_such_database")
    for schedules, dsn, own_pool in (
        (True, missing, True),
        (False, missing, True),
        (False, missing, False),
        (True, CLOSED_PORT_DSN, False),
    ):
        pool = await _pool(dsn, wait=1.0) if own_pool else Database(dsn, timeout=1.0)
        jobs = drainpipe.Jobs(pool, {"emails": Email})
        rec = Recorder()
        route = jobs.drain_route(
            secret=SECRET,
            handlers={"emails": rec.handler("emails")},
            schedules=schedules,
            on_error=rec.on_error,
        )
        caplog.clear()
        try:
            async with serve(route) as client:
                started = time.monotonic()
                response = await client.get("/api/drain", headers=AUTH)
                took = time.monotonic() - started
        finally:
            await pool.close()
        assert took < 3, took
        assert response.status_code == 503
        assert response.headers["content-type"] == "application/problem+json"
        body = response.json()
        assert (body["kind"], body["status"], body["more"]) == ("network", 503, False)
        assert body["instance"] == "/api/drain"
        assert "could not reach its database" in body["detail"]
        [record] = [r for r in caplog.records if "cannot work" in r.getMessage()]
        assert record.name == "drainpipe.drain" and record.levelno == logging.ERROR
        assert "cannot be reached" in record.getMessage()
        [(error, job)] = rec.errors
        assert isinstance(error, drainpipe.DrainpipeError)
        assert error.kind == "network" and job is None


@pytest.fixture
def bare_db_url(server_dsn: str) -> Any:
    """A database on the test server where drainpipe's SQL was never applied."""
    import uuid

    import psycopg

    from tests.conftest import drop_database, with_database

    name = "t_bare_" + uuid.uuid4().hex[:12]
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield with_database(server_dsn, name)
    drop_database(server_dsn, name)


async def test_a_database_without_drainpipe_sql_is_a_503_not_installed(
    bare_db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    for schedules in (True, False):
        jobs = drainpipe.Jobs(bare_db_url, {"emails": Email})
        route = jobs.drain_route(
            secret=SECRET, handlers={"emails": Recorder().handler("emails")}, schedules=schedules
        )
        caplog.clear()
        try:
            async with serve(route) as client:
                started = time.monotonic()
                response = await client.get("/", headers=AUTH)
                took = time.monotonic() - started
        finally:
            await jobs.backend.db.close()  # type: ignore[attr-defined]
        assert took < 3, took
        assert response.status_code == 503
        body = response.json()
        assert (body["code"], body["status"], body["more"]) == ("NOT_INSTALLED", 503, False)
        assert "drainpipe sql apply" in body["detail"] and "drainpipe sql apply" in body["hint"]
        assert body["title"] == "drainpipe's SQL is not installed"
        [record] = [r for r in caplog.records if "cannot work" in r.getMessage()]
        assert record.name == "drainpipe.drain" and record.levelno == logging.ERROR
        assert "does not exist" in record.getMessage()


async def test_a_missing_inbox_module_is_a_503_after_the_queues_ran(
    conn: Any, db_url: str, jobs: drainpipe.Jobs
) -> None:
    inbox = drainpipe.WebhookInbox(db_url, source="billing")
    await inbox.store(id="evt_1", payload={})
    await jobs.enqueue("emails", {"to": "a@x"})
    await conn.execute("DROP FUNCTION drainpipe.claim_webhooks_v1")  # the module half-applied
    rec = Recorder()
    finished: list[Any] = []

    class Monitor:
        def on_finish(self, result: Any, token: Any) -> None:
            finished.append(result)

    route = jobs.drain_route(
        secret=SECRET,
        handlers={"emails": rec.handler("emails")},
        inboxes=[(inbox, lambda message: None)],
        monitor=Monitor(),
    )
    try:
        async with serve(route) as client:
            response = await client.get("/", headers=AUTH)
    finally:
        await inbox.close()
    assert response.status_code == 503
    assert response.json()["code"] == "NOT_INSTALLED"
    assert [q for q, _ in rec.seen] == ["emails"]  # the working queue still ran
    [body] = finished
    assert (body["code"], body["more"]) == ("NOT_INSTALLED", False)


async def test_one_failing_inbox_with_a_reachable_database_stays_a_200(
    conn: Any, db_url: str, jobs: drainpipe.Jobs, caplog: pytest.LogCaptureFixture
) -> None:
    inbox = drainpipe.WebhookInbox(db_url, source="billing")
    await inbox.store(id="evt_1", payload={})
    await jobs.enqueue("emails", {"to": "a@x"})
    # a non-transient claim error of one source (a column gone), everything else fine
    await conn.execute("ALTER TABLE drainpipe.webhook_inbox RENAME COLUMN checkpoint TO cp")
    route = jobs.drain_route(
        secret=SECRET,
        handlers={"emails": Recorder().handler("emails")},
        inboxes=[(inbox, lambda message: None)],
    )
    try:
        with caplog.at_level(logging.ERROR, logger="drainpipe"):
            report = await route.run()
    finally:
        await inbox.close()
    assert report["errors"] == 1 and report["more"] is False
    assert report["queues"] == {"emails": {"succeeded": 1, "failed": 0}}
    assert report["inboxes"] == {"billing": {"succeeded": 0, "failed": 0}}
    # no on_error was given: the default logs it
    assert any("drain route failed" in r.getMessage() for r in caplog.records)


# -- the monitor hook's request -----------------------------------------------------------------


async def test_monitor_gets_the_callers_request_or_one_with_url_path_and_headers(
    jobs: drainpipe.Jobs,
) -> None:
    from starlette.applications import Starlette
    from starlette.requests import Request as StarletteRequest
    from starlette.responses import Response as StarletteResponse
    from starlette.routing import Route

    seen: list[Any] = []
    passed: list[Any] = []

    class Monitor:
        def on_start(self, request: Any) -> None:
            seen.append(request)

    route = jobs.drain_route(
        secret=SECRET, handlers={"emails": Recorder().handler("emails")}, monitor=Monitor()
    )

    async def endpoint(request: StarletteRequest) -> StarletteResponse:
        passed.append(request)
        response: StarletteResponse = await route.handle(request)
        return response

    app = Starlette(routes=[Route("/cron/drain", endpoint, methods=["GET"])])
    async with serve(app) as client:
        assert (await client.get("/cron/drain", headers=AUTH)).status_code == 200
    assert seen[0] is passed[0]  # the very object the caller passed to handle()

    async with serve(route) as client:  # as an ASGI app
        await client.get("/api/drain?run=7", headers={**AUTH, "X-Run": "42"})
    request = seen[1]
    assert isinstance(request, MonitorRequest)
    assert (request.method, request.url.path, request.url.query) == ("GET", "/api/drain", "run=7")
    assert request.headers["x-run"] == "42" and request.headers.get("X-RUN") == "42"
    assert request.scope["type"] == "http"


def test_a_single_secret_is_at_least_32_characters_and_tokens_at_least_16() -> None:
    # issue 36, 7: any non-empty secret was taken, and compared over its own length
    jobs = drainpipe.Jobs(CLOSED_PORT_DSN, {"emails": Email})
    with pytest.raises(ValueError, match="at least 32 characters"):
        jobs.drain_route(secret="x" * 31, handlers={})
    assert isinstance(jobs.drain_route(secret="x" * 32, handlers={}), DrainRoute)
    with pytest.raises(ValueError, match="at least 16 characters"):
        drainpipe.bearer_tokens({"y" * 15: drainpipe.Principal("short")})
