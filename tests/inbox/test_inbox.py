"""The webhook inbox on real Postgres; HTTP paths through a real uvicorn server on loopback."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import importlib
import json
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import uvicorn
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from drainpipe import DrainpipeError, Retry, WebhookInbox, WebhookMessage
from drainpipe.http import Headers, Request
from drainpipe.webhooks.verify import load_secrets, verify_signature
from tests.conftest import connect

ROOT = Path(__file__).resolve().parents[2]
SECRET = "whsec_" + base64.b64encode(b"drainpipe-test-secret-0001").decode()
OLD_SECRET = "whsec_" + base64.b64encode(b"drainpipe-test-secret-0000").decode()
OTHER_SECRET = "whsec_" + base64.b64encode(b"somebody-else-entirely-000").decode()


def signed(
    body: bytes | str,
    msg_id: str = "msg_1",
    *,
    secret: str = SECRET,
    timestamp: int | None = None,
    prefix: str = "webhook",
) -> dict[str, str]:
    """Standard Webhooks headers for a body, signed by the package itself."""
    text = body.decode() if isinstance(body, bytes) else body
    stamp = int(time.time()) if timestamp is None else timestamp
    signature = Webhook(secret).sign(msg_id, datetime.fromtimestamp(stamp, UTC), text)
    return {
        f"{prefix}-id": msg_id,
        f"{prefix}-timestamp": str(stamp),
        f"{prefix}-signature": signature,
        "content-type": "application/json",
    }


def make_request(
    body: bytes | list[bytes],
    headers: dict[str, str],
    method: str = "POST",
    pulled: list[int] | None = None,
) -> Request:
    """Our framework-free request; ``pulled`` records how many chunks were read."""
    chunks = [body] if isinstance(body, bytes) else body

    async def stream() -> AsyncIterator[bytes]:
        for index, chunk in enumerate(chunks):
            if pulled is not None:
                pulled.append(index)
            yield chunk

    return Request(method, "/hooks/billing", Headers(headers), stream)


async def rows(conn: psycopg.AsyncConnection[Any], where: str = "true") -> list[dict[str, Any]]:
    cur = await conn.execute(f"SELECT * FROM drainpipe.webhook_inbox WHERE {where} ORDER BY id")
    names = [d.name for d in cur.description or []]
    return [dict(zip(names, row, strict=True)) for row in await cur.fetchall()]


async def count(conn: psycopg.AsyncConnection[Any]) -> int:
    cur = await conn.execute("SELECT count(*) FROM drainpipe.webhook_inbox")
    row = await cur.fetchone()
    assert row is not None
    return int(row[0])


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:  # leave pytest's signal handlers alone
        yield


@contextlib.asynccontextmanager
async def serve(app: Any) -> AsyncIterator[str]:
    """Run ``app`` on a real uvicorn server on a free loopback port; yields its base URL."""
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        lifespan="off",
        ws="none",
        log_level="error",
        interface="asgi3",
    )
    server = _Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


@pytest.fixture
async def inbox(db_url: str) -> AsyncIterator[WebhookInbox]:
    box = WebhookInbox(db_url, source="billing", secrets=SECRET, keep_headers=("User-Agent",))
    yield box
    await box.close()


@pytest.fixture
async def server(inbox: WebhookInbox) -> AsyncIterator[str]:
    async with serve(inbox.app) as url:
        yield url


# -- receive over HTTP ---------------------------------------------------------------------


async def test_same_delivery_sent_50_times_at_once_is_stored_once(
    server: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    body = json.dumps({"type": "invoice.paid", "amount": 1200}).encode()
    headers = signed(body, "evt_same")
    limits = httpx.Limits(max_connections=60)
    async with httpx.AsyncClient(base_url=server, limits=limits, timeout=30) as client:
        answers = await asyncio.gather(
            *(client.post("/", content=body, headers=headers) for _ in range(50))
        )
    statuses = sorted(a.status_code for a in answers)
    assert statuses == [200] * 49 + [202]
    ids = {a.json()["id"] for a in answers}
    assert len(ids) == 1
    assert sorted(a.json()["duplicate"] for a in answers) == [False] + [True] * 49
    stored = await rows(conn)
    assert len(stored) == 1
    assert stored[0]["id"] in ids
    assert stored[0]["message_id"] == "evt_same"
    assert stored[0]["event_type"] == "invoice.paid"
    assert stored[0]["payload"] == {"type": "invoice.paid", "amount": 1200}
    assert stored[0]["status"] == "pending"
    assert stored[0]["max_attempts"] == 8


async def test_kept_headers_are_stored_lower_cased(
    server: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    body = b'{"type": "a"}'
    async with httpx.AsyncClient(base_url=server) as client:
        answer = await client.post(
            "/",
            content=body,
            headers={**signed(body), "User-Agent": "Billing/1.0", "X-Other": "no"},
        )
    assert answer.status_code == 202
    assert answer.json() == {"id": answer.json()["id"], "duplicate": False}
    [row] = await rows(conn)
    assert row["headers"] == {"user-agent": "Billing/1.0"}


def _unsigned_cases() -> dict[str, tuple[bytes, dict[str, str], str]]:
    body = b'{"type": "invoice.paid"}'
    good = signed(body)
    now = int(time.time())
    return {
        "no headers": (body, {"content-type": "application/json"}, "WEBHOOK_MISSING_HEADERS"),
        "no signature": (
            body,
            {k: v for k, v in good.items() if k != "webhook-signature"},
            "WEBHOOK_MISSING_HEADERS",
        ),
        "empty id": (body, {**good, "webhook-id": ""}, "WEBHOOK_MISSING_HEADERS"),
        "timestamp not digits": (
            body,
            {**good, "webhook-timestamp": "1e9"},
            "WEBHOOK_INVALID_TIMESTAMP",
        ),
        "timestamp negative": (
            body,
            {**good, "webhook-timestamp": "-5"},
            "WEBHOOK_INVALID_TIMESTAMP",
        ),
        "replayed old timestamp": (
            body,
            signed(body, timestamp=now - 301),
            "WEBHOOK_TIMESTAMP_TOO_OLD",
        ),
        "timestamp from the future": (
            body,
            signed(body, timestamp=now + 3600),
            "WEBHOOK_TIMESTAMP_TOO_NEW",
        ),
        "forged signature": (
            body,
            {**good, "webhook-signature": "v1," + base64.b64encode(b"x" * 32).decode()},
            "WEBHOOK_INVALID_SIGNATURE",
        ),
        "signed by another secret": (
            body,
            signed(body, secret=OTHER_SECRET),
            "WEBHOOK_INVALID_SIGNATURE",
        ),
        "body changed after signing": (
            b'{"type": "invoice.paid", "amount": 1}',
            good,
            "WEBHOOK_INVALID_SIGNATURE",
        ),
        "id changed after signing": (
            body,
            {**good, "webhook-id": "msg_2"},
            "WEBHOOK_INVALID_SIGNATURE",
        ),
        "signature entry without a comma": (
            body,
            {**good, "webhook-signature": "v1" + good["webhook-signature"][3:]},
            "WEBHOOK_INVALID_SIGNATURE",
        ),
        "signature not base64": (
            body,
            {**good, "webhook-signature": "v1,***"},
            "WEBHOOK_INVALID_SIGNATURE",
        ),
        "body not UTF-8": (b"\xff\xfe{}", signed(b"{}"), "WEBHOOK_INVALID_SIGNATURE"),
    }


async def test_every_401_code_stores_nothing(
    server: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    codes = set()
    async with httpx.AsyncClient(base_url=server) as client:
        for case, (body, headers, code) in _unsigned_cases().items():
            answer = await client.post("/", content=body, headers=headers)
            assert answer.status_code == 401, (case, answer.text)
            assert answer.headers["content-type"] == "application/problem+json"
            assert "www-authenticate" in answer.headers
            problem = answer.json()
            assert (case, problem["code"]) == (case, code)
            assert problem["kind"] == "unauthorized"
            assert problem["instance"] == "/"
            codes.add(code)
    assert len(codes) == 5
    assert await count(conn) == 0


async def test_a_body_streamed_past_the_cap_is_refused_with_413(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    box = WebhookInbox(db_url, source="billing", secrets=SECRET, max_body_bytes=1000)
    sent: list[int] = []

    async def chunks() -> AsyncIterator[bytes]:
        for index in range(3):
            sent.append(index)
            yield b"x" * 1500  # each chunk alone is larger than the cap

    try:
        async with serve(box.app) as url, httpx.AsyncClient(base_url=url) as client:
            answer = await client.post("/", content=chunks(), headers=signed(b"{}"))
            assert answer.status_code == 413
            assert answer.json()["code"] == "WEBHOOK_BODY_TOO_LARGE"
            assert "content-length" not in answer.request.headers  # it really was chunked
            # a declared Content-Length over the cap is refused without reading anything
            big = b"{" + b" " * 2000 + b"}"
            declared = await client.post("/", content=big, headers=signed(big))
            assert declared.status_code == 413
            # at the cap exactly is fine
            fits = json.dumps({"pad": "y" * 980}).encode()
            assert len(fits) <= 1000
            ok = await client.post("/", content=fits, headers=signed(fits, "fits"))
            assert ok.status_code == 202
    finally:
        await box.close()
    assert await count(conn) == 1


async def test_413_comes_before_the_body_is_read_in_full(db_url: str) -> None:
    box = WebhookInbox(db_url, source="billing", secrets=SECRET, max_body_bytes=100)
    pulled: list[int] = []
    request = make_request(
        [b"a" * 60, b"b" * 60, b"c" * 60, b"d" * 60], signed(b"{}"), pulled=pulled
    )
    answer = await box.receive(request)
    assert answer.status == 413
    assert pulled == [0, 1]  # the third and fourth chunks were never pulled
    await box.close()


async def test_verified_body_that_is_not_json_is_400(
    server: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    async with httpx.AsyncClient(base_url=server) as client:
        for body in (b"not json", b'{"a": NaN}', b"[" * 5000, b'"\\u0000"'):
            answer = await client.post("/", content=body, headers=signed(body, "bad"))
            assert answer.status_code == 400, (body[:20], answer.text)
            assert answer.headers["content-type"] == "application/problem+json"
    assert await count(conn) == 0


async def test_only_post_is_allowed(server: str, conn: psycopg.AsyncConnection[Any]) -> None:
    async with httpx.AsyncClient(base_url=server) as client:
        for method in ("GET", "PUT", "DELETE"):
            answer = await client.request(method, "/")
            assert answer.status_code == 405
            assert answer.headers["allow"] == "POST"
    assert await count(conn) == 0


async def test_a_rotated_secret_still_verifies(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    box = WebhookInbox(db_url, source="billing", secrets=[SECRET, OLD_SECRET])
    body = b'{"type": "rotated"}'
    try:
        async with serve(box.app) as url, httpx.AsyncClient(base_url=url) as client:
            by_old = await client.post(
                "/", content=body, headers=signed(body, "m_old", secret=OLD_SECRET)
            )
            by_new = await client.post(
                "/", content=body, headers=signed(body, "m_new", secret=SECRET)
            )
            by_other = await client.post(
                "/", content=body, headers=signed(body, "m_other", secret=OTHER_SECRET)
            )
            # a sender listing both signatures during its own rotation
            both = signed(body, "m_both", secret=OTHER_SECRET)
            both["webhook-signature"] += " " + signed(body, "m_both")["webhook-signature"]
            by_both = await client.post("/", content=body, headers=both)
    finally:
        await box.close()
    assert (by_old.status_code, by_new.status_code, by_other.status_code) == (202, 202, 401)
    assert by_both.status_code == 202
    assert [r["message_id"] for r in await rows(conn)] == ["m_old", "m_new", "m_both"]


async def test_svix_header_names_are_accepted(
    inbox: WebhookInbox, conn: psycopg.AsyncConnection[Any]
) -> None:
    body = b'{"type": "svix"}'
    answer = await inbox.receive(make_request(body, signed(body, "msg_svix", prefix="svix")))
    assert answer.status == 202
    [row] = await rows(conn)
    assert row["message_id"] == "msg_svix"


def test_verify_signature_answers_401_for_what_the_package_may_let_escape() -> None:
    """standardwebhooks 1.1 let a signature without a comma (ValueError) and a body that is
    not UTF-8 (UnicodeDecodeError) escape as exceptions, which a route would answer with a
    500; later releases refuse them as WebhookVerificationError. Whatever the installed
    release does, verify_signature answers 401."""
    body = b'{"a": 1}'
    headers = signed(body)
    no_comma = {**headers, "webhook-signature": "v1abc"}
    for bad_headers, bad_body in ((no_comma, body), (headers, b"\xff")):
        with pytest.raises((WebhookVerificationError, ValueError)):
            Webhook(SECRET).verify(bad_body, bad_headers)
        with pytest.raises(DrainpipeError) as caught:
            verify_signature([Webhook(SECRET)], Headers(bad_headers), bad_body, time.time())
        assert caught.value.code == "WEBHOOK_INVALID_SIGNATURE"
    assert verify_signature([Webhook(SECRET)], Headers(headers), body, time.time()) == "msg_1"


def test_verify_signature_tolerance_is_300_seconds_each_way_and_any_secret_may_match() -> None:
    body = b'{"a": 1}'
    stamp = 1_700_000_000
    headers = Headers(signed(body, timestamp=stamp, secret=OLD_SECRET))
    secrets = load_secrets([SECRET, "v1," + OLD_SECRET])
    for now in (stamp - 300, stamp, stamp + 300):
        assert verify_signature(secrets, headers, body, now) == "msg_1"
    for now, code in (
        (stamp + 300.5, "WEBHOOK_TIMESTAMP_TOO_OLD"),
        (stamp - 300.5, "WEBHOOK_TIMESTAMP_TOO_NEW"),
    ):
        with pytest.raises(DrainpipeError) as caught:
            verify_signature(secrets, headers, body, now)
        assert (caught.value.kind, caught.value.code) == ("unauthorized", code)
    with pytest.raises(DrainpipeError) as caught:
        verify_signature(load_secrets(SECRET), headers, body, stamp)
    assert caught.value.code == "WEBHOOK_INVALID_SIGNATURE"


def test_importing_the_inbox_loads_neither_standardwebhooks_nor_psycopg() -> None:
    code = (
        "import sys, drainpipe.webhooks, drainpipe.webhooks.verify\n"
        "print(sorted({'standardwebhooks', 'psycopg'} & set(sys.modules)))\n"
    )
    result = subprocess.run(  # noqa: S603 - our own interpreter, fixed arguments
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=30
    )
    assert result.stdout.strip() == "[]"


# -- custom verify, store, construction ----------------------------------------------------


async def test_custom_verify_plain_and_async(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    def plain(headers: Any, body: bytes) -> dict[str, Any]:
        if headers.get("x-token") != "t0ken":
            raise ValueError("bad token")
        data = json.loads(body)
        return {"id": data["event_id"], "payload": data, "tenant": data.get("account")}

    async def refusing(headers: Any, body: bytes) -> dict[str, Any]:
        raise DrainpipeError("forbidden", "This account is suspended", code="ACCOUNT_SUSPENDED")

    async def numeric(headers: Any, body: bytes) -> dict[str, Any]:
        return {"id": 42, "payload": {"type": "n"}}

    box = WebhookInbox(db_url, source="crm", verify=plain)
    body = json.dumps({"event_id": "e1", "type": "contact.created", "account": "acme"}).encode()
    ok = await box.receive(make_request(body, {"x-token": "t0ken"}))
    again = await box.receive(make_request(body, {"x-token": "t0ken"}))
    refused = await box.receive(make_request(body, {"x-token": "nope"}))
    assert (ok.status, again.status, refused.status) == (202, 200, 401)
    assert refused.json()["code"] == "WEBHOOK_INVALID_SIGNATURE"
    await box.close()

    box = WebhookInbox(db_url, source="crm", verify=refusing)
    suspended = await box.receive(make_request(body, {}))
    assert suspended.status == 403
    assert suspended.json()["code"] == "ACCOUNT_SUSPENDED"
    await box.close()

    box = WebhookInbox(db_url, source="crm", verify=numeric)
    assert (await box.receive(make_request(b"", {}))).status == 202
    await box.close()

    stored = await rows(conn)
    assert [(r["message_id"], r["tenant"], r["event_type"]) for r in stored] == [
        ("e1", "acme", "contact.created"),
        ("42", None, "n"),
    ]


async def test_two_tenants_may_use_the_same_message_id(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    box = WebhookInbox(
        db_url, source="billing", secrets=SECRET, tenant_of=lambda p: p.get("account")
    )
    try:
        for account in ("acme", "globex", "acme", None, None):
            body = json.dumps({"type": "x", "account": account}).encode()
            await box.receive(make_request(body, signed(body, "evt_shared")))
        assert (await box.store(id="evt_shared", payload={}, tenant="acme")).duplicate
        assert not (await box.store(id="evt_shared", payload={}, tenant="initech")).duplicate
        # the same id under another source is another message
        other = WebhookInbox(db_url, source="github", secrets=SECRET)
        assert not (await other.store(id="evt_shared", payload={}, tenant="acme")).duplicate
        await other.close()
    finally:
        await box.close()
    stored = await rows(conn)
    assert sorted((r["source"], r["tenant"] or "-") for r in stored) == [
        ("billing", "-"),
        ("billing", "acme"),
        ("billing", "globex"),
        ("billing", "initech"),
        ("github", "acme"),
    ]


async def test_store_without_secrets(db_url: str, conn: psycopg.AsyncConnection[Any]) -> None:
    box = WebhookInbox(db_url, source="stripe", type_of=lambda p: p["kind"], max_attempts=3)
    with pytest.raises(TypeError, match="only stores events through `store`"):
        await box.receive(make_request(b"{}", {}))
    first = await box.store(
        id="evt_1", payload={"kind": "charge"}, headers={"Stripe-Signature": "s"}
    )
    dup = await box.store(id="evt_1", payload={"kind": "changed"})
    explicit = await box.store(id="evt_2", payload={"kind": "charge"}, type=None, tenant="")
    assert (first.duplicate, dup.duplicate, explicit.duplicate) == (False, True, False)
    assert first.id == dup.id
    stored = await rows(conn)
    assert [(r["event_type"], r["tenant"], r["max_attempts"], r["headers"]) for r in stored] == [
        ("charge", None, 3, {"stripe-signature": "s"}),
        (None, None, 3, {}),
    ]
    assert stored[0]["payload"] == {"kind": "charge"}  # a duplicate keeps the first payload
    for bad in (
        {"id": "", "payload": {}, "type": None},
        {"id": "a\x00b", "payload": {}, "type": None},
        {"id": "x", "payload": {1j}, "type": None},
    ):
        with pytest.raises(DrainpipeError) as caught:
            await box.store(**bad)
        assert caught.value.kind == "validation"
    await box.close()


@pytest.mark.parametrize("value", [0, -1, 1.5, "3", True, None])
def test_max_attempts_must_be_a_positive_integer(value: Any) -> None:
    with pytest.raises(ValueError, match="max_attempts must be a positive integer"):
        WebhookInbox("postgresql://unused", source="s", max_attempts=value)


def test_construction_defaults_and_errors() -> None:
    box = WebhookInbox("postgresql://unused", source="s", secrets=SECRET)
    assert re.fullmatch(r"worker-[0-9a-f]{8}", box.worker)
    assert box.worker != WebhookInbox("postgresql://unused", source="s").worker
    with pytest.raises(ValueError, match="source"):
        WebhookInbox("postgresql://unused", source="")
    with pytest.raises(ValueError, match="secrets"):
        WebhookInbox("postgresql://unused", source="s", secrets=["", SECRET])
    with pytest.raises(ValueError, match="max_body_bytes"):
        WebhookInbox("postgresql://unused", source="s", max_body_bytes=0)


async def test_receive_takes_a_starlette_request(
    inbox: WebhookInbox, conn: psycopg.AsyncConnection[Any]
) -> None:
    from starlette.applications import Starlette
    from starlette.requests import Request as StarletteRequest
    from starlette.responses import Response as StarletteResponse
    from starlette.routing import Route

    async def endpoint(request: StarletteRequest) -> StarletteResponse:
        response = await inbox.receive(request)
        assert isinstance(response, StarletteResponse)
        return response

    app = Starlette(routes=[Route("/hooks", endpoint, methods=["POST"])])
    body = b'{"type": "starlette"}'
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        answer = await client.post("/hooks", content=body, headers=signed(body, "st_1"))
    assert answer.status_code == 202
    assert answer.json()["duplicate"] is False
    assert await count(conn) == 1


# -- processing ----------------------------------------------------------------------------


async def age(conn: psycopg.AsyncConnection[Any], where: str = "true") -> None:
    """Make every matching message due now (instead of sleeping out a backoff or a lease)."""
    await conn.execute(
        "UPDATE drainpipe.webhook_inbox SET available_at = now() - interval '1 second',"
        f" locked_until = CASE WHEN status = 'processing' THEN now() - interval '1 second' END"
        f" WHERE {where}"
    )


async def test_a_failing_message_backs_off_and_dies_after_max_attempts(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    box = WebhookInbox(db_url, source="billing", max_attempts=3)
    await box.store(id="evt_fail", payload={"type": "x"})
    seen: list[int] = []

    async def handler(message: WebhookMessage) -> None:
        seen.append(message.attempts)
        raise RuntimeError(f"downstream said no (attempt {message.attempts})")

    for attempt, backoff in ((1, 2), (2, 4)):
        report = await box.process(handler)
        assert (report.succeeded, report.failed) == (0, 1)
        [row] = await rows(conn)
        assert (row["status"], row["attempts"]) == ("pending", attempt)
        assert row["last_error"] == f"downstream said no (attempt {attempt})"
        assert row["locked_by"] is None
        wait = (row["available_at"] - datetime.now(UTC)).total_seconds()
        assert backoff - 1 < wait <= backoff, wait
        # not due yet: nothing is claimed
        assert (await box.process(handler)).failed == 0
        await age(conn)

    report = await box.process(handler)
    assert report.failed == 1
    [row] = await rows(conn)
    assert (row["status"], row["attempts"]) == ("dead", 3)
    assert row["last_error"] == "downstream said no (attempt 3)"
    await age(conn)
    assert (await box.process(handler)).failed == 0  # dead stays dead
    assert seen == [1, 2, 3]
    await box.close()


async def test_backoff_is_capped_at_an_hour_and_retry_sets_the_delay(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    box = WebhookInbox(db_url, source="billing", max_attempts=20)
    await box.store(id="evt_cap", payload={})
    await box.store(id="evt_retry", payload={})
    await conn.execute(
        "UPDATE drainpipe.webhook_inbox SET attempts = 13 WHERE message_id = 'evt_cap'"
    )

    async def handler(message: WebhookMessage) -> None:
        if message.message_id == "evt_retry":
            raise Retry(after=60)
        raise RuntimeError("no")

    assert (await box.process(handler)).failed == 2
    waits = {
        r["message_id"]: (r["available_at"] - datetime.now(UTC)).total_seconds()
        for r in await rows(conn)
    }
    assert 3599 < waits["evt_cap"] <= 3600
    assert 59 < waits["evt_retry"] <= 60
    await box.close()


async def test_a_worker_whose_lease_was_taken_over_changes_nothing(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    slow = WebhookInbox(db_url, source="billing", worker="slow")
    other = WebhookInbox(db_url, source="billing", worker="other")
    await slow.store(id="evt_complete", payload={"then": "complete"})
    await slow.store(id="evt_fail", payload={"then": "fail"})
    outcomes: dict[str, Any] = {}

    async def handler(message: WebhookMessage) -> None:
        # the lease runs out and another worker claims the message while this one still runs
        await age(conn, f"id = {message.id}")
        takeover = await connect(db_url)
        cur = await takeover.execute(
            "SELECT id, attempts FROM drainpipe.claim_webhooks_v1('billing', 'other', 1, 300)"
        )
        outcomes[message.message_id + ":claimed"] = await cur.fetchall()
        await takeover.close()
        outcomes[message.message_id + ":checkpoint"] = await message.checkpoint({"late": True})
        if message.payload["then"] == "fail":
            raise RuntimeError("too late to fail")

    report = await slow.process(handler, batch=1)
    assert (report.succeeded, report.failed) == (1, 1)
    for name in ("evt_complete", "evt_fail"):
        assert outcomes[name + ":claimed"] == [(outcomes[name + ":claimed"][0][0], 2)]
        assert outcomes[name + ":checkpoint"] is False
    for row in await rows(conn):
        # still the other worker's, on its attempt; no late checkpoint, no error, no completion
        assert (row["status"], row["locked_by"], row["attempts"]) == ("processing", "other", 2)
        assert row["checkpoint"] == {}
        assert row["last_error"] is None
        assert row["processed_at"] is None
    # the worker holding the lease can still finish: process() claims nothing it holds, so
    # let the lease run out and process as "other" again
    await age(conn)
    assert (await other.process(lambda m: None)).succeeded == 2
    assert {r["status"] for r in await rows(conn)} == {"processed"}
    await slow.close()
    await other.close()


async def test_a_checkpoint_survives_a_failed_attempt(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    box = WebhookInbox(db_url, source="billing")
    await box.store(id="evt_cp", payload={"lines": 3})
    progress_seen: list[dict[str, Any]] = []

    async def handler(message: WebhookMessage) -> None:
        progress_seen.append(dict(message.progress))
        if message.attempts == 1:
            assert await message.checkpoint({"line": 1, "charged": ["a"]})
            assert message.progress == {"line": 1, "charged": ["a"]}
            raise RuntimeError("crashed after line 1")
        assert await message.checkpoint({"line": 3})  # shallow merge keeps "charged"

    assert (await box.process(handler)).failed == 1
    [row] = await rows(conn)
    assert row["checkpoint"] == {"line": 1, "charged": ["a"]}
    await age(conn)
    assert (await box.process(handler)).succeeded == 1
    [row] = await rows(conn)
    assert row["status"] == "processed"
    assert row["checkpoint"] == {"line": 3, "charged": ["a"]}
    assert progress_seen == [{}, {"line": 1, "charged": ["a"]}]
    await box.close()


async def test_a_message_whose_worker_died_on_its_last_attempt_is_marked_dead(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    box = WebhookInbox(db_url, source="billing", max_attempts=2)
    await box.store(id="evt_last", payload={})
    await box.store(id="evt_not_last", payload={})
    # a worker claims both and dies: evt_last on its 2nd (last) attempt, evt_not_last on its 1st
    await conn.execute(
        "UPDATE drainpipe.webhook_inbox SET attempts = 1 WHERE message_id = 'evt_last'"
    )
    await conn.execute("SELECT drainpipe.claim_webhooks_v1('billing', 'died', 10, 300)")
    assert (await box.process(lambda m: None)).succeeded == 0  # leases still running
    await age(conn)
    handled: list[str] = []

    async def handler(message: WebhookMessage) -> None:
        handled.append(message.message_id)

    report = await box.process(handler)
    assert handled == ["evt_not_last"]
    assert report.succeeded == 1
    by_id = {r["message_id"]: r for r in await rows(conn)}
    assert by_id["evt_last"]["status"] == "dead"
    assert by_id["evt_last"]["last_error"] == "The lease ran out on the last attempt"
    assert by_id["evt_last"]["locked_by"] is None
    assert (by_id["evt_not_last"]["status"], by_id["evt_not_last"]["attempts"]) == ("processed", 2)
    await box.close()


async def test_the_heartbeat_keeps_a_long_handler_s_lease(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    box = WebhookInbox(db_url, source="billing")
    await box.store(id="evt_long", payload={})
    await box.store(id="evt_queued_in_batch", payload={})
    stolen: list[Any] = []

    async def handler(message: WebhookMessage) -> None:
        if message.message_id == "evt_long":
            await asyncio.sleep(2.6)  # longer than the 2 s lease; beats at 1 s and 2 s
            other = await connect(db_url)
            cur = await other.execute(
                "SELECT id FROM drainpipe.claim_webhooks_v1('billing', 'thief', 10, 60)"
            )
            stolen.extend(await cur.fetchall())
            await other.close()

    report = await box.process(handler, batch=2, lease=2)
    assert stolen == []  # both messages of the batch were renewed, the waiting one too
    assert report.succeeded == 2
    assert {r["status"] for r in await rows(conn)} == {"processed"}
    await box.close()


async def test_budget_and_deadline_are_checked_before_each_claim(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    box = WebhookInbox(db_url, source="billing")
    for n in range(5):
        await box.store(id=f"evt_{n}", payload={"n": n})
    called: list[int] = []

    async def handler(message: WebhookMessage) -> None:
        called.append(message.payload["n"])
        await asyncio.sleep(0.15)

    report = await box.process(handler, budget=0)
    assert (report.succeeded, report.budget_exhausted, called) == (0, True, [])
    loop = asyncio.get_running_loop()
    report = await box.process(handler, deadline=loop.time() - 1)
    assert (report.succeeded, called) == (0, [])
    # the budget runs out during the first batch of two: that batch still finishes
    report = await box.process(handler, batch=2, budget=0.1)
    assert (report.succeeded, report.budget_exhausted, called) == (2, True, [0, 1])
    report = await box.process(handler, batch=2)
    assert (report.succeeded, report.budget_exhausted, called) == (3, False, [0, 1, 2, 3, 4])
    assert {r["status"] for r in await rows(conn)} == {"processed"}
    assert {r["attempts"] for r in await rows(conn)} == {1}
    await box.close()


async def test_the_handler_message_carries_everything(db_url: str) -> None:
    box = WebhookInbox(db_url, source="billing", secrets=SECRET, keep_headers=["x-request-id"],
                       tenant_of=lambda p: p["account"], max_attempts=4)  # fmt: skip
    body = json.dumps({"type": "invoice.paid", "account": "acme"}).encode()
    answer = await box.receive(make_request(body, {**signed(body, "evt_m"), "X-Request-Id": "r1"}))
    seen: list[WebhookMessage] = []
    await box.process(seen.append)  # a plain (non-async) handler works too
    [message] = seen
    assert message.id == answer.json()["id"]
    assert (message.source, message.message_id, message.type, message.tenant) == (
        "billing", "evt_m", "invoice.paid", "acme"
    )  # fmt: skip
    assert message.payload == {"type": "invoice.paid", "account": "acme"}
    assert message.headers == {"x-request-id": "r1"}
    assert (message.attempts, message.max_attempts, message.progress) == (1, 4, {})
    assert message.received_at.tzinfo is not None
    with pytest.raises(DrainpipeError):
        await box.process(seen.append, batch=0)
    await box.close()


# -- the delivery log and purge ------------------------------------------------------------


async def test_list_shows_one_tenant_newest_first(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    box = WebhookInbox(db_url, source="billing", max_attempts=1)
    for n, tenant in enumerate(["acme", "globex", "acme", None, "acme"]):
        await box.store(id=f"evt_{n}", payload={"type": f"t{n}"}, tenant=tenant)
    other_source = WebhookInbox(db_url, source="github")
    await other_source.store(id="evt_gh", payload={}, tenant="acme")
    # received_at decides the order, not the id
    await conn.execute(
        "UPDATE drainpipe.webhook_inbox SET received_at = now() - make_interval(mins => id::int)"
    )
    await conn.execute(
        "UPDATE drainpipe.webhook_inbox SET received_at = now() - interval '1 hour' WHERE message_id = 'evt_2'"
    )

    async def failing(message: WebhookMessage) -> None:
        if message.message_id == "evt_4":
            raise RuntimeError("bad invoice")

    await box.process(failing)
    acme = await box.list(tenant="acme")
    assert [e.message_id for e in acme] == ["evt_0", "evt_4", "evt_2"]
    assert [e.status for e in acme] == ["processed", "dead", "processed"]
    dead = acme[1]
    assert (dead.type, dead.tenant, dead.attempts, dead.max_attempts) == ("t4", "acme", 1, 1)
    assert dead.last_error == "bad invoice" and dead.processed_at is None
    assert acme[0].processed_at is not None
    assert [e.message_id for e in await box.list(tenant="acme", status="dead")] == ["evt_4"]
    assert [e.message_id for e in await box.list(tenant="acme", limit=1)] == ["evt_0"]
    assert [e.message_id for e in await box.list(tenant="globex")] == ["evt_1"]
    assert await box.list(tenant="initech") == []
    # None is the log of tenantless messages, not everybody's
    assert [e.message_id for e in await box.list(tenant=None)] == ["evt_3"]
    with pytest.raises(DrainpipeError) as caught:
        await box.list(tenant="acme", status="gone")  # type: ignore[arg-type]
    assert caught.value.kind == "validation"
    with pytest.raises(DrainpipeError):
        await box.list(tenant="")
    await box.close()
    await other_source.close()


async def test_purge_removes_old_finished_messages_and_never_pending_ones(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    box = WebhookInbox(db_url, source="billing")
    states = {
        "old_processed": ("processed", "acme"),
        "new_processed": ("processed", "acme"),
        "old_dead": ("dead", "acme"),
        "old_pending": ("pending", "acme"),
        "old_processing": ("processing", "acme"),
        "globex_processed": ("processed", "globex"),
    }
    for message_id, (_, tenant) in states.items():
        await box.store(id=message_id, payload={}, tenant=tenant)
    other = WebhookInbox(db_url, source="github")
    await other.store(id="gh_old_processed", payload={}, tenant="acme")
    for message_id, (status, _) in {**states, "gh_old_processed": ("processed", "acme")}.items():
        recent = message_id.startswith("new")
        await conn.execute(
            "UPDATE drainpipe.webhook_inbox SET status = %s,"
            " received_at = now() - %s::interval,"
            " processed_at = CASE WHEN %s = 'processed' THEN now() - %s::interval END"
            " WHERE message_id = %s",
            (
                status,
                "1 day" if recent else "40 days",
                status,
                "1 day" if recent else "39 days",
                message_id,
            ),
        )

    def left() -> Any:
        return rows(conn)

    assert await box.purge(tenant="acme") == 1
    assert await box.purge() == 1  # globex's
    remaining = {r["message_id"] for r in await left()}
    assert remaining == {
        "new_processed",
        "old_dead",
        "old_pending",
        "old_processing",
        "gh_old_processed",
    }
    assert await box.purge(include_dead=True) == 1
    # older_than=0 with a tenant: all its finished messages, still never pending/processing
    assert await box.purge(older_than=0, include_dead=True, tenant="acme") == 1
    assert await box.purge(older_than=timedelta(0), include_dead=True) == 0
    remaining = {r["message_id"] for r in await left()}
    assert remaining == {"old_pending", "old_processing", "gh_old_processed"}
    assert await other.purge() == 1
    with pytest.raises(DrainpipeError):
        await box.purge(tenant="")
    await box.close()
    await other.close()


async def test_purge_works_in_batches(db_url: str, conn: psycopg.AsyncConnection[Any]) -> None:
    box = WebhookInbox(db_url, source="billing")
    for n in range(5):
        await box.store(id=f"evt_{n}", payload={})
    await conn.execute(
        "UPDATE drainpipe.webhook_inbox SET status = 'processed', processed_at = now() - interval '31 days'"
    )
    assert [await box.purge(batch=2) for _ in range(4)] == [2, 2, 1, 0]
    await box.close()


# -- privileges and the Vercel function ----------------------------------------------------


@pytest.mark.parametrize("role", ["anon", "authenticated"])
async def test_api_roles_cannot_execute_inbox_functions(
    role: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    for sql in (
        "SELECT * FROM drainpipe.receive_webhook_v3('s', 'm', null, '{}')",
        "SELECT * FROM drainpipe.claim_webhooks_v1('s', 'w')",
        "SELECT drainpipe.purge_webhooks_v1()",
        "SELECT * FROM drainpipe.list_webhooks_v1('acme')",
        "SELECT count(*) FROM drainpipe.webhook_inbox",
    ):
        await conn.execute(f"SET ROLE {role}")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            await conn.execute(sql)
        await conn.execute("RESET ROLE")
    assert await count(conn) == 0


async def test_service_role_can_execute_inbox_functions(conn: psycopg.AsyncConnection[Any]) -> None:
    await conn.execute("SET ROLE service_role")
    cur = await conn.execute("SELECT * FROM drainpipe.receive_webhook_v3('s', 'm', null, '{}')")
    assert (await cur.fetchone())[1] is False  # type: ignore[index]
    cur = await conn.execute("SELECT id FROM drainpipe.claim_webhooks_v1('s', 'w')")
    assert len(await cur.fetchall()) == 1
    await conn.execute("RESET ROLE")


async def test_billing_function_imports_without_env_and_serves_with_it(
    db_url: str, conn: psycopg.AsyncConnection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.delenv("WEBHOOK_SECRET", raising=False)
    monkeypatch.syspath_prepend(str(ROOT / "functions"))
    sys.modules.pop("billing_webhook", None)
    module = importlib.import_module("billing_webhook")
    body = b'{"type": "invoice.paid"}'
    transport = httpx.ASGITransport(app=module.app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://f") as client:
            missing = await client.post("/api/billing-webhook", content=body, headers=signed(body))
            assert missing.status_code == 503
            assert missing.json()["code"] == "NOT_CONFIGURED"
            monkeypatch.setenv("DATABASE_URL", db_url)
            monkeypatch.setenv("WEBHOOK_SECRET", f"{OTHER_SECRET}, {SECRET}")
            answer = await client.post(
                "/api/billing-webhook", content=body, headers={**signed(body), "user-agent": "b"}
            )
            assert answer.status_code == 202
            forged = await client.post(
                "/api/billing-webhook", content=body, headers=signed(body, secret=OLD_SECRET)
            )
            assert forged.status_code == 401
    finally:
        await module.app.aclose()
        sys.modules.pop("billing_webhook", None)
    [row] = await rows(conn)
    assert (row["source"], row["headers"]) == ("billing", {"user-agent": "b"})


def test_hmac_over_the_raw_bytes_matches_the_package() -> None:
    """Our test signer is the package; check it against the spec's HMAC once, by hand."""
    key = base64.b64decode(SECRET.removeprefix("whsec_"))
    headers = signed(b'{"a":1}', "msg_x", timestamp=1_700_000_000)
    mac = hmac.new(key, b'msg_x.1700000000.{"a":1}', hashlib.sha256).digest()
    assert headers["webhook-signature"] == "v1," + base64.b64encode(mac).decode()


