"""The pgmq_public backend over HTTP, with PostgREST faked by respx but the queue real.

``FakePostgrest`` answers ``POST {BASE}/rest/v1/rpc/<fn>`` the way PostgREST does: it checks
the key and the schema profile headers, runs ``pgmq_public.<fn>`` on the test database as
the role the key stands for, and answers with PostgREST's JSON (setof → array, scalar →
value, errors → ``{code, message, details, hint}`` with PostgREST's status).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import psycopg
import pytest
import respx
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from drainpipe import DrainpipeError, Jobs, Retry
from drainpipe.backends import resolve_backend
from drainpipe.backends.pgmq_public import PgmqPublicBackend
from tests.conftest import connect

BASE = "https://project.supabase.test"
SERVICE_KEY = "service-role-key"
ANON_KEY = "anon-key"
ROLE_BY_KEY = {SERVICE_KEY: "service_role", ANON_KEY: "anon"}

# Supabase's "Expose Queues via PostgREST" functions: same names and arguments, written
# here as thin wrappers over pgmq.
PGMQ_PUBLIC_SQL = """
CREATE SCHEMA IF NOT EXISTS pgmq_public;
GRANT USAGE ON SCHEMA pgmq_public TO anon, authenticated, service_role;

CREATE OR REPLACE FUNCTION pgmq_public.send(queue_name text, message jsonb, sleep_seconds integer DEFAULT 0)
RETURNS SETOF bigint LANGUAGE sql SET search_path = '' AS
$$ SELECT * FROM pgmq.send(queue_name := queue_name, msg := message, delay := sleep_seconds) $$;

CREATE OR REPLACE FUNCTION pgmq_public.send_batch(queue_name text, messages jsonb[], sleep_seconds integer DEFAULT 0)
RETURNS SETOF bigint LANGUAGE sql SET search_path = '' AS
$$ SELECT * FROM pgmq.send_batch(queue_name := queue_name, msgs := messages, delay := sleep_seconds) $$;

CREATE OR REPLACE FUNCTION pgmq_public.read(queue_name text, sleep_seconds integer, n integer)
RETURNS SETOF pgmq.message_record LANGUAGE sql SET search_path = '' AS
$$ SELECT * FROM pgmq.read(queue_name := queue_name, vt := sleep_seconds, qty := n) $$;

CREATE OR REPLACE FUNCTION pgmq_public.pop(queue_name text)
RETURNS SETOF pgmq.message_record LANGUAGE sql SET search_path = '' AS
$$ SELECT * FROM pgmq.pop(queue_name := queue_name) $$;

CREATE OR REPLACE FUNCTION pgmq_public.archive(queue_name text, message_id bigint)
RETURNS boolean LANGUAGE sql SET search_path = '' AS
$$ SELECT pgmq.archive(queue_name := queue_name, msg_id := message_id) $$;

CREATE OR REPLACE FUNCTION pgmq_public.delete(queue_name text, message_id bigint)
RETURNS boolean LANGUAGE sql SET search_path = '' AS
$$ SELECT pgmq.delete(queue_name := queue_name, msg_id := message_id) $$;

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA pgmq_public FROM PUBLIC, anon, authenticated;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA pgmq_public TO service_role;
GRANT USAGE ON SCHEMA pgmq TO service_role;
"""


def _postgrest_status(exc: psycopg.Error, role: str) -> int:
    """PostgREST's status for a SQLSTATE (the subset these tests can meet)."""
    state = exc.sqlstate or ""
    if state == "42501":
        return 401 if role == "anon" else 403
    if state in ("42883", "42P01"):
        return 404
    if state in ("23505", "23503"):
        return 409
    if state.startswith(("08", "53")):
        return 503
    if state.startswith(("25", "40", "57", "XX")):
        return 500
    return 400


def _error(
    status: int, code: str, message: str, details: Any = None, hint: Any = None
) -> httpx.Response:
    return httpx.Response(
        status, json={"code": code, "message": message, "details": details, "hint": hint}
    )


