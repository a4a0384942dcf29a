"""``sync.ManagementClient`` against the real management app (uvicorn in a thread) on real
Postgres: pages, Problems as DrainpipeError with the server's kind/status/code, and
replay's retries with one key, as the async client's tests check them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest

from drainpipe import DrainpipeError, Jobs, sync
from tests.admin.browser import ServedApp
from tests.admin.conftest import ADMIN, QUEUES, VIEWER, make_app


class LosingTransport(httpx.BaseTransport):
    """Real HTTP; the first ``lose`` answers to a replay are lost on the way back (the
    request reached the server and ran)."""

    def __init__(self, lose: int = 0) -> None:
        self.inner = httpx.HTTPTransport()
        self.lose = lose
        self.keys: list[str] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        if request.url.path.endswith("/replay"):
            self.keys.append(request.headers["idempotency-key"])
            if self.lose:
                self.lose -= 1
                response.read()
                raise httpx.ReadError("connection reset", request=request)
        return response

    def close(self) -> None:
        self.inner.close()


@pytest.fixture
def served(fresh_database: Any) -> Iterator[tuple[str, str]]:
    url = str(fresh_database("table"))
    jobs = Jobs(url, QUEUES)
    app = ServedApp(make_app(jobs))
    try:
        yield app.url, url
    finally:
        app.run(jobs.close())
        app.stop()


def client(base: str, token: str, **options: Any) -> sync.ManagementClient:
    return sync.ManagementClient(base, token, backoff=0, **options)


def test_list_walks_every_page_and_get_reads_one(served: tuple[str, str]) -> None:
    base, url = served
    with sync.Jobs(url, QUEUES) as jobs, client(base, VIEWER) as viewer:
        ids = jobs.enqueue_many("emails", [{"n": i} for i in range(7)])
        assert [job["id"] for job in viewer.list(queue="emails", limit=3)] == ids[::-1]
        record = viewer.get("emails", ids[0])
        assert record["id"] == ids[0] and record["history"] == []
        assert VIEWER not in repr(viewer)


def test_problems_raise_with_the_servers_kind_status_and_code(served: tuple[str, str]) -> None:
    base, url = served

    def walked(call: Any, *args: Any, **kwargs: Any) -> Any:
        result = call(*args, **kwargs)
        # an iterator (list, audit): the requests run when it is walked
        return result if isinstance(result, dict) else list(result)

    def refusal(call: Any, *args: Any, **kwargs: Any) -> tuple[str, int, str | None]:
        with pytest.raises(DrainpipeError) as caught:
            walked(call, *args, **kwargs)
        return caught.value.kind, caught.value.status, caught.value.code

    with sync.Jobs(url, QUEUES) as jobs, client(base, VIEWER) as viewer:
        job_id = jobs.enqueue("emails", {"n": 1})
        with client(base, "not-a-known-token-at-all") as stranger:
            assert refusal(stranger.get, "emails", job_id) == ("unauthorized", 401, "UNAUTHORIZED")
        with client(base, ADMIN) as admin:
            assert refusal(viewer.cancel, "emails", job_id) == ("forbidden", 403, "ADMIN_REQUIRED")
            assert refusal(viewer.get, "emails", 987654) == ("not_found", 404, "JOB_NOT_FOUND")
            assert refusal(viewer.get, "nope", 1) == ("not_found", 404, "QUEUE_NOT_FOUND")
            assert refusal(admin.replay, "emails", job_id) == ("conflict", 409, "JOB_NOT_DEAD")
            assert admin.cancel("emails", job_id)["state"] == "cancelled"
            assert refusal(viewer.list, limit=501)[2] == "LIMIT_TOO_LARGE"
            assert [entry["action"] for entry in admin.audit()] == ["cancel", "replay"]
    with pytest.raises(ValueError, match="http"):
        sync.ManagementClient("ftp://x", ADMIN)


def test_replay_retries_a_lost_answer_with_the_same_key(served: tuple[str, str]) -> None:
    base, url = served
    with sync.Jobs(url, QUEUES) as jobs:
        job_id = jobs.enqueue("emails", {"n": 1}, max_attempts=1)
        [job] = jobs.claim("emails", lease=60)
        assert jobs.fail(job, "boom") == "dead"
    transport = LosingTransport(lose=2)
    with client(base, ADMIN, transport=transport) as admin:
        assert admin.replay("emails", job_id)["parent_id"] == job_id
        assert len(transport.keys) == 3 and len(set(transport.keys)) == 1
        with pytest.raises(DrainpipeError) as caught:
            admin.replay("emails", job_id)  # a new call: a new key, refused
        assert caught.value.code == "JOB_ALREADY_REPLAYED"
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT outcome, idempotency_key FROM drainpipe.management_audit ORDER BY id"
        ).fetchall()
    assert rows == [("ok", transport.keys[0]), ("refused", transport.keys[-1])]


def test_an_unreachable_server_is_network() -> None:
    with (
        client("http://127.0.0.1:9", ADMIN, retries=0) as admin,
        pytest.raises(DrainpipeError) as caught,
    ):
        admin.get("emails", 1)
    assert caught.value.kind == "network"
