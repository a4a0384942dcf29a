"""The console's routes over real job records, both storages: the queue overview, pause and
resume, the search filters, the cause of death in the list, bulk cancel and replay, and
/metrics; through the API and through both ManagementClients."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg
import pytest

import drainpipe
from drainpipe import DrainpipeError, Jobs, sync
from tests.admin.browser import ServedApp
from tests.admin.conftest import ADMIN, QUEUES, VIEWER, Inbox, bearer, make_app
from tests.admin.test_management_api import problem

METRICS_TOKEN = "metrics-token-0123456789abcdef"


@pytest.fixture(params=["table", "pgmq"])
async def console(fresh_database: Any, request: pytest.FixtureRequest) -> AsyncIterator[Inbox]:
    url = fresh_database(request.param)
    jobs = Jobs(url, QUEUES)
    app = make_app(jobs, metrics_token=METRICS_TOKEN)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://inbox") as http:
        yield Inbox(jobs, app, http, url, request.param)
    await jobs.close()


def audit_rows(url: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url) as conn:
        return conn.execute(
            "SELECT actor, action, queue, job_id, outcome, code, detail"
            " FROM drainpipe.management_audit ORDER BY id"
        ).fetchall()


async def spent_job(jobs: Jobs, error: Exception, queue: str = "emails") -> int:
    """A job whose only attempt failed with ``error``: dead with MAX_ATTEMPTS."""
    job_id = await jobs.enqueue(queue, {"n": "spent"}, max_attempts=1)
    [job] = await jobs.claim(queue, lease=60)
    assert job.id == job_id
    assert await jobs.fail(job, error) == "dead"
    return job_id


class Unreachable(Exception):
    code = "UPSTREAM_DOWN"


async def test_the_overview_counts_lags_and_series(console: Inbox) -> None:
    jobs = console.jobs
    await spent_job(jobs, RuntimeError("boom"))
    for n in range(3):
        await jobs.enqueue("emails", {"n": n})
    [done] = await jobs.claim("emails", lease=60)
    assert await jobs.complete(done)
    answer = await console.http.get("/queues", headers=bearer(VIEWER))
    assert answer.status_code == 200, answer.text
    by_queue = {entry["queue"]: entry for entry in answer.json()["data"]}
    assert set(by_queue) == set(QUEUES)
    emails = by_queue["emails"]
    assert emails["counts"] == {
        "queued": 2,
        "leased": 0,
        "retry_wait": 0,
        "succeeded": 1,
        "dead": 1,
        "cancelled": 0,
    }
    assert emails["paused"] is False and emails["held"] == {}
    assert emails["oldest_ready_age_s"] is not None and 0 <= emails["oldest_ready_age_s"] < 60
    series = emails["series"]
    assert len(series) == 60
    minutes = [datetime.fromisoformat(point["minute"]) for point in series]
    assert minutes == sorted(minutes) and minutes[1] - minutes[0] == timedelta(minutes=1)
    # everything happened within the last two minutes (the test may straddle one)
    recent = series[-2:]
    assert sum(p["enqueued"] for p in recent) == 4
    assert sum(p["succeeded"] for p in recent) == 1
    assert sum(p["failed"] for p in recent) == 1
    assert sum(p["enqueued"] + p["succeeded"] + p["failed"] for p in series[:-2]) == 0
    reports = by_queue["reports"]
    assert reports["counts"]["queued"] == 0 and reports["oldest_ready_age_s"] is None


async def test_pause_and_resume_are_admin_only_audited_and_hold_claims(console: Inbox) -> None:
    jobs = console.jobs
    await jobs.enqueue_many("emails", [{"n": n} for n in range(2)])
    refused = await console.http.post("/queues/emails/pause", headers=bearer(VIEWER))
    problem(refused, 403, "ADMIN_REQUIRED")
    unknown = await console.http.post("/queues/nope/pause", headers=bearer(ADMIN))
    problem(unknown, 404, "QUEUE_NOT_FOUND")
    assert (
        await console.http.get("/queues/emails/pause", headers=bearer(ADMIN))
    ).status_code == 405
    answer = await console.http.post("/queues/emails/pause", headers=bearer(ADMIN))
    assert answer.status_code == 200, answer.text
    summary = answer.json()["data"]
    assert summary["queue"] == "emails" and summary["paused"] is True
    assert summary["held"] == {"paused": 2}
    assert await jobs.claim("emails", batch=5) == []
    listed = (await console.http.get("/jobs", headers=bearer(VIEWER))).json()["data"]
    assert {item["held_by"] for item in listed} == {"paused"}
    again = await console.http.post("/queues/emails/pause", headers=bearer(ADMIN))
    assert again.status_code == 200 and again.json()["data"]["paused"] is True
    resumed = await console.http.post("/queues/emails/resume", headers=bearer(ADMIN))
    assert resumed.json()["data"]["paused"] is False
    assert len(await jobs.claim("emails", batch=5)) == 2
    assert [row[:6] for row in audit_rows(console.url)] == [
        ("ops@example.com", "pause", "emails", None, "ok", None),
        ("ops@example.com", "pause", "emails", None, "refused", "QUEUE_ALREADY_PAUSED"),
        ("ops@example.com", "resume", "emails", None, "ok", None),
    ]
    audit = (await console.http.get("/audit", headers=bearer(ADMIN))).json()["data"]
    assert [entry["action"] for entry in audit] == ["resume", "pause", "pause"]


async def test_search_by_id_dedupe_key_code_and_time(console: Inbox) -> None:
    jobs = console.jobs
    handler_dead = await spent_job(jobs, RuntimeError("boom"))
    upstream_dead = await spent_job(jobs, Unreachable("down"))
    keyed = await jobs.enqueue("emails", {"n": 1}, dedupe_key="order-42")
    other = await jobs.enqueue("reports", {"n": 2})

    async def ids(**params: Any) -> list[int]:
        answer = await console.http.get("/jobs", params=params, headers=bearer(VIEWER))
        assert answer.status_code == 200, answer.text
        return [item["id"] for item in answer.json()["data"]]

    assert await ids(id=keyed, queue="emails") == [keyed]
    assert other in await ids(id=other)
    assert await ids(dedupe_key="order-42") == [keyed]
    # a dead job's cause of death is searchable next to its MAX_ATTEMPTS
    assert await ids(code="HANDLER_ERROR") == [handler_dead]
    assert await ids(code="UPSTREAM_DOWN") == [upstream_dead]
    assert sorted(await ids(code="MAX_ATTEMPTS")) == sorted([handler_dead, upstream_dead])
    assert await ids(code="HANDLER_ERROR", state="queued") == []
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    earlier = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    assert await ids(since=later) == []
    assert len(await ids(since=earlier, until=later)) == 4
    assert await ids(until=earlier) == []
    # the list's code column: the cause next to MAX_ATTEMPTS
    listed = (await console.http.get("/jobs", headers=bearer(VIEWER))).json()["data"]
    causes = {item["id"]: (item["last_code"], item["cause"]) for item in listed}
    assert causes[handler_dead] == ("MAX_ATTEMPTS", "HANDLER_ERROR")
    assert causes[upstream_dead] == ("MAX_ATTEMPTS", "UPSTREAM_DOWN")
    assert causes[keyed] == (None, None)
    one = (await console.http.get(f"/jobs/emails/{upstream_dead}", headers=bearer(VIEWER))).json()
    assert one["data"]["cause"] == "UPSTREAM_DOWN"


async def test_search_pages_with_cursors_bound_to_the_filters(console: Inbox) -> None:
    jobs = console.jobs
    made = [await spent_job(jobs, RuntimeError("boom")) for _ in range(3)]
    params = {"code": "HANDLER_ERROR", "limit": "2"}
    first = await console.http.get("/jobs", params=params, headers=bearer(VIEWER))
    cursor = first.json()["meta"]["next_cursor"]
    assert cursor
    second = await console.http.get(
        "/jobs", params={**params, "cursor": cursor}, headers=bearer(VIEWER)
    )
    seen = [i["id"] for i in first.json()["data"]] + [i["id"] for i in second.json()["data"]]
    assert seen == sorted(made, reverse=True)
    assert second.json()["meta"]["next_cursor"] is None
    moved = await console.http.get(
        "/jobs", params={"code": "RETRY", "limit": "2", "cursor": cursor}, headers=bearer(VIEWER)
    )
    problem(moved, 400, "CURSOR_INVALID")


@pytest.mark.parametrize(
    "params",
    [
        {"code": "lower"},
        {"id": "x1"},
        {"id": "99999999999999999999"},
        {"since": "yesterday"},
        {"since": "2026-01-02T00:00:00Z", "until": "2026-01-01T00:00:00Z"},
        {"dedupe_key": "k" * 300},
    ],
)
async def test_bad_search_filters_are_400(inbox: Inbox, params: dict[str, str]) -> None:
    answer = await inbox.http.get("/jobs", params=params, headers=bearer(VIEWER))
    problem(answer, 400, "FILTER_INVALID")


def bulk_headers(key: str, token: str = ADMIN) -> dict[str, str]:
    return {**bearer(token), "Idempotency-Key": key}


async def test_bulk_cancel_checks_the_count_and_audits_each_job(console: Inbox) -> None:
    jobs = console.jobs
    live = [await jobs.enqueue("emails", {"n": n}, context={"tenant": "acme"}) for n in range(3)]
    await jobs.enqueue("emails", {"n": 9}, context={"tenant": "other"})
    body = {"filter": {"queue": "emails", "tenant": "acme"}, "expected": 2}
    missing_key = await console.http.post("/jobs/bulk/cancel", json=body, headers=bearer(ADMIN))
    problem(missing_key, 400, "IDEMPOTENCY_KEY_MISSING")
    viewer = await console.http.post(
        "/jobs/bulk/cancel", json=body, headers=bulk_headers("v", VIEWER)
    )
    problem(viewer, 403, "ADMIN_REQUIRED")
    changed = await console.http.post("/jobs/bulk/cancel", json=body, headers=bulk_headers("b1"))
    problem(changed, 409, "BULK_COUNT_CHANGED")
    assert changed.json()["meta"] == {"count": 3}
    assert all(row[1] != "cancel" for row in audit_rows(console.url))  # nothing acted
    body["expected"] = 3
    answer = await console.http.post("/jobs/bulk/cancel", json=body, headers=bulk_headers("b2"))
    assert answer.status_code == 200, answer.text
    assert answer.json()["data"] == {"matched": 3, "done": 3, "refused": 0}
    repeat = await console.http.post("/jobs/bulk/cancel", json=body, headers=bulk_headers("b2"))
    assert repeat.json()["data"] == answer.json()["data"]
    assert repeat.headers.get("Idempotency-Replayed") == "true"
    for job_id in live:
        record = await jobs.get("emails", job_id)
        assert record is not None and record.state == "cancelled"
    rows = audit_rows(console.url)
    assert sorted(row[3] for row in rows if row[1] == "cancel") == sorted(live)
    [call] = [row for row in rows if row[1] == "bulk_cancel"]
    assert call[2] == "emails" and call[3] is None
    assert call[6] == {
        "filter": {"queue": "emails", "tenant": "acme"},
        "expected": 3,
        "matched": 3,
        "done": 3,
        "refused": 0,
    }


async def test_bulk_replay_goes_through_the_single_replays_path(console: Inbox) -> None:
    jobs = console.jobs
    dead = [await spent_job(jobs, RuntimeError("boom")) for _ in range(2)]
    already = await spent_job(jobs, Unreachable("down"))
    assert await jobs.replay("emails", already) is not None
    body = {"filter": {"queue": "emails", "state": "dead"}, "expected": 3}
    answer = await console.http.post("/jobs/bulk/replay", json=body, headers=bulk_headers("r1"))
    assert answer.status_code == 200, answer.text
    # the one replayed already is refused as a single replay would refuse it
    assert answer.json()["data"] == {"matched": 3, "done": 2, "refused": 1}
    rows = [row for row in audit_rows(console.url) if row[1] == "replay"]
    assert sorted((row[3], row[4], row[5]) for row in rows) == sorted(
        [(dead[0], "ok", None), (dead[1], "ok", None), (already, "refused", "JOB_ALREADY_REPLAYED")]
    )
    for job_id in dead:
        record = await jobs.get("emails", job_id)
        assert record is not None and record.replayed_by is not None


@pytest.mark.parametrize("backend", ["table", "pgmq"])
async def test_bulk_replay_counts_what_the_replay_rules_and_check_refuse(
    fresh_database: Any, backend: str
) -> None:
    url = fresh_database(backend)
    denied: set[tuple[str, int]] = set()  # ids are per queue on pgmq

    def still_allowed(record: drainpipe.JobRecord) -> str | None:
        return "NOT_AUTHORIZED" if (record.queue, record.id) in denied else None

    jobs = Jobs(url, QUEUES, replay_check=still_allowed)
    blocked = Jobs(url, QUEUES, policies={"reports": drainpipe.QueuePolicy(replayable=False)})
    await blocked.ensure_policies()
    try:
        allowed, refused = [await spent_job(jobs, RuntimeError("boom")) for _ in range(2)]
        denied.add(("emails", refused))
        reports = [await spent_job(jobs, RuntimeError("boom"), "reports") for _ in range(2)]
        transport = httpx.ASGITransport(app=make_app(jobs))
        async with httpx.AsyncClient(transport=transport, base_url="http://inbox") as http:
            emails = {"filter": {"queue": "emails", "state": "dead"}, "expected": 2}
            answer = await http.post("/jobs/bulk/replay", json=emails, headers=bulk_headers("e"))
            assert answer.json()["data"] == {"matched": 2, "done": 1, "refused": 1}, answer.text
            body = {"filter": {"queue": "reports", "state": "dead"}, "expected": 2}
            answer = await http.post("/jobs/bulk/replay", json=body, headers=bulk_headers("r"))
            assert answer.json()["data"] == {"matched": 2, "done": 0, "refused": 2}, answer.text
        outcomes = {
            (row[2], row[3]): (row[4], row[5]) for row in audit_rows(url) if row[1] == "replay"
        }
        assert outcomes == {
            ("emails", allowed): ("ok", None),
            ("emails", refused): ("refused", "NOT_AUTHORIZED"),
            ("reports", reports[0]): ("refused", "REPLAY_BLOCKED"),
            ("reports", reports[1]): ("refused", "REPLAY_BLOCKED"),
        }
    finally:
        await jobs.close()
        await blocked.close()


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"filter": {}, "expected": 10_001}, "BULK_TOO_LARGE"),
        ({"filter": {"queue": "emails"}, "expected": -1}, "BODY_INVALID"),
        ({"filter": {"colour": "red"}, "expected": 1}, "FILTER_INVALID"),
        ({"filter": {"state": "sleeping"}, "expected": 1}, "STATE_INVALID"),
        ({"filter": {"queue": "nope"}, "expected": 1}, "QUEUE_UNKNOWN"),
        ({"filter": {"code": "bad code"}, "expected": 1}, "FILTER_INVALID"),
        ({"filter": "all", "expected": 1}, "FILTER_INVALID"),
        ([1, 2], "BODY_INVALID"),
    ],
)
async def test_bad_bulk_calls_are_400(inbox: Inbox, body: Any, code: str) -> None:
    answer = await inbox.http.post("/jobs/bulk/cancel", json=body, headers=bulk_headers("x"))
    problem(answer, 400, code)


@pytest.mark.parametrize("opener", [b"[", b'{"a":'])
async def test_a_bulk_body_nested_past_the_recursion_limit_is_400(
    inbox: Inbox, opener: bytes
) -> None:
    # the 2,500-request fuzz found it: json.loads raised RecursionError, a 500
    closer = b"]" if opener == b"[" else b"}"
    answer = await inbox.http.post(
        "/jobs/bulk/replay",
        content=opener * 3000 + b"1" + closer * 3000,
        headers={**bulk_headers("deep"), "Content-Type": "application/json"},
    )
    problem(answer, 400, "BODY_INVALID")


async def test_a_filter_matching_more_than_10000_is_400(console: Inbox) -> None:
    await console.jobs.enqueue_many("emails", [{"n": n} for n in range(10_001)])
    body = {"filter": {"queue": "emails"}, "expected": 10_000}
    answer = await console.http.post("/jobs/bulk/cancel", json=body, headers=bulk_headers("big"))
    problem(answer, 400, "BULK_TOO_LARGE")


async def test_a_body_over_64_kib_is_413(inbox: Inbox) -> None:
    body = b'{"filter": {"tenant": "' + b"x" * 70_000 + b'"}, "expected": 1}'
    answer = await inbox.http.post(
        "/jobs/bulk/cancel",
        content=body,
        headers={**bulk_headers("huge"), "Content-Type": "application/json"},
    )
    problem(answer, 413, "BODY_TOO_LARGE")


async def test_metrics_in_the_prometheus_text_format(console: Inbox) -> None:
    await console.jobs.enqueue("emails", {"n": 1})
    await console.jobs.pause("reports")
    assert (await console.http.get("/metrics")).status_code == 401
    wrong = await console.http.get("/metrics", headers=bearer("not-the-metrics-token-xyz"))
    assert wrong.status_code == 401
    for token in (METRICS_TOKEN, VIEWER):
        answer = await console.http.get("/metrics", headers=bearer(token))
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")
        lines = answer.text.splitlines()
        assert 'drainpipe_jobs{queue="emails",state="queued"} 1' in lines
        assert 'drainpipe_jobs_finished_total{queue="emails",outcome="succeeded"} 0' in lines
        assert 'drainpipe_queue_paused{queue="reports"} 1' in lines
        assert 'drainpipe_queue_paused{queue="emails"} 0' in lines
        assert any(
            line.startswith('drainpipe_queue_oldest_ready_seconds{queue="emails"}')
            for line in lines
        )
        assert "# TYPE drainpipe_jobs_finished_total counter" in lines
    # the metrics token reads the metrics and nothing else
    assert (await console.http.get("/queues", headers=bearer(METRICS_TOKEN))).status_code == 401


async def test_the_clients_have_the_console_calls(console: Inbox) -> None:
    jobs = console.jobs
    await jobs.enqueue_many("emails", [{"n": n} for n in range(2)])
    transport = httpx.ASGITransport(app=console.app)
    async with drainpipe.ManagementClient("http://inbox", ADMIN, transport=transport) as client:
        summaries = await client.queues()
        assert [s["queue"] for s in summaries] == list(QUEUES)
        assert (await client.pause("emails"))["paused"] is True
        assert (await client.resume("emails"))["paused"] is False
        with pytest.raises(DrainpipeError) as changed:
            await client.bulk_cancel({"queue": "emails"}, 5)
        assert changed.value.code == "BULK_COUNT_CHANGED"
        assert changed.value.meta == {"count": 2}  # type: ignore[attr-defined]
        since = datetime.now(UTC) - timedelta(hours=1)
        done = await client.bulk_cancel({"queue": "emails", "since": since}, 2)
        assert done == {"matched": 2, "done": 2, "refused": 0}
        replayed = await client.bulk_replay({"queue": "emails", "state": "dead"}, 0)
        assert replayed == {"matched": 0, "done": 0, "refused": 0}


def test_the_sync_client_has_the_console_calls(fresh_database: Any) -> None:
    url = str(fresh_database("table"))
    jobs = Jobs(url, QUEUES)
    served = ServedApp(make_app(jobs))
    try:
        with sync.ManagementClient(served.url, ADMIN, backoff=0) as client:
            assert [s["queue"] for s in client.queues()] == list(QUEUES)
            assert client.pause("reports")["paused"] is True
            assert client.resume("reports")["paused"] is False
            empty = {"matched": 0, "done": 0, "refused": 0}
            assert client.bulk_cancel({"queue": "reports"}, 0) == empty
            assert client.bulk_replay({"queue": "reports"}, 0) == empty
            with pytest.raises(DrainpipeError) as changed:
                client.bulk_cancel({"queue": "reports"}, 3)
            assert changed.value.code == "BULK_COUNT_CHANGED"
    finally:
        served.run(jobs.close())
        served.stop()


async def test_the_finished_counts_follow_completions_cancels_and_purges(console: Inbox) -> None:
    """The overview's finished counts are kept by triggers (a batch of completions, a fused
    turn, a dead end, a cancel, a purge): they always equal a count of the records."""
    jobs = console.jobs

    async def counts() -> dict[str, int]:
        answer = await console.http.get("/queues", headers=bearer(VIEWER))
        return {e["queue"]: e["counts"] for e in answer.json()["data"]}["emails"]

    async def recount() -> dict[str, int]:
        found: dict[str, int] = dict.fromkeys(
            ("queued", "leased", "retry_wait", "succeeded", "dead", "cancelled"), 0
        )
        page = await jobs.list_jobs("emails", limit=500)
        for record in page.items:
            found[record.state] += 1
        return found

    assert (await counts())["succeeded"] == 0  # the queue is kept from here on
    await spent_job(jobs, RuntimeError("boom"))
    await jobs.enqueue_many("emails", [{"n": n} for n in range(12)])
    batch = await jobs.claim("emails", batch=4, lease=60)
    assert all(await jobs.backend.complete_many(batch))  # type: ignore[attr-defined]
    more = await jobs.claim("emails", batch=2, lease=60)
    backend: Any = jobs.backend
    await backend.complete_and_claim("emails", more, lease=60, batch=1)
    [live] = await jobs.claim("emails", lease=60)
    assert await jobs.cancel("emails", live.id)
    assert await counts() == await recount()
    assert (await counts())["succeeded"] == 6
    assert await jobs.purge_archive("emails", older_than=0, dead_older_than=0) == 8
    assert await counts() == await recount()
    assert (await counts())["succeeded"] == 0 and (await counts())["dead"] == 0