class FakePostgrest:
    """The RPC half of PostgREST, on the real pgmq_public functions."""

    def __init__(self, pool: AsyncConnectionPool[Any]) -> None:
        self.pool = pool
        self.requests: list[httpx.Request] = []

    def calls(self, fn: str | None = None) -> list[tuple[str, dict[str, Any]]]:
        made = [(r.url.path.rsplit("/", 1)[-1], json.loads(r.content)) for r in self.requests]
        return [call for call in made if fn is None or call[0] == fn]

    async def __call__(self, request: httpx.Request, fn: str) -> httpx.Response:
        self.requests.append(request)
        headers = request.headers
        key = headers.get("apikey")
        if key not in ROLE_BY_KEY or headers.get("authorization") != f"Bearer {key}":
            return _error(401, "PGRST301", "JWSError (CompactDecodeError Invalid number of parts)")
        for header in ("accept-profile", "content-profile"):
            if headers.get(header, "public") != "pgmq_public":
                return _error(
                    406, "PGRST106", "The schema must be one of the following: public, pgmq_public"
                )
        if headers.get("content-type") != "application/json":
            return _error(415, "PGRST102", "Content-Type not acceptable")
        role = ROLE_BY_KEY[key]
        args = json.loads(request.content or b"{}")
        async with self.pool.connection() as conn:
            signature = await (
                await conn.execute(
                    """SELECT p.proretset, p.proargnames,
                              array(SELECT format_type(t, NULL) FROM unnest(p.proargtypes) t),
                              p.pronargs - p.pronargdefaults
                         FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                        WHERE n.nspname = 'pgmq_public' AND p.proname = %s""",
                    (fn,),
                )
            ).fetchone()
            if (
                signature is None
                or not set(args) <= set(signature[1])
                or not set(signature[1][: signature[3]]) <= set(args)
            ):
                return _error(
                    404,
                    "PGRST202",
                    f"Could not find the function pgmq_public.{fn}({', '.join(sorted(args))}) in the schema cache",
                )
            returns_set, names, types, _ = signature
            given = [
                (name, type_) for name, type_ in zip(names, types, strict=True) if name in args
            ]
            # like PostgREST: named arguments taken from the JSON body by jsonb_to_record
            query = sql.SQL(
                "SELECT to_jsonb(r) FROM jsonb_to_record(%s::jsonb) AS x({columns}),"
                " LATERAL pgmq_public.{fn}({call}) r"
            ).format(
                columns=sql.SQL(", ").join(
                    sql.SQL("{} {}").format(sql.Identifier(n), sql.SQL(t)) for n, t in given
                ),
                fn=sql.Identifier(fn),
                call=sql.SQL(", ").join(
                    sql.SQL("{} := x.{}").format(sql.Identifier(n), sql.Identifier(n))
                    for n, _ in given
                ),
            )
            try:
                async with conn.transaction():
                    await conn.execute(sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(role)))
                    rows = await (await conn.execute(query, (json.dumps(args),))).fetchall()
            except psycopg.Error as exc:
                diag = exc.diag
                return _error(
                    _postgrest_status(exc, role),
                    exc.sqlstate or "XX000",
                    diag.message_primary or str(exc),
                    diag.message_detail,
                    diag.message_hint,
                )
        values = [row[0] for row in rows]
        body = values if returns_set else (values[0] if values else None)
        return httpx.Response(200, json=body)


async def setup_pgmq_public(url: str, queues: tuple[str, ...]) -> None:
    """Create the pgmq_public functions and the queues (as the dashboard would)."""
    conn = await connect(url)
    try:
        await conn.execute(PGMQ_PUBLIC_SQL)
        for queue in queues:
            await conn.execute("SELECT pgmq.create(%s)", (queue,))
        # what Supabase grants the service role on pgmq's tables
        await conn.execute("GRANT ALL ON ALL TABLES IN SCHEMA pgmq TO service_role")
        await conn.execute("GRANT ALL ON ALL SEQUENCES IN SCHEMA pgmq TO service_role")
    finally:
        await conn.close()


@asynccontextmanager
async def postgrest(
    url: str, queues: tuple[str, ...] = ("emails",)
) -> AsyncIterator[tuple[FakePostgrest, respx.MockRouter]]:
    """respx routes for ``{BASE}/rest/v1/rpc/<fn>`` served by a FakePostgrest on ``url``."""
    await setup_pgmq_public(url, queues)
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        url, min_size=1, max_size=4, kwargs={"autocommit": True}, open=False
    )
    await pool.open()
    fake = FakePostgrest(pool)
    try:
        with respx.mock(assert_all_called=False) as router:
            router.post(url__regex=rf"^{BASE}/rest/v1/rpc/(?P<fn>\w+)$").mock(side_effect=fake)
            yield fake, router
    finally:
        await pool.close()


