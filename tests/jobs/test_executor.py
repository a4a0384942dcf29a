"""``jobs.executor_app``: executors claim and settle jobs over HTTP with the agent inbox's
pull protocol (docs/reference.md section 11, last bullet), on both backends, real Postgres."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

import drainpipe

EMAILS = "emails-token-0123456789abcdef"
EVERYTHING = "all-queues-token-0123456789ab"


@pytest.fixture
async def client(jobs_db_url: str) -> AsyncIterator[tuple[httpx.AsyncClient, drainpipe.Jobs]]:
    jobs = drainpipe.Jobs(jobs_db_url, {"emails": dict, "reports": dict})
    app = jobs.executor_app(tokens={EMAILS: ["emails"], EVERYTHING: "*"}, budget=3)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://executor",
        headers={"authorization": f"Bearer {EMAILS}"}, timeout=20,
    ) as http:  # fmt: skip
        yield http, jobs
    await jobs.close()


async def test_claim_complete_and_a_stale_lease(client: tuple[httpx.AsyncClient, Any]) -> None:
    http, jobs = client
    await jobs.enqueue("emails", {"to": "a@x"})
    answer = await http.post("/claim", json={"queues": ["emails"], "max": 10, "lease": 1})
    assert answer.status_code == 200, answer.text
    [job] = answer.json()["jobs"]
    assert set(job) == {"id", "queue", "payload", "attempt", "lease_id", "lease_until"}
    assert (job["queue"], job["payload"], job["attempt"]) == ("emails", {"to": "a@x"}, 1)
    assert job["lease_id"].startswith("lse_")
    await asyncio.sleep(1.1)  # the 1 s lease runs out (the smallest the contract allows)
    [again] = (await http.post("/claim", json={"queues": ["emails"]})).json()["jobs"]
    assert again["id"] == job["id"] and again["attempt"] == 2
    stale = await http.post("/settle", json={"lease_id": job["lease_id"], "action": "complete"})
    assert stale.status_code == 409 and stale.json()["code"] == "LEASE_LOST"
    extend = await http.post(
        "/settle", json={"lease_id": again["lease_id"], "action": "extend", "seconds": 60}
    )
    assert extend.status_code == 200 and extend.json()["lease_until"]
    done = await http.post("/settle", json={"lease_id": again["lease_id"], "action": "complete"})
    assert done.status_code == 200 and done.json()["state"] == "succeeded"
    repeat = await http.post("/settle", json={"lease_id": again["lease_id"], "action": "complete"})
    assert repeat.status_code == 200 and repeat.json() == done.json()
    # the first attempt's lease stays lost after the job succeeded
    assert (
        await http.post("/settle", json={"lease_id": job["lease_id"], "action": "complete"})
    ).status_code == 409


async def test_fail_with_a_code_and_retry_in(client: tuple[httpx.AsyncClient, Any]) -> None:
    http, jobs = client
    await jobs.enqueue("emails", {"to": "b@x"})
    [job] = (await http.post("/claim", json={"queues": "emails"})).json()["jobs"]
    failed = await http.post(
        "/settle",
        json={
            "lease_id": job["lease_id"],
            "action": "fail",
            "error": "smtp down",
            "code": "SMTP_DOWN",
            "retry_in": 0,
        },
    )
    assert failed.status_code == 200 and failed.json()["state"] == "queued"
    [again] = (await http.post("/claim", json={"queues": ["emails"]})).json()["jobs"]
    assert again["attempt"] == 2
    bad = await http.post(
        "/settle",
        json={"lease_id": again["lease_id"], "action": "fail", "error": "x", "code": "lower"},
    )
    assert bad.status_code == 400
    skipped = await http.post(
        "/settle",
        json={"lease_id": again["lease_id"], "action": "complete", "code": "NOTHING_TO_DO"},
    )
    assert skipped.status_code == 200


async def test_token_scoping_and_bounds(client: tuple[httpx.AsyncClient, Any]) -> None:
    http, jobs = client
    await jobs.enqueue("reports", {"n": 1})
    outside = await http.post("/claim", json={"queues": ["reports"]})
    assert outside.status_code == 403 and outside.json()["code"] == "QUEUE_FORBIDDEN"
    nobody = await http.post(
        "/claim",
        json={"queues": ["emails"]},
        headers={"authorization": "Bearer nope-nope-nope-nope"},
    )
    assert nobody.status_code == 401
    for body in ({"queues": ["emails"], "max": 11}, {"queues": ["emails"], "wait": 31},
                 {"queues": ["emails"], "lease": 0}, {"queues": []}):  # fmt: skip
        assert (await http.post("/claim", json=body)).status_code == 400, body
    unknown = await http.post("/claim", json={"queues": ["nope"]})
    assert unknown.status_code == 404
    everything = {"authorization": f"Bearer {EVERYTHING}"}
    [job] = (await http.post("/claim", json={"queues": ["reports"]}, headers=everything)).json()[
        "jobs"
    ]
    # the emails token may not settle a reports lease either
    denied = await http.post("/settle", json={"lease_id": job["lease_id"], "action": "complete"})
    assert denied.status_code == 403
    forged = await http.post(
        "/settle",
        json={"lease_id": job["lease_id"][:-4] + "AAAA", "action": "complete"},
        headers=everything,
    )
    assert forged.status_code == 409


async def test_an_empty_claim_long_polls_within_the_budget(
    client: tuple[httpx.AsyncClient, Any],
) -> None:
    http, _ = client
    started = time.monotonic()
    answer = await http.post("/claim", json={"queues": ["emails"], "wait": 30})
    took = time.monotonic() - started
    assert answer.json() == {"jobs": []} and 1.5 <= took < 3.0  # budget 3 minus the reserve
