"""The management API's routes, roles, codes and cursor rules (docs/reference.md §10), on real Postgres."""

from __future__ import annotations

import re
from typing import Any

import httpx
import psycopg
import pytest

from drainpipe.console.management_app import Mounted
from drainpipe.console.page import content_security_policy
from tests.admin.conftest import ADMIN, OTHER_ADMIN, VIEWER, Inbox, bearer

WRITES = [("POST", "/jobs/emails/1/cancel"), ("POST", "/jobs/emails/1/replay")]
READS = [("GET", "/jobs"), ("GET", "/jobs/emails/1")]


def problem(response: Any, status: int, code: str | None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert body["status"] == status and body.get("code") == code, body
    assert body["instance"] == response.request.url.path
    return body


async def test_no_principal_is_401_everywhere(inbox: Inbox) -> None:
    for method, path in [*READS, *WRITES, ("GET", "/audit")]:
        for header in [None, "Bearer nope-nope-nope-nope", "Basic abc", "Bearer ", ADMIN]:
            headers = {} if header is None else {"Authorization": header}
            response = await inbox.http.request(method, path, headers=headers)
            body = problem(response, 401, "UNAUTHORIZED")
            assert body["kind"] == "unauthorized"
            assert response.headers["www-authenticate"].startswith("Bearer")


@pytest.mark.parametrize(("method", "path"), [*WRITES, ("GET", "/audit")])
async def test_a_viewer_may_not_write_or_read_the_audit(
    inbox: Inbox, method: str, path: str
) -> None:
    headers = {**bearer(VIEWER), "Idempotency-Key": "k-1"}
    response = await inbox.http.request(method, path, headers=headers)
    assert problem(response, 403, "ADMIN_REQUIRED")["kind"] == "forbidden"


async def test_replay_needs_an_idempotency_key(inbox: Inbox) -> None:
    response = await inbox.http.post("/jobs/emails/1/replay", headers=bearer(ADMIN))
    problem(response, 400, "IDEMPOTENCY_KEY_MISSING")
    too_long = {**bearer(ADMIN), "Idempotency-Key": "k" * 256}
    response = await inbox.http.post("/jobs/emails/1/replay", headers=too_long)
    problem(response, 400, "IDEMPOTENCY_KEY_INVALID")


@pytest.mark.parametrize(
    ("path", "code"),
    [
        ("/jobs/nope/1", "QUEUE_NOT_FOUND"),
        ("/jobs/nope/1/cancel", "QUEUE_NOT_FOUND"),
        ("/jobs/emails/abc", "JOB_NOT_FOUND"),
        ("/jobs/emails/-1", "JOB_NOT_FOUND"),
        ("/jobs/emails/99999999999999999999", "JOB_NOT_FOUND"),
        ("/jobs/emails", "ROUTE_NOT_FOUND"),
        ("/jobs/emails/1/delete", "ROUTE_NOT_FOUND"),
        ("/nothing", "ROUTE_NOT_FOUND"),
    ],
)
async def test_unknown_queues_jobs_and_routes_are_404(inbox: Inbox, path: str, code: str) -> None:
    method = "POST" if path.endswith(("cancel", "delete")) else "GET"
    response = await inbox.http.request(method, path, headers=bearer(ADMIN))
    assert problem(response, 404, code)["kind"] == "not_found"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/jobs"),
        ("DELETE", "/jobs/emails/1"),
        ("GET", "/jobs/emails/1/cancel"),
        ("PUT", "/"),
    ],
)
async def test_a_wrong_method_is_405(inbox: Inbox, method: str, path: str) -> None:
    response = await inbox.http.request(method, path, headers=bearer(ADMIN))
    problem(response, 405, "METHOD_NOT_ALLOWED")


async def test_limits_outside_1_to_500_are_400(inbox: Inbox) -> None:
    cases = [("501", "LIMIT_TOO_LARGE"), ("100000", "LIMIT_TOO_LARGE"), ("0", "LIMIT_INVALID")]
    cases += [("-3", "LIMIT_INVALID"), ("ten", "LIMIT_INVALID"), ("1.5", "LIMIT_INVALID")]
    for route in ("/jobs", "/audit"):
        for limit, code in cases:
            response = await inbox.http.get(route, params={"limit": limit}, headers=bearer(ADMIN))
            problem(response, 400, code)


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"state": "running"}, "STATE_INVALID"),
        ({"queue": "nope"}, "QUEUE_UNKNOWN"),
        ({"tenant": "t" * 201}, "FILTER_INVALID"),
        ({"cursor": "not-a-cursor"}, "CURSOR_INVALID"),
    ],
)
async def test_bad_list_filters_are_400(inbox: Inbox, params: dict[str, str], code: str) -> None:
    problem(await inbox.http.get("/jobs", params=params, headers=bearer(VIEWER)), 400, code)