@pytest.fixture
async def server(db_url: str) -> AsyncIterator[FakePostgrest]:
    async with postgrest(db_url) as (fake, _):
        yield fake


@pytest.fixture
async def backend(server: FakePostgrest) -> AsyncIterator[PgmqPublicBackend]:
    async with PgmqPublicBackend.from_url(BASE, SERVICE_KEY) as made:
        yield made


async def _rows(conn: psycopg.AsyncConnection[Any], table: str) -> list[tuple[Any, ...]]:
    cursor = await conn.execute(
        sql.SQL("SELECT msg_id, read_ct, message FROM pgmq.{} ORDER BY msg_id").format(
            sql.Identifier(table)
        )
    )
    return await cursor.fetchall()


# -- HTTP shape -------------------------------------------------------------------------


async def test_requests_have_postgrest_shape(
    backend: PgmqPublicBackend, server: FakePostgrest, conn: psycopg.AsyncConnection[Any]
) -> None:
    job_id = await backend.send("emails", {"to": "a@example.com"}, delay=1.2, max_attempts=4)
    request = server.requests[-1]
    assert request.method == "POST"
    assert str(request.url) == f"{BASE}/rest/v1/rpc/send"
    assert request.headers["apikey"] == SERVICE_KEY
    assert request.headers["authorization"] == f"Bearer {SERVICE_KEY}"
    assert request.headers["accept-profile"] == "pgmq_public"
    assert request.headers["content-profile"] == "pgmq_public"
    assert json.loads(request.content) == {
        "queue_name": "emails",
        "message": {"payload": {"to": "a@example.com"}, "max_attempts": 4},
        "sleep_seconds": 2,  # 1.2 s rounded up: never shorter than asked
    }
    rows = await _rows(conn, "q_emails")
    assert rows == [(job_id, 0, {"payload": {"to": "a@example.com"}, "max_attempts": 4})]
    hidden = await (
        await conn.execute("SELECT vt > now() + interval '1.5 s' FROM pgmq.q_emails")
    ).fetchone()
    assert hidden == (True,)

    assert await backend.read("emails", lease=0.2, batch=3) == []  # still delayed
    assert server.calls("read")[-1][1] == {"queue_name": "emails", "sleep_seconds": 1, "n": 3}


async def test_url_may_carry_rest_path(server: FakePostgrest) -> None:
    async with PgmqPublicBackend(url=f"{BASE}/rest/v1/", key=SERVICE_KEY) as made:
        await made.send("emails", 1)
    assert str(server.requests[-1].url) == f"{BASE}/rest/v1/rpc/send"


def test_constructor_needs_one_way_in() -> None:
    with pytest.raises(TypeError):
        PgmqPublicBackend()
    with pytest.raises(TypeError):
        PgmqPublicBackend(object(), url=BASE, key=SERVICE_KEY)
    with pytest.raises(ValueError, match="http"):
        PgmqPublicBackend.from_url("project.supabase.co", SERVICE_KEY)
    with pytest.raises(ValueError, match="service-role key"):
        PgmqPublicBackend.from_url(BASE, "")


# -- queue semantics --------------------------------------------------------------------


async def test_round_trip_keeps_context_and_archives(
    backend: PgmqPublicBackend, conn: psycopg.AsyncConnection[Any]
) -> None:
    jobs = Jobs(backend, {"emails": dict[str, str]})
    assert jobs.backend is backend
    job_id = await jobs.enqueue(
        "emails",
        {"to": "b@example.com"},
        context={"actor": {"id": "u1", "kind": "user"}, "tenant": "t1"},
    )
    [job] = await jobs.claim("emails", lease=30)
    assert (job.id, job.payload, job.attempts, job.max_attempts) == (
        job_id,
        {"to": "b@example.com"},
        1,
        5,
    )
    assert (
        job.context.tenant == "t1"
        and job.context.actor is not None
        and job.context.actor.id == "u1"
    )
    assert job.visible_until > job.enqueued_at
    assert await jobs.claim("emails", lease=30) == []  # the lease hides it

    assert await jobs.complete(job) is True
    assert await _rows(conn, "q_emails") == []
    assert [row[0] for row in await _rows(conn, "a_emails")] == [job_id]
    assert await jobs.complete(job) is False  # already archived: nothing to do