async def test_a_checkpoint_that_is_not_json_saves_nothing_and_the_handler_may_go_on(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    box = WebhookInbox(db_url, source="billing")
    await box.store(id="evt_cp_bad", payload={})
    refused: list[tuple[str, list[Any]]] = []

    async def handler(message: WebhookMessage) -> None:
        assert await message.checkpoint({"step": 1})
        for fields in (
            {"at": datetime.now(UTC)},  # not JSON
            {"ratio": float("nan")},  # jsonb has no NaN
            {1: "one"},  # JSON keys are strings: 1 would come back as "1"
            {None: "x"},  # and None as "null"
        ):
            with pytest.raises(DrainpipeError) as caught:
                await message.checkpoint(fields)  # type: ignore[arg-type]
            assert caught.value.issues is not None
            refused.append((caught.value.kind, caught.value.issues[0]["path"]))
        assert message.progress == {"step": 1}
        # nested values are stored as JSON, and progress shows what the next attempt reads
        assert await message.checkpoint({"done": (1, 2), "by": {"3": True}})
        assert message.progress == {"step": 1, "done": [1, 2], "by": {"3": True}}

    assert (await box.process(handler)).succeeded == 1
    assert refused == [("validation", ["fields"])] * 2 + [("validation", ["fields", 1]),
                                                            ("validation", ["fields", None])]  # fmt: skip
    [row] = await rows(conn)
    assert row["checkpoint"] == {"step": 1, "done": [1, 2], "by": {"3": True}}
    assert row["status"] == "processed"
    await box.close()


async def test_a_database_failure_while_storing_is_a_problem_not_a_raise(db_url: str) -> None:
    # the provider must get a Problem it retries on (5xx), never a dropped connection
    closed = await connect(db_url)
    await closed.close()
    held = await connect(db_url)
    await held.execute("SET statement_timeout = '50ms'")
    locker = await connect(db_url)
    try:
        async with locker.transaction():
            await locker.execute("LOCK TABLE drainpipe.webhook_inbox IN ACCESS EXCLUSIVE MODE")
            for db, status, kind in ((closed, 503, "network"), (held, 504, "timeout")):
                box = WebhookInbox(db, source="billing", secrets=SECRET)
                body = b'{"type": "invoice.paid"}'
                response = await box.receive(make_request(body, signed(body, "evt_db")))
                assert response.status == status
                assert response.headers["content-type"] == "application/problem+json"
                problem = json.loads(response.body)
                assert (problem["kind"], problem["status"]) == (kind, status)
                assert "detail" not in problem or kind == "timeout"
        assert await count(locker) == 0
    finally:
        await held.close()
        await locker.close()