async def _audit_rows(url: str, count: int, target: str = "production") -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(
            """INSERT INTO drainpipe.management_audit
                   (at, target, actor, action, queue, job_id, outcome, code)
               SELECT now(), %s, 'ops@example.com', 'cancel', 'emails', n, 'refused',
                      'JOB_NOT_CANCELLABLE'
               FROM generate_series(1, %s) AS n""",
            (target, count),
        )


async def test_the_audit_pages_newest_first_with_cursors_bound_to_the_actor(inbox: Inbox) -> None:
    await _audit_rows(inbox.url, 5)
    await _audit_rows(inbox.url, 3, target="staging")  # another target's rows stay out
    first = await inbox.http.get("/audit", params={"limit": 2}, headers=bearer(ADMIN))
    assert first.status_code == 200, first.text
    body = first.json()
    assert [row["job_id"] for row in body["data"]] == [5, 4]
    assert set(body["data"][0]) == {
        *("id", "at", "actor", "action", "queue", "job_id", "outcome", "code"),
        *("idempotency_key", "new_job_id", "detail"),
    }
    seen = [row["job_id"] for row in body["data"]]
    cursor = body["meta"]["next_cursor"]
    while cursor:
        page = await inbox.http.get(
            "/audit", params={"limit": 2, "cursor": cursor}, headers=bearer(ADMIN)
        )
        seen += [row["job_id"] for row in page.json()["data"]]
        cursor = page.json()["meta"]["next_cursor"]
    assert seen == [5, 4, 3, 2, 1]
    # the cursor is the ops actor's and the audit route's: nobody else's, nowhere else
    cursor = body["meta"]["next_cursor"]
    other = await inbox.http.get("/audit", params={"cursor": cursor}, headers=bearer(OTHER_ADMIN))
    problem(other, 400, "CURSOR_INVALID")
    elsewhere = await inbox.http.get("/jobs", params={"cursor": cursor}, headers=bearer(ADMIN))
    problem(elsewhere, 400, "CURSOR_INVALID")
    edited = cursor[:-3] + ("AAA" if not cursor.endswith("AAA") else "BBB")
    problem(
        await inbox.http.get("/audit", params={"cursor": edited}, headers=bearer(ADMIN)),
        400,
        "CURSOR_INVALID",
    )


async def test_the_page_is_served_with_a_strict_csp(inbox: Inbox) -> None:
    response = await inbox.http.get("/")  # no token: the page asks for one
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    csp = response.headers["content-security-policy"]
    [nonce] = set(re.findall(r"nonce-([\w-]+)", csp))
    assert csp == content_security_policy(nonce)
    assert "default-src 'none'" in csp and "unsafe-inline" not in csp
    page = response.text
    # every script and style carries the nonce; nothing is loaded from elsewhere
    assert re.findall(r"<(script|style)\b([^>]*)>", page) == [
        ("style", f' nonce="{nonce}"'),
        ("script", f' nonce="{nonce}"'),
    ]
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert " style=" not in page and "onclick" not in page.lower()
    assert response.headers["cache-control"] == "no-store"
    again = await inbox.http.get("/")
    assert again.headers["content-security-policy"] != csp  # a nonce per response


async def test_mounted_below_a_prefix_the_routes_and_the_page_follow(inbox: Inbox) -> None:
    transport = httpx.ASGITransport(app=Mounted("/api/jobs", inbox.app))
    async with httpx.AsyncClient(transport=transport, base_url="http://fn") as http:
        page = await http.get("/api/jobs")
        assert 'data-base="/api/jobs"' in page.text
        audit = await http.get("/api/jobs/audit", headers=bearer(ADMIN))
        assert audit.status_code == 200 and audit.json()["data"] == []
        problem(await http.get("/api/jobs/nothing", headers=bearer(ADMIN)), 404, "ROUTE_NOT_FOUND")


async def test_head_answers_the_headers_of_get_without_a_body(inbox: Inbox) -> None:
    page = await inbox.http.head("/")
    assert page.status_code == 200 and page.content == b""
    assert "content-security-policy" in page.headers
    audit = await inbox.http.head("/audit", headers=bearer(ADMIN))
    assert audit.status_code == 200 and audit.content == b""
    refused = await inbox.http.head("/audit", headers=bearer(VIEWER))
    assert refused.status_code == 403 and refused.content == b""