async def test_fail_waits_for_the_lease_then_archives_dead(
    backend: PgmqPublicBackend, server: FakePostgrest, conn: psycopg.AsyncConnection[Any]
) -> None:
    job_id = await backend.send("emails", {"n": 1}, max_attempts=2)
    [first] = await backend.read("emails", lease=30, batch=1)
    before = len(server.requests)
    assert await backend.fail(first, "boom", retry_in=0) == "queued"
    assert await backend.extend(first, 60) is False
    assert len(server.requests) == before  # neither needs a call
    assert await backend.read("emails", lease=30, batch=1) == []  # back only when the lease ends

    # pretend the lease ran out, then the last attempt fails
    await conn.execute("UPDATE pgmq.q_emails SET vt = now() WHERE msg_id = %s", (job_id,))
    [second] = await backend.read("emails", lease=30, batch=1)
    assert second.attempts == 2
    assert await backend.fail(second, "boom", retry_in=0) == "dead"
    assert await _rows(conn, "q_emails") == []
    assert [row[:2] for row in await _rows(conn, "a_emails")] == [(job_id, 2)]
    assert await backend.fail(second, "boom", retry_in=0) is None  # gone already


async def test_read_archives_messages_past_max_attempts(
    backend: PgmqPublicBackend, conn: psycopg.AsyncConnection[Any]
) -> None:
    dead_id = await backend.send("emails", {"n": "dead"}, max_attempts=2)
    live_id = await backend.send("emails", {"n": "live"}, max_attempts=2)
    # a worker died holding the last attempt: read_ct already at max_attempts, lease over
    await conn.execute(
        "UPDATE pgmq.q_emails SET read_ct = 2, vt = now() WHERE msg_id = %s", (dead_id,)
    )

    jobs = await backend.read("emails", lease=30, batch=1)
    assert [job.id for job in jobs] == [live_id]  # read again after dropping the dead one
    assert [row[0] for row in await _rows(conn, "a_emails")] == [dead_id]
    assert [row[0] for row in await _rows(conn, "q_emails")] == [live_id]


async def test_foreign_messages_are_taken_whole(
    backend: PgmqPublicBackend, conn: psycopg.AsyncConnection[Any]
) -> None:
    await conn.execute(
        "SELECT pgmq.send('emails', %s::jsonb)", (json.dumps({"to": "c@example.com"}),)
    )
    [job] = await backend.read("emails", lease=30, batch=1)
    assert (job.payload, job.max_attempts) == ({"to": "c@example.com"}, 5)


async def test_enqueue_many_is_one_send_batch(
    backend: PgmqPublicBackend, server: FakePostgrest, conn: psycopg.AsyncConnection[Any]
) -> None:
    jobs = Jobs(backend, {"emails": int})
    ids = await jobs.enqueue_many("emails", [1, 2, 3], max_attempts=3)
    assert len(server.calls("send_batch")) == 1 and not server.calls("send")
    assert [(row[0], row[2]) for row in await _rows(conn, "q_emails")] == [
        (i, {"payload": n, "max_attempts": 3}) for i, n in zip(ids, [1, 2, 3], strict=True)
    ]


async def test_two_readers_never_share_a_message(
    server: FakePostgrest, backend: PgmqPublicBackend
) -> None:
    ids = set(await backend.send_many("emails", list(range(8))))
    async with PgmqPublicBackend.from_url(BASE, SERVICE_KEY) as other:
        first, second = await asyncio.gather(
            backend.read("emails", lease=30, batch=5), other.read("emails", lease=30, batch=5)
        )
    seen = [job.id for job in first + second]
    assert len(seen) == len(set(seen)) == 8 and set(seen) == ids


# -- features PostgREST lacks -----------------------------------------------------------


async def test_missing_features_are_invalid_requests(backend: PgmqPublicBackend) -> None:
    jobs = Jobs(backend, {"emails": int})
    calls = {
        "dedupe_key": jobs.enqueue("emails", 1, dedupe_key="k"),
        "replay": jobs.replay("emails", 1),
        "stats": jobs.stats(),
        "list_dead": jobs.list_dead("emails"),
        "retry_dead": jobs.retry_dead("emails"),
        "purge_archive": jobs.purge_archive("emails"),
        # job records: PostgREST's pgmq_public has no records to read or cancel
        "get": jobs.get("emails", 1),
        "list_jobs": jobs.list_jobs("emails"),
        "cancel": jobs.cancel("emails", 1),
    }
    for feature, call in calls.items():
        with pytest.raises(DrainpipeError) as caught:
            await call
        assert caught.value.kind == "invalid_request"
        assert caught.value.message.startswith(f"{feature} needs a SQL connection")
        assert "pgmq_public" in caught.value.message
    with pytest.raises(DrainpipeError, match="dedupe_key needs a SQL connection"):
        await backend.send("emails", 1, dedupe_key="k")  # the backend refuses on its own too


