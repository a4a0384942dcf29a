"""Fuzz: whatever headers and body arrive, ``receive`` answers 2xx or 4xx, never 5xx or a raise.

Some examples are signed correctly (with a random message id and body), so the JSON parsing,
``type_of``/``tenant_of`` and the store are fuzzed too, not only the signature checks.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time
from typing import Any

import psycopg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drainpipe import WebhookInbox
from drainpipe.http import Headers, Request
from tests.inbox.test_inbox import SECRET

KEY = base64.b64decode(SECRET.removeprefix("whsec_"))
NAMES = st.sampled_from(
    [
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
        "svix-id",
        "svix-timestamp",
        "svix-signature",
        "content-length",
        "content-type",
        "x-tenant",
    ]
)
VALUES = st.one_of(
    st.text(max_size=40),
    st.integers(min_value=-(10**20), max_value=10**20).map(str),
    st.just(str(int(time.time()))),
    st.lists(st.text(max_size=8), max_size=4).map(lambda parts: "v1," + " ".join(parts)),
)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
BODIES = st.one_of(
    st.binary(max_size=300),
    JSON.map(lambda value: json.dumps(value).encode()),
    st.fixed_dictionaries({"type": st.text(max_size=10), "tenant": st.text(max_size=10)}).map(
        lambda value: json.dumps(value, ensure_ascii=False).encode()
    ),
)


def sign(msg_id: str, stamp: str, body: bytes) -> str:
    """The Standard Webhooks signature over the raw bytes (also for non-UTF-8 bodies)."""
    try:
        signed = msg_id.encode() + b"." + stamp.encode() + b"." + body
    except UnicodeEncodeError:
        signed = b""
    return "v1," + base64.b64encode(hmac.new(KEY, signed, hashlib.sha256).digest()).decode()


def test_receive_answers_2xx_or_4xx_only(db_url: str) -> None:
    with asyncio.Runner() as runner:
        inbox = WebhookInbox(
            db_url,
            source="fuzz",
            secrets=SECRET,
            max_body_bytes=200,
            tenant_of=lambda payload: payload.get("tenant") if isinstance(payload, dict) else None,
            keep_headers=("x-tenant",),
        )
        statuses: list[int] = []

        @settings(
            max_examples=300,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
            database=None,
        )
        @given(
            headers=st.dictionaries(NAMES, VALUES, max_size=7),
            body=BODIES,
            chunk=st.integers(min_value=1, max_value=128),
            signed=st.booleans(),
            msg_id=st.text(min_size=1, max_size=20),
            other_signatures=st.lists(st.text(max_size=12), max_size=3),
            method=st.sampled_from(["POST", "POST", "POST", "GET"]),
        )
        def check(
            headers: dict[str, str],
            body: bytes,
            chunk: int,
            signed: bool,
            msg_id: str,
            other_signatures: list[str],
            method: str,
        ) -> None:
            if signed:
                stamp = str(int(time.time()))
                headers = {
                    **headers,
                    "webhook-id": msg_id,
                    "webhook-timestamp": stamp,
                    # junk entries (no comma, bad base64, other versions) before the real one
                    "webhook-signature": " ".join([*other_signatures, sign(msg_id, stamp, body)]),
                }
            pieces = [body[i : i + chunk] for i in range(0, len(body), chunk)]

            async def stream() -> Any:
                for piece in pieces:
                    yield piece

            request = Request(method, "/fuzz", Headers(headers), stream)
            response = runner.run(inbox.receive(request))
            assert 200 <= response.status < 500, (response.status, response.body)
            if response.status >= 400 and response.status != 405:
                assert response.content_type == "application/problem+json"
            statuses.append(response.status)

        try:
            check()
        finally:
            runner.run(inbox.close())

    # the signed examples really reached the store
    assert 202 in statuses
    with psycopg.connect(db_url) as conn:
        row = conn.execute("SELECT count(*) FROM drainpipe.webhook_inbox").fetchone()
    assert row is not None
    assert row[0] == statuses.count(202)
