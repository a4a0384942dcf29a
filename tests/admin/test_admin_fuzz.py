"""Fuzz: whatever method, path, query and headers arrive, the Job Inbox answers 2xx-4xx with
a Problem for every error, never a 5xx, and never a payload or an error text."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import quote

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drainpipe import Jobs
from tests.admin.conftest import (
    ADMIN,
    ERROR_MARKER,
    OTHER_ADMIN,
    PAYLOAD_MARKER,
    QUEUES,
    VIEWER,
    make_app,
)

SEGMENTS = st.one_of(
    st.sampled_from(["jobs", "audit", "emails", "reports", "cancel", "replay", "1", "2", "", ".."]),
    st.integers(min_value=-5, max_value=2**64).map(str),
    st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12),
)
PATHS = st.lists(SEGMENTS, min_size=0, max_size=5).map(
    lambda parts: "/" + "/".join(quote(part, safe="") for part in parts)
)
QUERY = st.dictionaries(
    st.sampled_from(["limit", "cursor", "queue", "state", "tenant", "x"]),
    st.one_of(
        st.text(max_size=30),
        st.integers(min_value=-1000, max_value=10**6).map(str),
        st.sampled_from(["queued", "dead", "emails", "500", "501", "0"]),
    ),
    max_size=5,
)
TOKENS = st.sampled_from([None, ADMIN, OTHER_ADMIN, VIEWER, "garbage", "Bearer", ""])
KEYS = st.one_of(st.none(), st.text(max_size=300), st.just("k" * 256))


def test_every_request_gets_a_2xx_to_4xx_answer(fresh_database: Any) -> None:
    url = fresh_database("table")
    with asyncio.Runner() as runner:
        jobs = Jobs(url, QUEUES)
        app = make_app(jobs)

        async def seed() -> None:
            await jobs.enqueue("emails", {"secret": PAYLOAD_MARKER}, max_attempts=1)
            [job] = await jobs.claim("emails", lease=60)
            assert await jobs.fail(job, ERROR_MARKER) == "dead"
            await jobs.enqueue("emails", {"secret": PAYLOAD_MARKER})

        runner.run(seed())
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://fuzz")

        @settings(
            max_examples=150,
            deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        )
        @given(
            st.sampled_from(["GET", "POST", "HEAD", "PUT", "DELETE"]),
            PATHS,
            QUERY,
            TOKENS,
            KEYS,
            st.binary(max_size=40),
        )
        def check(
            method: str,
            path: str,
            query: dict[str, str],
            token: str | None,
            key: str | None,
            body: bytes,
        ) -> None:
            headers: dict[str, bytes] = {}
            if token is not None:
                headers["Authorization"] = f"Bearer {token}".encode()
            if key is not None and key.isprintable():
                headers["Idempotency-Key"] = key.encode("utf-8")  # raw bytes on the wire
            content = body if method in ("POST", "PUT") else None
            response = runner.run(
                # absolute: httpx refuses a relative URL whose path starts with "//"
                http.request(
                    method, "http://fuzz" + path, params=query, headers=headers, content=content
                )
            )
            assert 200 <= response.status_code < 500, (method, path, query, response.text)
            if response.status_code >= 400 and method != "HEAD":
                assert response.headers["content-type"] == "application/problem+json"
            assert PAYLOAD_MARKER not in response.text and ERROR_MARKER not in response.text

        try:
            check()
        finally:
            runner.run(http.aclose())
            runner.run(jobs.close())