# -- errors -----------------------------------------------------------------------------


async def test_postgres_errors_name_the_function(server: FakePostgrest) -> None:
    async with PgmqPublicBackend.from_url(BASE, SERVICE_KEY) as made:
        with pytest.raises(DrainpipeError) as caught:
            await made.read("no_such_queue", lease=30, batch=1)
    # pgmq.q_no_such_queue: 42P01 means what it means over psycopg (docs/reference.md section 1's
    # "else"), whatever HTTP status PostgREST gave it; the message says what is missing
    assert caught.value.kind == "unexpected"
    assert caught.value.message.startswith("pgmq_public.read: ")
    assert "create it with pgmq.create" in caught.value.message
    assert caught.value.code == "42P01"

    async with PgmqPublicBackend.from_url(BASE, ANON_KEY) as anon:
        with pytest.raises(DrainpipeError) as caught:
            await anon.send("emails", 1)
    assert caught.value.kind == "forbidden" and "pgmq_public.send: permission denied" in str(
        caught.value
    )

    async with PgmqPublicBackend.from_url(BASE, "wrong") as wrong:
        with pytest.raises(DrainpipeError) as caught:
            await wrong.send("emails", 1)
    assert caught.value.kind == "unauthorized" and caught.value.code == "PGRST301"


@pytest.mark.parametrize(
    ("answer", "kind"),
    [
        (httpx.Response(503, text="upstream connect error"), "network"),
        (httpx.Response(502, text="<html>bad gateway</html>"), "network"),
        (httpx.Response(504, text="gateway timeout"), "timeout"),
        (httpx.Response(429, json={"message": "Too many requests"}), "rate_limited"),
        (httpx.Response(403, json={"code": "42501", "message": "permission denied"}), "forbidden"),
        (httpx.Response(500, json={"code": "57014", "message": "canceling statement"}), "timeout"),
        (
            httpx.Response(400, json={"code": "22P02", "message": "invalid input syntax"}),
            "invalid_input",
        ),
        (httpx.Response(400, json={"code": "XX001", "message": "odd"}), "unexpected"),
        (httpx.ConnectError("connection refused"), "network"),
        (httpx.ReadTimeout("read timed out"), "timeout"),
    ],
)
async def test_http_failures_get_kinds(answer: Any, kind: str) -> None:
    with respx.mock() as router:
        router.post(f"{BASE}/rest/v1/rpc/archive").mock(side_effect=[answer])
        async with PgmqPublicBackend.from_url(BASE, SERVICE_KEY) as made:
            with pytest.raises(DrainpipeError) as caught:
                await made.rpc("archive", {"queue_name": "emails", "message_id": 1})
    assert caught.value.kind == kind
    assert str(caught.value).startswith("pgmq_public.archive: ")


# -- drain and work over PostgREST --------------------------------------------------------


async def test_drain_processes_retries_and_dead_letters(
    backend: PgmqPublicBackend, conn: psycopg.AsyncConnection[Any]
) -> None:
    jobs = Jobs(backend, {"emails": dict[str, int]})
    ok_id = await jobs.enqueue("emails", {"n": 1})
    flaky_id = await jobs.enqueue("emails", {"n": 2}, max_attempts=3)
    doomed_id = await jobs.enqueue("emails", {"n": 3}, max_attempts=2)
    seen: list[tuple[int, int]] = []

    async def handler(payload: dict[str, int], job: Any) -> None:
        seen.append((payload["n"], job.attempts))
        if payload["n"] == 3 or (payload["n"] == 2 and job.attempts == 1):
            raise Retry(after=0)  # ignored by pgmq_public: the lease decides

    first = await jobs.drain("emails", handler, lease=1)
    assert (first.succeeded, first.failed) == (1, 2)
    await asyncio.sleep(1.1)  # the failed jobs' 1 s leases run out
    second = await jobs.drain("emails", handler, lease=1)
    assert (second.succeeded, second.failed) == (1, 1)
    assert sorted(seen) == [(1, 1), (2, 1), (2, 2), (3, 1), (3, 2)]
    assert await _rows(conn, "q_emails") == []
    assert sorted(row[0] for row in await _rows(conn, "a_emails")) == sorted(
        [ok_id, flaky_id, doomed_id]
    )


