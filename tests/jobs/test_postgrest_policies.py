"""Queue policies and the executor app over PostgREST (emulated by respx on real Postgres,
both storages): a policy stored over HTTPS is what the database enforces, with the kinds and
codes of a direct connection; retention runs; ``jobs.executor_app`` claims and settles
through ``PostgrestBackend``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from drainpipe import DrainpipeError, Jobs, Keyring, QueuePolicy
from drainpipe.backends.capabilities import SupportsPayloadRewrite, SupportsPolicies
from drainpipe.backends.postgrest import PostgrestBackend
from tests.conftest import connect
from tests.jobs.postgrest_emulation import (
    ANON_KEY,
    BASE,
    SERVICE_KEY,
    PostgrestEmulation,
    postgrest_emulation,
)

QUEUES: dict[str, Any] = {"inbox": dict[str, Any], "free": dict[str, Any]}
SMALL = QueuePolicy(max_payload_bytes=200, max_pending=3, max_delay=3600, lease=5, max_lease=10)
EMAILS = "emails-token-0123456789abcdef"


@pytest.fixture
async def server(jobs_db_url: str) -> AsyncIterator[PostgrestEmulation]:
    async with postgrest_emulation(jobs_db_url) as (emulation, _):
        yield emulation


@pytest.fixture
async def backend(server: PostgrestEmulation) -> AsyncIterator[PostgrestBackend]:
    async with PostgrestBackend(BASE, SERVICE_KEY) as made:
        yield made


def refused(exc: pytest.ExceptionInfo[DrainpipeError]) -> tuple[str, str | None, int]:
    return (exc.value.kind, exc.value.code, exc.value.status)


async def test_a_policy_stored_over_https_is_what_the_database_enforces(
    backend: PostgrestBackend, server: PostgrestEmulation, jobs_db_url: str
) -> None:
    assert isinstance(backend, SupportsPolicies) and isinstance(backend, SupportsPayloadRewrite)
    declared = Jobs(backend, QUEUES, policies={"inbox": SMALL})
    assert await declared.ensure_policies() == 1
    assert await declared.ensure_policies() == 1  # idempotent
    assert server.calls()[-1][0] == "ensure_policy_v3"
    assert server.calls()[-1][1]["max_pending"] == 3
    # writers that never declared it, over HTTPS and over a direct connection
    over_https = Jobs(backend, QUEUES)
    direct = Jobs(jobs_db_url, QUEUES)
    for writer in (over_https, direct):
        with pytest.raises(DrainpipeError) as too_large:
            await writer.enqueue("inbox", {"text": "x" * 600})
        assert refused(too_large)[:2] == ("validation", "PAYLOAD_TOO_LARGE")
        with pytest.raises(DrainpipeError) as too_far:
            await writer.enqueue("inbox", {"a": 1}, delay=7200)
        assert refused(too_far)[:2] == ("validation", "SCHEDULE_TOO_FAR")
    await over_https.enqueue_many("inbox", [{"n": 1}, {"n": 2}])
    await over_https.enqueue("inbox", {"n": 3})
    failures = []
    for writer in (over_https, direct):
        with pytest.raises(DrainpipeError) as full:
            await writer.enqueue("inbox", {"n": 4})
        failures.append(refused(full))
    assert failures == [("rate_limited", "QUEUE_FULL", 429)] * 2
    with pytest.raises(DrainpipeError) as full_batch:
        await over_https.enqueue_many("inbox", [{"n": 4}, {"n": 5}])
    assert refused(full_batch) == ("rate_limited", "QUEUE_FULL", 429)
    # a lease past max_lease is refused by the database too, not silently granted
    with pytest.raises(DrainpipeError) as long_lease:
        await over_https.claim("inbox", lease=60)
    assert refused(long_lease)[:2] == ("invalid_request", "LEASE_TOO_LONG")
    (job,) = await over_https.claim("inbox", lease=5)
    assert await over_https.complete(job)
    await over_https.enqueue("inbox", {"n": 4})  # the completed job freed its place
    await over_https.enqueue_many("free", [{"n": i} for i in range(10)])  # no policy there
    await direct.close()


async def test_only_the_service_role_manages_policies(server: PostgrestEmulation) -> None:
    async with PostgrestBackend(BASE, ANON_KEY) as anon:
        for fn, params in (
            ("ensure_policy_v3", {"queue": "inbox", "concurrency": 1}),
            ("replay_v3", {"queue": "inbox", "id": 1}),
            ("retry_dead_v2", {"queue": "inbox"}),
            ("apply_retention_v1", {}),
            ("live_payloads_v1", {"queue": "inbox"}),
            ("rewrite_payload_v1", {"queue": "inbox", "id": 1, "old_payload": 1, "new_payload": 2}),
        ):
            with pytest.raises(DrainpipeError) as caught:
                await anon.rpc(fn, params)
            assert caught.value.kind == "forbidden", fn


async def test_retention_runs_over_https(
    backend: PostgrestBackend, jobs_db_url: str, backend_name: str
) -> None:
    jobs = Jobs(backend, QUEUES, policies={"inbox": QueuePolicy(retention=60)})
    await jobs.ensure_policies()
    await jobs.enqueue("inbox", {"dies": True}, max_attempts=1)
    await jobs.enqueue("inbox", {"done": True})
    await jobs.enqueue("inbox", {"live": True}, delay=600)
    (dying,) = await jobs.claim("inbox", lease=5)
    assert await jobs.fail(dying, "boom") == "dead"
    (done,) = await jobs.claim("inbox", lease=5)
    assert await jobs.complete(done)
    assert await jobs.apply_retention() == 0  # nothing is 60 s old yet
    async with await connect(jobs_db_url) as conn:
        if backend_name == "table":
            await conn.execute(
                "UPDATE drainpipe.job_messages SET finished_at = finished_at - interval '2 minutes'"
                " WHERE finished_at IS NOT NULL"
            )
        else:
            await conn.execute(
                "UPDATE pgmq.a_inbox SET archived_at = archived_at - interval '2 minutes'"
            )
    assert await jobs.apply_retention() == 2  # the dead job and the completed one
    assert await jobs.list_dead("inbox") == []
    assert (await jobs.stats(["inbox"]))["inbox"].delayed == 1  # the live one is kept
    assert await jobs.apply_retention_if_due(3600) is not None
    assert await jobs.apply_retention_if_due(3600) is None


async def test_payload_reads_and_rewrites_over_https(backend: PostgrestBackend) -> None:
    jobs = Jobs(backend, QUEUES)
    first = await jobs.enqueue("inbox", {"n": 1})
    second = await jobs.enqueue("inbox", {"n": 2})
    live = await backend.live_payloads("inbox", after=0, limit=10)
    assert [job_id for job_id, _ in live] == [first, second]
    stored = live[0][1]
    assert await backend.rewrite_payload("inbox", first, stored, {"n": 10})
    assert not await backend.rewrite_payload("inbox", first, stored, {"n": 11})  # not old now
    assert await backend.live_payloads("inbox", after=first, limit=10) == [live[1]]
    claimed = await jobs.claim("inbox", lease=5, batch=2)
    assert {job.id: job.payload for job in claimed} == {first: {"n": 10}, second: {"n": 2}}


async def test_reencrypt_over_https_rewrites_old_keys_and_stays_readable(
    backend: PostgrestBackend,
) -> None:
    k1, k2 = Keyring.new_entry("k1"), Keyring.new_entry("k2")
    sealed = {"inbox": QueuePolicy(encrypt=True)}
    old = Jobs(backend, QUEUES, policies=sealed, keyring=Keyring.parse(k1))
    for n in range(3):
        await old.enqueue("inbox", {"n": n})
    rotated = Jobs(backend, QUEUES, policies=sealed, keyring=Keyring.parse(f"{k2},{k1}"))
    await rotated.enqueue("inbox", {"n": 3})  # under k2 already
    assert await rotated.reencrypt("inbox", batch=2) == 3  # pages through live_payloads_v1
    assert await rotated.reencrypt("inbox") == 0
    only_new = Jobs(backend, QUEUES, policies=sealed, keyring=Keyring.parse(k2))
    claimed = await only_new.claim("inbox", lease=5, batch=10)
    assert sorted(job.payload["n"] for job in claimed) == [0, 1, 2, 3]


# -- the executor app on a PostgrestBackend ------------------------------------------------


@pytest.fixture
async def executor(
    backend: PostgrestBackend,
) -> AsyncIterator[tuple[httpx.AsyncClient, Jobs]]:
    jobs = Jobs(backend, {"emails": dict, "reports": dict})
    app = jobs.executor_app(tokens={EMAILS: ["emails"]}, budget=3)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://executor",
        headers={"authorization": f"Bearer {EMAILS}"}, timeout=20,
    ) as http:  # fmt: skip
        yield http, jobs


async def test_the_executor_claims_and_settles_through_postgrest(
    executor: tuple[httpx.AsyncClient, Jobs], server: PostgrestEmulation
) -> None:
    http, jobs = executor
    await jobs.enqueue("emails", {"to": "a@x"})
    answer = await http.post("/claim", json={"queues": ["emails"], "max": 10, "lease": 1})
    assert answer.status_code == 200, answer.text
    [job] = answer.json()["jobs"]
    assert (job["queue"], job["payload"], job["attempt"]) == ("emails", {"to": "a@x"}, 1)
    assert any(name == "claim_v1" for name, _ in server.calls())
    await asyncio.sleep(1.1)  # the 1 s lease runs out (the smallest the contract allows)
    [again] = (await http.post("/claim", json={"queues": ["emails"]})).json()["jobs"]
    assert again["id"] == job["id"] and again["attempt"] == 2
    stale = await http.post("/settle", json={"lease_id": job["lease_id"], "action": "complete"})
    assert stale.status_code == 409 and stale.json()["code"] == "LEASE_LOST"
    extend = await http.post(
        "/settle", json={"lease_id": again["lease_id"], "action": "extend", "seconds": 60}
    )
    assert extend.status_code == 200 and extend.json()["lease_until"], extend.text
    stale_extend = await http.post(
        "/settle", json={"lease_id": job["lease_id"], "action": "extend", "seconds": 60}
    )
    assert stale_extend.status_code == 409 and stale_extend.json()["code"] == "LEASE_LOST"
    done = await http.post("/settle", json={"lease_id": again["lease_id"], "action": "complete"})
    assert done.status_code == 200 and done.json()["state"] == "succeeded", done.text
    repeat = await http.post("/settle", json={"lease_id": again["lease_id"], "action": "complete"})
    assert repeat.status_code == 200, repeat.text
    # fail with a code, then a Skip-coded completion of the retry
    await jobs.enqueue("emails", {"to": "b@x"})
    [held] = (await http.post("/claim", json={"queues": "emails"})).json()["jobs"]
    failed = await http.post(
        "/settle",
        json={
            "lease_id": held["lease_id"],
            "action": "fail",
            "error": "smtp down",
            "code": "SMTP_DOWN",
            "retry_in": 0,
        },
    )
    assert failed.status_code == 200 and failed.json()["state"] == "queued", failed.text
    assert any(name == "fail_coded_v1" for name, _ in server.calls())
    [retry] = (await http.post("/claim", json={"queues": ["emails"]})).json()["jobs"]
    assert retry["attempt"] == 2
    skipped = await http.post(
        "/settle",
        json={"lease_id": retry["lease_id"], "action": "complete", "code": "NOTHING_TO_DO"},
    )
    assert skipped.status_code == 200, skipped.text
    record = await jobs.get("emails", retry["id"])
    assert record is not None and record.state == "succeeded"
