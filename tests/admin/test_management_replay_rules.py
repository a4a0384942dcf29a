"""Replay rules through the management routes, both storages: a replay past the queue's
``replay_window`` (time moved with the app's clock), on a queue that is not replayable, or
refused by ``replay_check`` answers 409 with its code, and each refusal is audited by the
statement that refused it; the idempotent repeat answers the same refusal unaudited; a
replay route racing a policy change (real connections) waits for it and obeys it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from drainpipe import DrainpipeError, JobRecord, Jobs, ManagementClient, QueuePolicy
from tests.admin.conftest import ADMIN, QUEUES, VIEWER, Inbox, make_app
from tests.admin.test_management_api import problem
from tests.admin.test_management_records import audit_rows, replay_headers
from tests.conftest import connect

REVOKED_TENANT = "tenant-revoked"


class Clock:
    """The app's clock (``p_now``): the real time, moved on by ``ahead``."""

    def __init__(self) -> None:
        self.ahead = timedelta(0)

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.ahead


def check(record: JobRecord) -> str | None:
    return "NOT_AUTHORIZED" if record.tenant == REVOKED_TENANT else None


@pytest.fixture(params=["table", "pgmq"])
async def ruled(
    fresh_database: Any, request: pytest.FixtureRequest
) -> AsyncIterator[tuple[Inbox, Clock]]:
    url = fresh_database(request.param)
    policies = {
        "emails": QueuePolicy(replay_window=timedelta(hours=24)),  # type: ignore[arg-type]
        "reports": QueuePolicy(replayable=False),
    }
    jobs = Jobs(url, QUEUES, policies=policies, replay_check=check)
    clock = Clock()
    app = make_app(jobs, now=clock)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://inbox") as http:
        yield Inbox(jobs, app, http, url, request.param), clock
    await jobs.close()


async def dead(inbox: Inbox, queue: str, tenant: str | None = None) -> int:
    context = None if tenant is None else {"tenant": tenant}
    job_id = await inbox.jobs.enqueue(queue, {"event_id": "evt"}, max_attempts=1, context=context)
    [job] = await inbox.jobs.claim(queue)
    assert job.id == job_id
    assert await inbox.jobs.fail(job, RuntimeError("down")) == "dead"
    return job_id


async def test_each_rule_answers_409_with_its_code_and_is_audited(
    ruled: tuple[Inbox, Clock],
) -> None:
    inbox, clock = ruled
    expired = await dead(inbox, "emails")
    revoked = await dead(inbox, "emails", tenant=REVOKED_TENANT)
    blocked = await dead(inbox, "reports")
    # a day and a minute later, by the app's clock: the window has closed for both emails
    clock.ahead = timedelta(hours=24, minutes=1)
    answer = await inbox.http.post(
        f"/jobs/emails/{expired}/replay", headers=replay_headers("k-expired")
    )
    assert "window" in problem(answer, 409, "EVENT_EXPIRED")["detail"]
    answer = await inbox.http.post(
        f"/jobs/reports/{blocked}/replay", headers=replay_headers("k-blocked")
    )
    problem(answer, 409, "REPLAY_BLOCKED")
    # the app's check runs first, on the record as it is now
    answer = await inbox.http.post(
        f"/jobs/emails/{revoked}/replay", headers=replay_headers("k-revoked")
    )
    problem(answer, 409, "NOT_AUTHORIZED")
    # the same key again: the same answer, from storage, not audited twice
    again = await inbox.http.post(
        f"/jobs/emails/{revoked}/replay", headers=replay_headers("k-revoked")
    )
    problem(again, 409, "NOT_AUTHORIZED")
    assert again.headers.get("Idempotency-Replayed") == "true"
    rows = audit_rows(inbox.url)
    assert [row[2:] for row in rows] == [
        ("replay", "emails", expired, "refused", "EVENT_EXPIRED", "k-expired", None),
        ("replay", "reports", blocked, "refused", "REPLAY_BLOCKED", "k-blocked", None),
        ("replay", "emails", revoked, "refused", "NOT_AUTHORIZED", "k-revoked", None),
    ]
    for queue, job_id in (("emails", expired), ("reports", blocked), ("emails", revoked)):
        record = await inbox.jobs.get(queue, job_id)
        assert record is not None and (record.state, record.replayed_by) == ("dead", None)