async def test_work_retries_after_the_lease_and_stops(backend: PgmqPublicBackend) -> None:
    jobs = Jobs(backend, {"emails": int})
    await jobs.enqueue("emails", 7)
    stop = asyncio.Event()
    attempts: list[int] = []

    async def handler(payload: int, job: Any) -> None:
        attempts.append(job.attempts)
        if job.attempts == 1:
            raise RuntimeError("first try fails")
        stop.set()

    report = await asyncio.wait_for(
        jobs.work("emails", handler, lease=1, poll_interval=0.1, max_poll_interval=0.2, stop=stop),
        timeout=5,
    )
    assert attempts == [1, 2]
    assert (report.succeeded, report.failed) == (1, 1)


async def test_worker_retries_a_transient_claim_error(db_url: str) -> None:
    async with postgrest(db_url) as (fake, router):
        # the first read meets a gateway hiccup, the next goes through to the fake
        router.routes.clear()
        answers = iter([httpx.Response(503, text="upstream connect error")])

        async def flaky(request: httpx.Request, fn: str) -> httpx.Response:
            if fn == "read":
                answer = next(answers, None)
                if answer is not None:
                    return answer
            return await fake(request, fn)

        router.post(url__regex=rf"^{BASE}/rest/v1/rpc/(?P<fn>\w+)$").mock(side_effect=flaky)
        async with PgmqPublicBackend.from_url(BASE, SERVICE_KEY) as made:
            jobs = Jobs(made, {"emails": int})
            await jobs.enqueue("emails", 1)
            done: list[int] = []

            async def handler(payload: int, job: Any) -> None:
                done.append(payload)

            report = await jobs.drain("emails", handler, lease=5)
    assert done == [1] and report.succeeded == 1
    assert len(fake.calls("read")) >= 1


# -- the supabase client path ---------------------------------------------------------------

# supabase 2.34 passes postgrest deprecated timeout/verify arguments; not ours to fix
SUPABASE_WARNING = "ignore:The '(timeout|verify)' parameter is deprecated:DeprecationWarning"


@pytest.mark.filterwarnings(SUPABASE_WARNING)
async def test_supabase_async_client(
    server: FakePostgrest, conn: psycopg.AsyncConnection[Any]
) -> None:
    # the supabase extra is optional: without it this path cannot be used, so the test skips
    supabase = pytest.importorskip("supabase", reason="needs the supabase extra")

    client = await supabase.acreate_client(BASE, SERVICE_KEY)  # offline: no request made here
    backend = resolve_backend(client)
    assert isinstance(backend, PgmqPublicBackend) and backend.name == "pgmq_public"
    jobs = Jobs(client, {"emails": int})
    job_id = await jobs.enqueue("emails", 41, max_attempts=2)
    request = server.requests[-1]
    assert str(request.url) == f"{BASE}/rest/v1/rpc/send"
    assert request.headers["content-profile"] == "pgmq_public"
    assert request.headers["apikey"] == SERVICE_KEY
    assert request.headers["authorization"] == f"Bearer {SERVICE_KEY}"

    [job] = await jobs.claim("emails", lease=30)
    assert (job.id, job.payload, job.attempts, job.max_attempts) == (job_id, 41, 1, 2)
    assert await jobs.complete(job) is True
    assert [row[0] for row in await _rows(conn, "a_emails")] == [job_id]

    with pytest.raises(DrainpipeError) as caught:
        await jobs.backend.read("no_such_queue", lease=30, batch=1)
    assert caught.value.kind == "unexpected" and str(caught.value).startswith("pgmq_public.read: ")
    assert caught.value.code == "42P01"
    await client.postgrest.aclose()


# -- answers that are 2xx but not what the function returns --------------------------------


async def _call(answer: httpx.Response, fn: str, call: Any) -> Any:
    with respx.mock() as router:
        router.post(f"{BASE}/rest/v1/rpc/{fn}").mock(return_value=answer)
        async with PgmqPublicBackend.from_url(BASE, SERVICE_KEY) as made:
            return await call(made)


