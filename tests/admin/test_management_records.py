"""The management API over real job records (both storage backends where they have them):
listing and paging, history, audited cancel and replay, idempotent replays, races between
real connections, and the metadata-only rule."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import psycopg
import pytest

from drainpipe import AgentInboxes, Jobs
from drainpipe.console.record_json import ATTEMPT_FIELDS, SHOWN_FIELDS
from drainpipe.testing import Clock
from tests.admin.conftest import (
    ADMIN,
    ERROR_MARKER,
    OTHER_ADMIN,
    PAYLOAD_MARKER,
    QUEUES,
    VIEWER,
    Inbox,
    bearer,
    make_app,
)
from tests.admin.test_console_inboxes import HOLDER_MARKER, events_of_every_state
from tests.admin.test_management_api import problem

# every storage backend keeps records
BACKENDS = ["table", "pgmq"]


@pytest.fixture(params=BACKENDS)
async def records(fresh_database: Any, request: pytest.FixtureRequest) -> AsyncIterator[Inbox]:
    url = fresh_database(request.param)
    jobs = Jobs(url, QUEUES)
    app = make_app(jobs)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://inbox") as http:
        yield Inbox(jobs, app, http, url, request.param)
    await jobs.close()


def audit_rows(url: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url) as conn:
        return conn.execute(
            "SELECT target, actor, action, queue, job_id, outcome, code, idempotency_key,"
            " new_job_id FROM drainpipe.management_audit ORDER BY id"
        ).fetchall()


def replay_headers(key: str, token: str = ADMIN) -> dict[str, str]:
    return {**bearer(token), "Idempotency-Key": key}


async def test_list_is_metadata_newest_first_and_filters(records: Inbox) -> None:
    dead = await records.dead_job()  # first: it claims the oldest job of its queue
    first = await records.jobs.enqueue("emails", {"n": 1})
    report = await records.jobs.enqueue("reports", {"n": 2})
    response = await records.http.get("/jobs", headers=bearer(VIEWER))
    assert response.status_code == 200, response.text
    body = response.json()
    # newest first by enqueue time across queues (pgmq's ids are per queue: the report's
    # id 1 is the newest job, not the oldest)
    expected = [(report, "reports"), (first, "emails"), (dead, "emails")]
    assert [(job["id"], job["queue"]) for job in body["data"]] == expected
    assert all(set(job) == set(SHOWN_FIELDS) for job in body["data"])  # no history in lists
    assert body["meta"]["next_cursor"] is None
    assert body["meta"]["actor"] == "intern@example.com" and body["meta"]["role"] == "viewer"
    assert body["meta"]["target"] == "production" and body["meta"]["queues"] == list(QUEUES)
    only = await records.http.get("/jobs", params={"queue": "reports"}, headers=bearer(VIEWER))
    assert [job["id"] for job in only.json()["data"]] == [report]
    dead_only = await records.http.get("/jobs", params={"state": "dead"}, headers=bearer(VIEWER))
    [row] = dead_only.json()["data"]
    assert (row["id"], row["state"], row["last_code"]) == (dead, "dead", "MAX_ATTEMPTS")


async def test_pages_are_bound_to_their_filters_actor_route_and_target(records: Inbox) -> None:
    ids = await records.jobs.enqueue_many("emails", [{"n": i} for i in range(5)])
    seen: list[int] = []
    params: dict[str, Any] = {"limit": 2, "queue": "emails"}
    cursors = []
    while True:
        page = await records.http.get("/jobs", params=params, headers=bearer(ADMIN))
        body = page.json()
        seen += [job["id"] for job in body["data"]]
        if not body["meta"]["next_cursor"]:
            break
        cursors.append(body["meta"]["next_cursor"])
        params = {**params, "cursor": body["meta"]["next_cursor"]}
    assert seen == sorted(ids, reverse=True)
    cursor = cursors[0]
    for params, token in [
        ({"limit": 2, "queue": "emails", "cursor": cursor}, OTHER_ADMIN),  # another actor
        ({"limit": 2, "cursor": cursor}, ADMIN),  # other filters
        ({"limit": 2, "queue": "emails", "state": "queued", "cursor": cursor}, ADMIN),
    ]:
        problem(
            await records.http.get("/jobs", params=params, headers=bearer(token)),
            400,
            "CURSOR_INVALID",
        )
    problem(
        await records.http.get("/audit", params={"cursor": cursor}, headers=bearer(ADMIN)),
        400,
        "CURSOR_INVALID",
    )
    staging = make_app(records.jobs, target="staging")  # same secret, another target
    transport = httpx.ASGITransport(app=staging)
    async with httpx.AsyncClient(transport=transport, base_url="http://staging") as http:
        params = {"limit": 2, "queue": "emails", "cursor": cursor}
        problem(
            await http.get("/jobs", params=params, headers=bearer(ADMIN)), 400, "CURSOR_INVALID"
        )


async def test_get_has_the_history_and_unknown_jobs_are_404(records: Inbox) -> None:
    dead = await records.dead_job()
    response = await records.http.get(f"/jobs/emails/{dead}", headers=bearer(VIEWER))
    assert response.status_code == 200, response.text
    job = response.json()["data"]
    assert set(job) == {*SHOWN_FIELDS, "history", "steps"}
    [attempt] = job["history"]
    assert set(attempt) == set(ATTEMPT_FIELDS)
    assert (attempt["number"], attempt["outcome"], attempt["code"]) == (
        1,
        "failed",
        "HANDLER_ERROR",
    )
    problem(
        await records.http.get("/jobs/emails/999999", headers=bearer(VIEWER)), 404, "JOB_NOT_FOUND"
    )
    problem(
        await records.http.get(f"/jobs/reports/{dead}", headers=bearer(VIEWER)),
        404,
        "JOB_NOT_FOUND",
    )


async def test_cancel_is_audited_ok_then_refused(records: Inbox) -> None:
    job_id = await records.jobs.enqueue("emails", {"n": 1})
    problem(
        await records.http.post(f"/jobs/emails/{job_id}/cancel", headers=bearer(VIEWER)),
        403,
        "ADMIN_REQUIRED",
    )
    problem(
        await records.http.post("/jobs/emails/424242/cancel", headers=bearer(ADMIN)),
        404,
        "JOB_NOT_FOUND",
    )
    assert audit_rows(records.url) == []  # neither reached a job
    done = await records.http.post(f"/jobs/emails/{job_id}/cancel", headers=bearer(ADMIN))
    assert done.status_code == 200, done.text
    record = done.json()["data"]
    assert (record["id"], record["state"], record["last_code"]) == (
        job_id,
        "cancelled",
        "CANCELLED",
    )
    assert record["history"] == []  # it never ran: no attempt to show
    again = await records.http.post(f"/jobs/emails/{job_id}/cancel", headers=bearer(OTHER_ADMIN))
    problem(again, 409, "JOB_NOT_CANCELLABLE")
    assert audit_rows(records.url) == [
        ("production", "ops@example.com", "cancel", "emails", job_id, "ok", None, None, None),
        (
            "production",
            "lead@example.com",
            "cancel",
            "emails",
            job_id,
            "refused",
            "JOB_NOT_CANCELLABLE",
            None,
            None,
        ),
    ]
    assert await records.jobs.claim("emails") == []  # never claimed again


async def test_replay_is_idempotent_and_audited_once(records: Inbox) -> None:
    dead = await records.dead_job()
    path = f"/jobs/emails/{dead}/replay"
    first = await records.http.post(path, headers=replay_headers("key-1"))
    assert first.status_code == 201, first.text
    data = first.json()["data"]
    assert data["parent_id"] == dead and isinstance(data["id"], int)
    again = await records.http.post(path, headers=replay_headers("key-1"))
    assert (again.status_code, again.json()) == (201, first.json())
    assert again.headers["idempotency-replayed"] == "true"
    other_body = await records.http.post(path, headers=replay_headers("key-1"), content=b"{}")
    problem(other_body, 422, "IDEMPOTENCY_KEY_REUSED")
    # the same key of another actor is another key (keys are per actor)
    problem(
        await records.http.post(path, headers=replay_headers("key-1", OTHER_ADMIN)),
        409,
        "JOB_ALREADY_REPLAYED",
    )
    problem(
        await records.http.post(path, headers=replay_headers("key-2")), 409, "JOB_ALREADY_REPLAYED"
    )
    child = await records.http.get(f"/jobs/emails/{data['id']}", headers=bearer(VIEWER))
    assert child.json()["data"]["parent_id"] == dead
    parent = await records.http.get(f"/jobs/emails/{dead}", headers=bearer(VIEWER))
    assert parent.json()["data"]["replayed_by"] == data["id"]
    assert parent.json()["data"]["state"] == "dead"
    rows = audit_rows(records.url)
    assert [row[1:] for row in rows] == [
        ("ops@example.com", "replay", "emails", dead, "ok", None, "key-1", data["id"]),
        (
            "lead@example.com",
            "replay",
            "emails",
            dead,
            "refused",
            "JOB_ALREADY_REPLAYED",
            "key-1",
            None,
        ),
        (
            "ops@example.com",
            "replay",
            "emails",
            dead,
            "refused",
            "JOB_ALREADY_REPLAYED",
            "key-2",
            None,
        ),
    ]


async def test_replaying_a_live_job_is_refused_and_audited(records: Inbox) -> None:
    live = await records.jobs.enqueue("emails", {"n": 1})
    path = f"/jobs/emails/{live}/replay"
    problem(await records.http.post(path, headers=replay_headers("k")), 409, "JOB_NOT_DEAD")
    problem(
        await records.http.post("/jobs/emails/777777/replay", headers=replay_headers("k2")),
        404,
        "JOB_NOT_FOUND",
    )
    [row] = audit_rows(records.url)
    assert row[5:7] == ("refused", "JOB_NOT_DEAD")


async def test_a_duplicate_while_the_first_replay_runs_is_409(records: Inbox) -> None:
    dead = await records.dead_job()
    path = f"/jobs/emails/{dead}/replay"
    # another session holds the dead job's row: the first replay waits inside its statement
    async with await psycopg.AsyncConnection.connect(records.url) as blocker:
        await blocker.execute(records.lock_statement(), (dead,))
        first = asyncio.create_task(records.http.post(path, headers=replay_headers("same")))
        await _wait_for_lock_wait(records.url)
        duplicate = await records.http.post(path, headers=replay_headers("same"))
        problem(duplicate, 409, "IDEMPOTENCY_KEY_IN_USE")
        assert duplicate.headers["retry-after"] == "1"
        await blocker.rollback()
    assert (await first).status_code == 201
    assert len(audit_rows(records.url)) == 1


async def _wait_for_lock_wait(url: str) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as watcher:
        for _ in range(200):
            row = await (
                await watcher.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    " AND datname = current_database()"
                )
            ).fetchone()
            if row and row[0]:
                return
            await asyncio.sleep(0.02)
    raise AssertionError("the replay never waited for the row lock")


async def test_racing_writes_have_exactly_one_winner(records: Inbox) -> None:
    dead = await records.dead_job()
    live = await records.jobs.enqueue("emails", {"n": 1})
    # separate pools: each request runs on its own connection
    apps = [make_app(Jobs(records.url, QUEUES)) for _ in range(4)]
    clients = [
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://race")
        for app in apps
    ]
    try:
        replays = await asyncio.gather(
            *(
                client.post(f"/jobs/emails/{dead}/replay", headers=replay_headers(f"k{i}"))
                for i, client in enumerate(clients)
            )
        )
        cancels = await asyncio.gather(
            *(
                client.post(f"/jobs/emails/{live}/cancel", headers=bearer(ADMIN))
                for client in clients
            )
        )
    finally:
        for client in clients:
            await client.aclose()
        for app in apps:
            await app.aclose()
    assert sorted(r.status_code for r in replays) == [201, 409, 409, 409]
    assert {r.json().get("code") for r in replays if r.status_code == 409} == {
        "JOB_ALREADY_REPLAYED"
    }
    assert sorted(r.status_code for r in cancels) == [200, 409, 409, 409]
    outcomes = sorted((row[2], row[5]) for row in audit_rows(records.url))
    assert (
        outcomes
        == [("cancel", "ok")]
        + [("cancel", "refused")] * 3
        + [("replay", "ok")]
        + [("replay", "refused")] * 3
    )


async def test_no_response_carries_a_payload_or_an_error_text(records: Inbox) -> None:
    dead = await records.dead_job()
    live = await records.jobs.enqueue("emails", {"secret": PAYLOAD_MARKER})
    answers = [
        await records.http.get("/", headers=bearer(ADMIN)),
        await records.http.get("/jobs", headers=bearer(ADMIN)),
        await records.http.get("/jobs", params={"state": "dead"}, headers=bearer(VIEWER)),
        await records.http.get(f"/jobs/emails/{dead}", headers=bearer(VIEWER)),
        await records.http.post(f"/jobs/emails/{dead}/cancel", headers=bearer(ADMIN)),
        await records.http.post(f"/jobs/emails/{live}/replay", headers=replay_headers("m1")),
        await records.http.post(f"/jobs/emails/{dead}/replay", headers=replay_headers("m2")),
        await records.http.post(f"/jobs/emails/{dead}/replay", headers=replay_headers("m2")),
        await records.http.post(f"/jobs/emails/{live}/cancel", headers=bearer(ADMIN)),
        await records.http.get(f"/jobs/emails/{live}", headers=bearer(ADMIN)),
        await records.http.get("/audit", headers=bearer(ADMIN)),
        await records.http.get("/jobs", params={"tenant": "x"}, headers=bearer(ADMIN)),
        # the console's routes (docs/job-inbox.md#the-console)
        await records.http.get("/queues", headers=bearer(VIEWER)),
        await records.http.post("/queues/emails/pause", headers=bearer(ADMIN)),
        await records.http.post("/queues/emails/resume", headers=bearer(ADMIN)),
        await records.http.get("/jobs", params={"code": "HANDLER_ERROR"}, headers=bearer(VIEWER)),
        await records.http.get("/jobs", params={"id": str(dead)}, headers=bearer(VIEWER)),
        await records.http.get("/jobs", params={"since": "2020-01-01"}, headers=bearer(VIEWER)),
        await records.http.post(
            "/jobs/bulk/replay",
            json={"filter": {"state": "dead"}, "expected": 99},
            headers=replay_headers("m3"),
        ),
        await records.http.post(
            "/jobs/bulk/replay",
            json={"filter": {"state": "dead", "code": "HANDLER_ERROR"}, "expected": 1},
            headers=replay_headers("m4"),
        ),
        await records.http.post(
            "/jobs/bulk/cancel",
            json={"filter": {"queue": "emails", "state": "queued"}, "expected": 1},
            headers=replay_headers("m5"),
        ),
        await records.http.get("/metrics", headers=bearer(VIEWER)),
        await records.http.get("/audit", headers=bearer(ADMIN)),
    ]
    assert {a.status_code for a in answers} == {200, 201, 409}
    assert all(a.status_code != 400 for a in answers[-10:]), [a.text for a in answers[-10:]]
    # the agent inboxes' overview (GET /inboxes), over events whose bodies, outcomes and
    # errors carry the markers
    clock = Clock()
    agents = AgentInboxes(records.url, lease_secret="lease-secret-of-the-marker-test", now=clock)
    try:
        leases = await events_of_every_state(agents, records.url, clock)
        with_agents = httpx.ASGITransport(app=make_app(records.jobs, agents=agents))
        async with httpx.AsyncClient(transport=with_agents, base_url="http://inbox") as http:
            inboxes = await http.get("/inboxes", headers=bearer(VIEWER))
            assert inboxes.status_code == 200 and len(inboxes.json()["data"]) == 2
            answers += [inboxes, await http.get("/", headers=bearer(VIEWER))]
    finally:
        await agents.close()
    for answer in answers:
        text = answer.text + repr(answer.headers)
        assert PAYLOAD_MARKER not in text and ERROR_MARKER not in text, answer.request.url
        assert HOLDER_MARKER not in text and not any(lease in text for lease in leases)
