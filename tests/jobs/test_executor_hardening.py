"""The executor app's hardening (docs/reference.md, "Hardening"): lease ids only in bodies,
unguessable and different per claim, the old per-lease routes gone, a repeated complete
answered 200, capped bodies and cross-site writes."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

import drainpipe
from drainpipe.dev.server import start_server
from drainpipe.engine.core import mint_lease_id, read_lease_id
from drainpipe.jobs.executor import LEASE_PREFIX
from tests.streamed import post_streamed

TOKEN = "emails-token-0123456789abcdef"
LEASE_SECRET = "executor-lease-secret-0123456789"
AUTH = {"authorization": f"Bearer {TOKEN}"}


@pytest.fixture
async def executor(jobs_db_url: str) -> AsyncIterator[tuple[Any, drainpipe.Jobs]]:
    jobs = drainpipe.Jobs(jobs_db_url, {"emails": dict})
    app = jobs.executor_app(tokens={TOKEN: ["emails"]}, budget=3, lease_secret=LEASE_SECRET)
    try:
        yield app, jobs
    finally:
        await jobs.close()


def client(app: Any, **headers: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="https://executor.example",
        headers={**AUTH, **headers},
    )


async def test_lease_ids_travel_in_bodies_and_differ_per_claim(
    executor: tuple[Any, drainpipe.Jobs],
) -> None:
    app, jobs = executor
    await jobs.enqueue("emails", {"to": "a@x"})
    async with client(app) as http:
        [job] = (await http.post("/claim", json={"queues": ["emails"]})).json()["jobs"]
        lease = job["lease_id"]
        # the id the earlier releases minted was a function of job, attempt and queue only
        decoded = read_lease_id(LEASE_SECRET.encode(), LEASE_PREFIX, lease)
        assert decoded is not None and decoded[:2] == (job["id"], 1)
        tags = {
            mint_lease_id(LEASE_SECRET.encode(), LEASE_PREFIX, job["id"], 1, decoded[2][:8] * 2),
            mint_lease_id(LEASE_SECRET.encode(), LEASE_PREFIX, job["id"], 1, bytes(16)),
        }
        assert lease not in tags and decoded[2][8:] != decoded[2][:8]
        # the old per-lease route: 410, without the id in the answer
        old = await http.post(f"/jobs/{lease}/complete", json={})
        assert old.status_code == 410 and old.json()["code"] == "SETTLE_MOVED"
        assert lease not in old.text
        done = await http.post("/settle", json={"lease_id": lease, "action": "complete"})
        assert done.status_code == 200 and done.json()["state"] == "succeeded"
        again = await http.post("/settle", json={"lease_id": lease, "action": "complete"})
        assert again.status_code == 200 and again.json() == done.json()
        for bad in (
            {"lease_id": lease},
            {"lease_id": lease, "action": "cancel"},
            {"action": "fail"},
        ):
            refused = await http.post("/settle", json=bad)
            assert refused.status_code == 400 and refused.json()["code"] == "INVALID_PARAMETER"
        # a fail after the completion is a lost lease, not a 200
        late = await http.post("/settle", json={"lease_id": lease, "action": "fail", "error": "x"})
        assert late.status_code == 409 and late.json()["code"] == "LEASE_LOST"


async def test_two_claims_of_the_same_attempt_number_get_different_lease_ids(
    executor: tuple[Any, drainpipe.Jobs],
) -> None:
    app, jobs = executor
    await jobs.enqueue_many("emails", [{"n": 1}, {"n": 2}])
    async with client(app) as http:
        claimed = (await http.post("/claim", json={"queues": ["emails"], "max": 2})).json()["jobs"]
    first, second = (
        read_lease_id(LEASE_SECRET.encode(), LEASE_PREFIX, j["lease_id"]) for j in claimed
    )
    assert first is not None and second is not None
    # same queue, same attempt: the random halves differ
    assert first[2][:8] == second[2][:8] and first[2][8:] != second[2][8:]


async def test_bodies_are_capped_at_the_largest_payload_plus_16_kib(
    executor: tuple[Any, drainpipe.Jobs],
) -> None:
    app, _ = executor
    server = await start_server(app)
    try:
        big = await post_streamed(server.port, "/claim", AUTH, 20 * 1024 * 1024)
        fits = await post_streamed(server.port, "/claim", AUTH, 64 * 1024 + 16 * 1024)
    finally:
        await server.stop()
    assert big.status == 413 and json.loads(big.body)["code"] == "BODY_TOO_LARGE"
    assert big.sent < 5 * 1024 * 1024
    assert fits.status == 400  # read whole (80 KiB of "x"), then refused as not JSON


async def test_a_cookie_carrying_write_from_another_origin_is_refused(
    executor: tuple[Any, drainpipe.Jobs],
) -> None:
    app, _ = executor
    async with client(app, cookie="session=1") as http:
        evil = await http.post(
            "/claim", json={"queues": ["emails"]}, headers={"origin": "https://evil.example"}
        )
        own = await http.post(
            "/claim", json={"queues": ["emails"]}, headers={"origin": "https://executor.example"}
        )
    assert evil.status_code == 403 and evil.json()["code"] == "CROSS_SITE_REQUEST"
    assert own.status_code == 200