def _job(job_id: int = 1) -> Any:
    from datetime import UTC, datetime

    from drainpipe.models import Job, JobContext

    now = datetime.now(UTC)
    return Job(
        id=job_id, queue="emails", payload=1, context=JobContext(), attempts=5, max_attempts=5,
        enqueued_at=now, visible_until=now, last_error=None,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("fn", "call"),
    [
        ("send", lambda b: b.send("emails", 1)),
        ("send_batch", lambda b: b.send_many("emails", [1, 2])),
        ("read", lambda b: b.read("emails", lease=30, batch=1)),
        ("archive", lambda b: b.complete(_job())),
        ("archive", lambda b: b.fail(_job(), "boom")),
    ],
)
async def test_a_2xx_html_page_is_an_error_not_a_result(fn: str, call: Any) -> None:
    # a proxy or captive portal answering 200 with HTML must not read as "archived" (a truthy
    # string), "no messages" or a ValueError from int()
    page = httpx.Response(
        200, text="<html>maintenance</html>", headers={"content-type": "text/html"}
    )
    with pytest.raises(DrainpipeError) as caught:
        await _call(page, fn, call)
    assert caught.value.kind == "unexpected"
    assert str(caught.value).startswith(f"pgmq_public.{fn}: ")


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        ({"code": "57014", "message": "canceling statement due to statement timeout"}, "timeout"),
        ({"code": "PGRST000", "message": "Could not connect"}, "network"),
        ({"code": "42501", "message": "permission denied"}, "forbidden"),
        ({"message": "something broke"}, "unexpected"),
    ],
)
async def test_a_200_with_an_error_body_is_that_error(body: dict[str, Any], kind: str) -> None:
    for fn, call in (
        ("send", lambda b: b.send("emails", 1)),
        ("read", lambda b: b.read("emails", lease=30, batch=1)),
        ("archive", lambda b: b.complete(_job())),
    ):
        with pytest.raises(DrainpipeError) as caught:
            await _call(httpx.Response(200, json=body), fn, call)
        assert caught.value.kind == kind, (fn, body)
        assert str(caught.value).startswith(f"pgmq_public.{fn}: ")


async def test_message_ids_may_arrive_as_strings() -> None:
    # bigints past 2**53 are sent as strings by some gateways; both forms are ids
    assert await _call(httpx.Response(200, json=["9007199254740993"]), "send",
                       lambda b: b.send("emails", 1)) == 9007199254740993  # fmt: skip
    assert await _call(httpx.Response(200, json=[3, "4"]), "send_batch",
                       lambda b: b.send_many("emails", [1, 2])) == [3, 4]  # fmt: skip
    row = {"msg_id": "12", "read_ct": "1", "enqueued_at": "2024-01-01T00:00:00+00:00",
           "vt": "2024-01-01T00:00:30+00:00", "message": {"payload": 5, "max_attempts": 3}}  # fmt: skip
    [job] = await _call(httpx.Response(200, json=[row]), "read",
                        lambda b: b.read("emails", lease=30, batch=1))  # fmt: skip
    assert (job.id, job.attempts, job.payload, job.max_attempts) == (12, 1, 5, 3)


@pytest.mark.parametrize(
    ("fn", "body", "call"),
    [
        ("send", [True], lambda b: b.send("emails", 1)),
        ("send", ["abc"], lambda b: b.send("emails", 1)),
        ("send", [{"id": 1}], lambda b: b.send("emails", 1)),
        ("send_batch", [1, None], lambda b: b.send_many("emails", [1, 2])),
        ("send_batch", [1], lambda b: b.send_many("emails", [1, 2])),
        ("read", [{"msg_id": "x", "message": 1}], lambda b: b.read("emails", lease=30, batch=1)),
        ("read", [{"message": 1}], lambda b: b.read("emails", lease=30, batch=1)),
        ("read", [{"msg_id": 1, "vt": "soon"}], lambda b: b.read("emails", lease=30, batch=1)),
        ("read", {"msg_id": 1}, lambda b: b.read("emails", lease=30, batch=1)),
        ("archive", "yes", lambda b: b.complete(_job())),
        ("archive", [1], lambda b: b.complete(_job())),
    ],
)
async def test_malformed_results_are_unexpected_errors(fn: str, body: Any, call: Any) -> None:
    with pytest.raises(DrainpipeError) as caught:
        await _call(httpx.Response(200, json=body), fn, call)
    assert caught.value.kind == "unexpected"
    assert str(caught.value).startswith(f"pgmq_public.{fn}: ")
