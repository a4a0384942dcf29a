"""functions/executor.py over HTTP: a real uvicorn serving api/ as Vercel would, executors
claiming and settling the example app's jobs with scoped tokens from ``EXECUTOR_TOKENS``."""

from __future__ import annotations

import httpx
import pytest
from pydantic import BaseModel

import drainpipe
from drainpipe.dev.functions import FunctionsApp
from drainpipe.dev.server import start_server
from drainpipe.jobs.executor import executor_tokens
from tests.conftest import ROOT

WORKER = "exe_worker_token_0123456789"
OPS = "exe_ops_token_0123456789abc"


class Email(BaseModel):
    to: str
    subject: str = ""


def test_executor_tokens_reads_scopes_and_names_bad_entries_by_position() -> None:
    table = executor_tokens(f" {WORKER}=emails|reports , {OPS}=*,")
    assert table == {WORKER: frozenset({"emails", "reports"}), OPS: "*"}
    for text, message in [
        ("", "EXECUTOR_TOKENS lists no token"),
        (f"{WORKER}", "entry 1 must read token=queue|queue or token=*"),
        (f"{OPS}=*,{WORKER}=emails||x", "entry 2 must read token=queue|queue or token=*"),
        ("short=emails", "entry 1: tokens are at least 16 characters"),
        (f"{OPS}=*,{OPS}=emails", "entry 2 repeats an earlier token"),
    ]:
        with pytest.raises(ValueError, match="EXECUTOR_TOKENS") as caught:
            executor_tokens(text)
        assert message in str(caught.value)
        assert WORKER not in str(caught.value) and OPS not in str(caught.value)


async def test_executor_function_claims_and_settles_over_http(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", db_url)
    monkeypatch.setenv("EXECUTOR_TOKENS", f"{WORKER}=emails,{OPS}=*")
    monkeypatch.delenv("EXECUTOR_LEASE_SECRET", raising=False)
    monkeypatch.setenv("EXECUTOR_BUDGET", "3")
    jobs = drainpipe.Jobs(db_url, {"emails": Email})
    worker = {"authorization": f"Bearer {WORKER}"}
    try:
        job_id = await jobs.enqueue("emails", {"to": "a@x", "subject": "hi"})
        server = await start_server(FunctionsApp.load(ROOT / "api"))
        try:
            async with httpx.AsyncClient(base_url=server.url + "/api/executor") as client:
                denied = await client.post("/claim", json={"queues": ["emails"]})
                unknown = await client.post("/claim", json={"queues": ["sms"]}, headers=worker)
                bad = await client.post("/claim", json={"queues": ["emails"], "max": 11},
                                        headers=worker)  # fmt: skip
                claimed = await client.post(
                    "/claim", json={"queues": ["emails"], "max": 10, "lease": 60}, headers=worker
                )
                [job] = claimed.json()["jobs"]
                lease = job["lease_id"]
                # the long poll of an empty queue answers within the budget, empty
                empty = await client.post(
                    "/claim", json={"queues": ["emails"], "wait": 0.3}, headers=worker
                )
                extended = await client.post(
                    "/settle",
                    json={"lease_id": lease, "action": "extend", "seconds": 30},
                    headers=worker,
                )
                done = await client.post(
                    "/settle", json={"lease_id": lease, "action": "complete"}, headers=worker
                )
                again = await client.post(
                    "/settle", json={"lease_id": lease, "action": "complete"}, headers=worker
                )
                forged = await client.post(
                    "/settle",
                    json={"lease_id": lease[:-2] + "xx", "action": "complete"},
                    headers=worker,
                )
        finally:
            await server.stop()
        assert denied.status_code == 401 and denied.json()["code"] == "UNAUTHORIZED"
        assert unknown.status_code == 404 and unknown.json()["code"] == "QUEUE_NOT_FOUND"
        assert bad.status_code == 400 and bad.json()["code"] == "INVALID_PARAMETER"
        assert claimed.status_code == 200, claimed.text
        assert job["id"] == job_id and job["queue"] == "emails" and job["attempt"] == 1
        assert job["payload"] == {"to": "a@x", "subject": "hi"}
        assert lease.startswith("lse_")
        assert empty.status_code == 200 and empty.json() == {"jobs": []}
        assert extended.status_code == 200 and extended.json()["state"] == "running"
        assert done.status_code == 200
        assert done.json() == {"id": job_id, "queue": "emails", "state": "succeeded"}
        # the lease that completed the job completes it again: 200, as an agent's repeated ack
        assert again.status_code == 200 and again.json() == done.json()
        assert forged.status_code == 409 and forged.json()["code"] == "LEASE_LOST"
        stats = (await jobs.stats(["emails"]))["emails"]
        assert (stats.ready, stats.in_flight, stats.succeeded) == (0, 0, 1)
    finally:
        await jobs.backend.db.close()  # type: ignore[attr-defined]


async def test_a_token_naming_an_undeclared_queue_is_not_configured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from drainpipe.dev.functions import load_function

    monkeypatch.setenv("DATABASE_URL", "postgresql://127.0.0.1:1/nowhere")
    monkeypatch.setenv("EXECUTOR_TOKENS", f"{WORKER}=emails|sms")
    transport = httpx.ASGITransport(app=load_function(ROOT / "api/executor.py"))
    async with httpx.AsyncClient(transport=transport, base_url="http://x") as client:
        response = await client.post("/api/executor/claim", json={})
    assert response.status_code == 503 and response.json()["code"] == "NOT_CONFIGURED"
    assert response.json()["detail"] == (
        "EXECUTOR_TOKENS / EXECUTOR_LEASE_SECRET: tokens name undeclared queues: sms"
    )
    assert WORKER not in response.text
