"""The Job Inbox's hardening (docs/reference.md, "Hardening"): a cookie-carrying write from
another origin is refused before it runs, and request bodies are capped at 64 KiB."""

from __future__ import annotations

from typing import Any

import httpx

from drainpipe import Jobs, Principal
from tests.admin.conftest import QUEUES, make_app


async def by_cookie(request: Any) -> Principal | None:
    """An SSO-style authorize that reads a session cookie (docs/job-inbox.md suggests it)."""
    cookie = request.headers.get("cookie", "")
    return Principal("sso@example.com", "admin") if "session=admin" in cookie else None


async def test_a_cross_site_cancel_with_a_session_cookie_is_refused(db_url: str) -> None:
    # issue 36, 3: a cross-site form POST cancelled a job (200)
    jobs = Jobs(db_url, QUEUES)
    job_id = await jobs.enqueue("emails", {"to": "a@x"})
    app = make_app(jobs, authorize=by_cookie, allowed_origins=["https://ops.example"])
    cancel = f"/jobs/emails/{job_id}/cancel"
    cookie = {"cookie": "session=admin"}
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="https://inbox.example"
        ) as http:
            form = await http.post(cancel, headers={**cookie, "origin": "https://evil.example"})
            assert form.status_code == 403 and form.json()["code"] == "CROSS_SITE_REQUEST"
            assert (await jobs.get("emails", job_id)).state == "queued"  # type: ignore[union-attr]
            listed = await http.get("/jobs", headers=cookie)  # reads are not refused
            assert listed.status_code == 200
            allowed = await http.post(cancel, headers={**cookie, "origin": "https://ops.example"})
            assert allowed.status_code == 200 and allowed.json()["data"]["state"] == "cancelled"
    finally:
        await jobs.close()


async def test_a_body_over_64_kib_is_refused_with_413(db_url: str) -> None:
    jobs = Jobs(db_url, QUEUES)
    app = make_app(jobs)
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://inbox"
        ) as http:
            answer = await http.post(
                "/jobs/emails/1/cancel",
                content=b"x" * (64 * 1024 + 1),
                headers={"authorization": "Bearer nobody-0123456789"},
            )
            small = await http.post("/jobs/emails/1/cancel", content=b"x" * 100)
    finally:
        await jobs.close()
    assert answer.status_code == 413 and answer.json()["code"] == "BODY_TOO_LARGE"
    assert small.status_code == 401  # under the cap: on to authentication