async def test_inside_the_window_a_replay_is_created_with_its_lineage(
    ruled: tuple[Inbox, Clock],
) -> None:
    inbox, clock = ruled
    job_id = await dead(inbox, "emails")
    clock.ahead = timedelta(hours=23)
    answer = await inbox.http.post(f"/jobs/emails/{job_id}/replay", headers=replay_headers("k1"))
    assert answer.status_code == 201, answer.text
    child = answer.json()["data"]["id"]
    assert answer.json()["data"] == {"id": child, "parent_id": job_id}
    [claimed] = await inbox.jobs.claim("emails")
    assert (claimed.id, claimed.payload) == (child, {"event_id": "evt"})
    [row] = audit_rows(inbox.url)
    assert row[5:] == ("ok", None, "k1", child)
    # an unknown job is 404 and unaudited, with or without a check
    missing = await inbox.http.post("/jobs/emails/999999/replay", headers=replay_headers("k2"))
    problem(missing, 404, "JOB_NOT_FOUND")
    assert len(audit_rows(inbox.url)) == 1


async def test_a_viewer_is_refused_before_any_rule(ruled: tuple[Inbox, Clock]) -> None:
    inbox, _ = ruled
    job_id = await dead(inbox, "reports")
    answer = await inbox.http.post(
        f"/jobs/reports/{job_id}/replay",
        headers=replay_headers("k", VIEWER),
    )
    problem(answer, 403, "ADMIN_REQUIRED")
    assert audit_rows(inbox.url) == []  # a refused principal writes no audit row


async def test_a_replay_route_racing_a_policy_change_obeys_the_change(
    ruled: tuple[Inbox, Clock],
) -> None:
    inbox, _ = ruled
    job_id = await dead(inbox, "emails")
    async with await connect(inbox.url) as operator:
        await operator.set_autocommit(False)
        # another deploy stores replayable=False for emails; not committed yet
        await operator.execute(
            "SELECT drainpipe.ensure_queue_policy_v3('emails', 65536, 10000, 30, 60, 604800,"
            " 5, NULL, 2592000, false, NULL, false)"
        )
        replay = asyncio.create_task(
            inbox.http.post(f"/jobs/emails/{job_id}/replay", headers=replay_headers("k-race"))
        )
        # the replay waits for the change: in audited_replay_job_v2, or on pgmq before it, at
        # its first read of the queue's table (a changed max_lease rewrites the table's check
        # constraint, which locks the table until the change commits)
        async with await connect(inbox.url) as probe:
            for _ in range(500):
                row = await (
                    await probe.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                        " AND pid NOT IN (pg_backend_pid(), %s) AND datname = current_database()",
                        (operator.info.backend_pid,),
                    )
                ).fetchone()
                if row and row[0]:
                    break
                await asyncio.sleep(0.01)
            else:
                raise AssertionError("the replay never waited for the policy change")
        assert not replay.done()
        await operator.commit()
    answer = await replay
    problem(answer, 409, "REPLAY_BLOCKED")
    [row] = audit_rows(inbox.url)
    assert row[5:7] == ("refused", "REPLAY_BLOCKED")


async def test_the_client_raises_the_refusal_with_its_code(ruled: tuple[Inbox, Clock]) -> None:
    inbox, _ = ruled
    job_id = await dead(inbox, "reports")
    transport = httpx.ASGITransport(app=inbox.app)
    async with ManagementClient("http://inbox", ADMIN, transport=transport, backoff=0) as client:
        with pytest.raises(DrainpipeError) as caught:
            await client.replay("reports", job_id)
    assert (caught.value.kind, caught.value.status, caught.value.code) == (
        "conflict",
        409,
        "REPLAY_BLOCKED",
    )
    assert len(audit_rows(inbox.url)) == 1  # a refusal is final: the client did not retry
