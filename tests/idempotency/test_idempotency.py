"""Idempotency keys against real Postgres, over a real ASGI server (uvicorn on loopback)."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import importlib.util
import json
import os
import sys
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import uvicorn
from psycopg.conninfo import make_conninfo
from starlette.applications import Starlette
from starlette.requests import Request as StarletteRequest
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

import drainpipe
from drainpipe.errors import DrainpipeError
from drainpipe.idempotency import fingerprint
from tests.conftest import connect

ROOT = Path(__file__).resolve().parents[2]
BINARY = bytes(range(256)) * 3


@asynccontextmanager
async def serve(app: Any) -> AsyncIterator[httpx.AsyncClient]:
    """Run ``app`` under uvicorn on a free loopback port; yield a client for it."""
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, lifespan="off", log_level="critical", ws="none"
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    async with asyncio.timeout(10):
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=20) as client:
            yield client
    finally:
        server.should_exit = True
        await task


class Shop:
    """Route handlers that count their calls; ``gate`` holds /orders while it is clear."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.entered = asyncio.Event()
        self.gate = asyncio.Event()
        self.gate.set()

    async def orders(self, request: StarletteRequest) -> Any:
        self.calls["orders"] += 1
        n = self.calls["orders"]
        self.entered.set()
        await self.gate.wait()
        body = await request.body()
        return JSONResponse({"n": n, "echo": body.decode("latin-1")}, status_code=201)

    async def flaky(self, request: StarletteRequest) -> Any:
        self.calls["flaky"] += 1
        if self.calls["flaky"] == 1:
            raise RuntimeError("the handler failed")
        return JSONResponse({"n": self.calls["flaky"]}, status_code=201)

    async def unavailable(self, request: StarletteRequest) -> Any:
        self.calls["unavailable"] += 1
        if self.calls["unavailable"] == 1:
            return JSONResponse({"error": "try later"}, status_code=503)
        return JSONResponse({"n": self.calls["unavailable"]}, status_code=201)

    async def rejected(self, request: StarletteRequest) -> Any:
        self.calls["rejected"] += 1
        return JSONResponse({"n": self.calls["rejected"], "error": "no stock"}, status_code=409)

    async def binary(self, request: StarletteRequest) -> Any:
        self.calls["binary"] += 1
        return Response(
            BINARY + bytes([self.calls["binary"]]), media_type="application/octet-stream"
        )

    async def csv(self, request: StarletteRequest) -> Any:
        self.calls["csv"] += 1
        # set as a raw header: Starlette would add a charset to media_type="text/csv"
        return Response(f"n,{self.calls['csv']}\n".encode(), headers={"content-type": "text/csv"})

    async def stream(self, request: StarletteRequest) -> Any:
        self.calls["stream"] += 1
        n = self.calls["stream"]

        async def chunks() -> AsyncIterator[str | bytes]:
            yield "stream "
            yield f"call {n} ".encode()
            yield "é"

        return StreamingResponse(chunks(), status_code=202, media_type="text/plain")

    async def broken_stream(self, request: StarletteRequest) -> Any:
        self.calls["broken_stream"] += 1
        n = self.calls["broken_stream"]

        async def chunks() -> AsyncIterator[bytes]:
            yield b"partial "
            if n == 1:
                raise RuntimeError("the body failed half way")
            yield b"whole"

        return StreamingResponse(chunks(), status_code=201, media_type="text/plain")

    def routes(self) -> dict[str, Callable[[StarletteRequest], Awaitable[Any]]]:
        return {
            "/broken-stream": self.broken_stream,
            "/orders": self.orders,
            "/flaky": self.flaky,
            "/unavailable": self.unavailable,
            "/rejected": self.rejected,
            "/binary": self.binary,
            "/csv": self.csv,
            "/stream": self.stream,
        }


def build_app(idem: drainpipe.Idempotency, shop: Shop, mode: str) -> Any:
    routes = shop.routes()
    if mode == "wrap":
        inner = Starlette(routes=[Route(p, h, methods=["POST", "GET"]) for p, h in routes.items()])
        return idem.wrap(inner)

    def handled(handler: Callable[[StarletteRequest], Awaitable[Any]]) -> Any:
        async def endpoint(request: StarletteRequest) -> Any:
            return await idem.handle(request, lambda: handler(request))

        return endpoint

    return Starlette(
        routes=[Route(p, handled(h), methods=["POST", "GET"]) for p, h in routes.items()]
    )


@asynccontextmanager
async def site(
    db_url: str, mode: str, **options: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, Shop, drainpipe.Idempotency]]:
    # these tests' callers send no credentials: one shared scope, as before scopes were required
    options.setdefault("anonymous", True)
    idem = drainpipe.Idempotency(db_url, **options)
    shop = Shop()
    try:
        async with serve(build_app(idem, shop, mode)) as client:
            yield client, shop, idem
    finally:
        await idem.db.close()


@pytest.fixture(params=["handle", "wrap"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def key(k: str, **extra: str) -> dict[str, str]:
    return {"Idempotency-Key": k, **extra}


async def key_row(conn: psycopg.AsyncConnection[Any], k: str) -> tuple[Any, ...] | None:
    cur = await conn.execute(
        "SELECT state, holder, response_status FROM drainpipe.idempotency_keys WHERE key = %s", (k,)
    )
    return await cur.fetchone()


async def test_twenty_concurrent_requests_run_the_handler_once(
    db_url: str, mode: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    async with site(db_url, mode) as (client, shop, _):
        shop.gate.clear()  # the first request holds its key until we open the gate
        tasks = [
            asyncio.create_task(
                client.post("/orders", content=b'{"item":"tea"}', headers=key("k-20"))
            )
            for _ in range(20)
        ]
        async with asyncio.timeout(15):
            await shop.entered.wait()
            while sum(t.done() for t in tasks) < 19:
                await asyncio.sleep(0.01)
        # a different body with the same key: 422 even while the first still runs
        other = await client.post("/orders", content=b'{"item":"coffee"}', headers=key("k-20"))
        assert other.status_code == 422
        problem = other.json()
        assert problem["code"] == "IDEMPOTENCY_KEY_REUSED" and problem["kind"] == "validation"
        assert problem["issues"] == [
            {"message": "Use a new key for a new request", "path": ["idempotency-key"]}
        ]
        shop.gate.set()
        responses = await asyncio.gather(*tasks)

        assert shop.calls["orders"] == 1
        created = [r for r in responses if r.status_code == 201]
        busy = [r for r in responses if r.status_code == 409]
        assert len(created) == 1 and len(busy) == 19
        for r in busy:
            assert r.headers["retry-after"] == "1"
            assert r.headers["content-type"] == "application/problem+json"
            assert r.json()["code"] == "IDEMPOTENCY_KEY_IN_USE"
            assert r.json()["detail"] == "A request with this idempotency key is still running"
        assert "idempotency-replayed" not in created[0].headers

        replay = await client.post("/orders", content=b'{"item":"tea"}', headers=key("k-20"))
        assert replay.status_code == 201
        assert replay.headers["idempotency-replayed"] == "true"
        assert replay.headers["content-type"] == "application/json"
        assert replay.content == created[0].content
        assert shop.calls["orders"] == 1
    assert (await key_row(conn, "k-20"))[0::2] == ("completed", 201)  # type: ignore[index]


async def test_a_raising_handler_releases_the_key_and_a_retry_runs(
    db_url: str, mode: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    async with site(db_url, mode) as (client, shop, _):
        first = await client.post("/flaky", content=b"x", headers=key("k-raise"))
        assert first.status_code == 500
        assert await key_row(conn, "k-raise") is None
        retry = await client.post("/flaky", content=b"x", headers=key("k-raise"))
        assert retry.status_code == 201 and retry.json() == {"n": 2}
        again = await client.post("/flaky", content=b"x", headers=key("k-raise"))
        assert again.json() == {"n": 2} and again.headers["idempotency-replayed"] == "true"
        assert shop.calls["flaky"] == 2


async def test_a_5xx_passes_through_releases_and_a_retry_runs(
    db_url: str, mode: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    async with site(db_url, mode) as (client, shop, _):
        first = await client.post("/unavailable", content=b"x", headers=key("k-503"))
        assert first.status_code == 503 and first.json() == {"error": "try later"}
        assert await key_row(conn, "k-503") is None
        retry = await client.post("/unavailable", content=b"x", headers=key("k-503"))
        assert retry.status_code == 201 and "idempotency-replayed" not in retry.headers
        assert shop.calls["unavailable"] == 2


async def test_a_4xx_is_stored_and_replayed(db_url: str, mode: str) -> None:
    async with site(db_url, mode) as (client, shop, _):
        first = await client.post("/rejected", content=b"x", headers=key("k-409"))
        second = await client.post("/rejected", content=b"x", headers=key("k-409"))
        assert first.status_code == second.status_code == 409
        assert second.content == first.content and second.json()["n"] == 1
        assert second.headers["idempotency-replayed"] == "true"
        assert shop.calls["rejected"] == 1


@pytest.mark.parametrize(
    ("path", "status", "content_type"),
    [
        ("/binary", 200, "application/octet-stream"),
        ("/csv", 200, "text/csv"),
        ("/stream", 202, "text/plain; charset=utf-8"),
    ],
)
async def test_replays_carry_the_exact_body_status_and_content_type(
    db_url: str, mode: str, path: str, status: int, content_type: str
) -> None:
    async with site(db_url, mode) as (client, shop, _):
        first = await client.post(path, content=b"\x00\x01", headers=key("k-" + path))
        replay = await client.post(path, content=b"\x00\x01", headers=key("k-" + path))
        assert first.status_code == replay.status_code == status
        assert first.headers["content-type"] == replay.headers["content-type"] == content_type
        assert replay.content == first.content
        assert replay.headers["idempotency-replayed"] == "true"
        assert shop.calls[path.strip("/")] == 1
    if path == "/binary":
        assert replay.content == BINARY + b"\x01"
    if path == "/stream":
        assert replay.content == "stream call 1 é".encode()


async def test_non_utf8_bodies_are_fingerprinted_as_bytes(db_url: str, mode: str) -> None:
    async with site(db_url, mode) as (client, shop, _):
        body = b"\xff\xfe\x00\x80binary"
        first = await client.post("/orders", content=body, headers=key("k-bytes"))
        replay = await client.post("/orders", content=body, headers=key("k-bytes"))
        other = await client.post("/orders", content=b"\xff\xfe\x00\x81", headers=key("k-bytes"))
        assert first.status_code == 201 and first.json()["echo"] == body.decode("latin-1")
        assert replay.content == first.content and replay.headers["idempotency-replayed"] == "true"
        assert other.status_code == 422
        assert shop.calls["orders"] == 1


async def test_bad_keys_answer_the_contract_400s_never_500(db_url: str, mode: str) -> None:
    async with site(db_url, mode, required=True) as (client, shop, _):
        missing = await client.post("/orders", content=b"{}")
        assert missing.status_code == 400
        assert missing.headers["content-type"] == "application/problem+json"
        assert missing.json() == {
            "type": "https://drainpipe.dev/problems/invalid-request",
            "title": "Invalid request",
            "status": 400,
            "kind": "invalid_request",
            "instance": "/orders",
            "code": "IDEMPOTENCY_KEY_MISSING",
        }
        bad_keys: list[str | bytes] = ["a" * 256, "", "\xe9t\xe9".encode("latin-1"), b"\xff\xfe"]
        for bad in bad_keys:
            response = await client.post("/orders", content=b"{}", headers={"Idempotency-Key": bad})
            assert response.status_code == 400, bad
            assert response.json()["code"] == "IDEMPOTENCY_KEY_INVALID"
            assert "detail" not in response.json()
        assert shop.calls["orders"] == 0

        longest = await client.post("/orders", content=b"{}", headers=key("a" * 255))
        assert longest.status_code == 201
        # a UTF-8 key is text: 255 characters is fine even when that is more bytes
        accented = ("é" * 255).encode()
        utf8 = await client.post("/orders", content=b"{}", headers={"Idempotency-Key": accented})
        assert utf8.status_code == 201
        # the header name is matched case-insensitively
        lower = await client.post("/orders", content=b"{}", headers={"idempotency-key": "a" * 255})
        assert lower.headers["idempotency-replayed"] == "true"
        assert shop.calls["orders"] == 2


async def test_without_required_a_request_without_key_runs_unprotected(
    db_url: str, mode: str
) -> None:
    async with site(db_url, mode) as (client, shop, _):
        for _ in range(2):
            assert (await client.post("/orders", content=b"{}")).status_code == 201
        # safe methods are idempotent by definition: a key on a GET changes nothing
        for _ in range(2):
            assert (await client.get("/orders", headers=key("k-get"))).status_code == 201
        assert shop.calls["orders"] == 4


async def test_takeover_fences_the_first_holder(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    idem = drainpipe.Idempotency(db_url, lock=30, anonymous=True)
    fp = fingerprint("POST", "/orders", b'{"item":"tea"}')
    try:
        first = await idem.begin("k-take", fp)
        assert first.state == "started" and first.holder is not None
        assert (await idem.begin("k-take", fp)).state == "running"
        # the first holder died: its lock ran out (aged, not slept)
        await conn.execute(
            "UPDATE drainpipe.idempotency_keys SET locked_until = now() - interval '1 second'"
            " WHERE key = 'k-take'"
        )
        second = await idem.begin("k-take", fp)
        assert second.state == "started" and second.holder not in (None, first.holder)
        assert (await idem.begin("k-take", fp)).state == "running"

        assert await idem.complete("k-take", first.holder, 201, b"late") is False
        assert await idem.release("k-take", first.holder) is False
        row = await key_row(conn, "k-take")
        assert row is not None and row[0] == "running" and str(row[1]) == second.holder

        assert second.holder is not None
        assert (
            await idem.complete(
                "k-take", second.holder, 201, b'{"by":"second"}', content_type="application/json"
            )
            is True
        )
        assert await idem.complete("k-take", second.holder, 200, b"again") is False
        assert await idem.release("k-take", second.holder) is False  # completed keys stay

        # what a later HTTP request replays is the new holder's result
        shop = Shop()
        async with serve(build_app(idem, shop, "handle")) as client:
            replay = await client.post("/orders", content=b'{"item":"tea"}', headers=key("k-take"))
        assert replay.status_code == 201 and replay.content == b'{"by":"second"}'
        assert replay.headers["content-type"] == "application/json"
        assert shop.calls["orders"] == 0
    finally:
        await idem.db.close()


async def test_keys_expire_after_their_ttl_and_behave_as_new(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    async with site(db_url, "wrap", ttl=3600) as (client, shop, idem):
        first = await client.post("/orders", content=b"a", headers=key("k-ttl"))
        cur = await conn.execute(
            "SELECT expires_at - created_at FROM drainpipe.idempotency_keys WHERE key = 'k-ttl'"
        )
        assert (await cur.fetchone())[0].total_seconds() == pytest.approx(3600, abs=1)  # type: ignore[index]
        await conn.execute(
            "UPDATE drainpipe.idempotency_keys SET expires_at = now() - interval '1 second'"
        )
        # not a mismatch: the expired key is gone, so another body starts afresh
        other = await client.post("/orders", content=b"b", headers=key("k-ttl"))
        assert other.status_code == 201 and "idempotency-replayed" not in other.headers
        assert other.json()["n"] == 2 and first.json()["n"] == 1
        assert shop.calls["orders"] == 2
        # purge removes only expired keys
        await conn.execute(
            "UPDATE drainpipe.idempotency_keys SET expires_at = now() - interval '1 second'"
        )
        await client.post("/orders", content=b"c", headers=key("k-fresh"))
        assert await idem.purge() == 1
        cur = await conn.execute("SELECT key FROM drainpipe.idempotency_keys")
        assert await cur.fetchall() == [("k-fresh",)]


async def test_keys_of_different_callers_never_collide(
    db_url: str, mode: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    async with site(db_url, mode) as (client, shop, _):
        alice = {"Authorization": "Bearer alice"}
        bob = {"Authorization": "Bearer bob"}
        a1 = await client.post("/orders", content=b"same", headers=key("shared", **alice))
        b1 = await client.post("/orders", content=b"other", headers=key("shared", **bob))
        anonymous = await client.post("/orders", content=b"third", headers=key("shared"))
        assert (a1.status_code, b1.status_code, anonymous.status_code) == (201, 201, 201)
        a2 = await client.post("/orders", content=b"same", headers=key("shared", **alice))
        assert a2.headers["idempotency-replayed"] == "true" and a2.json()["n"] == a1.json()["n"]
        assert shop.calls["orders"] == 3
    cur = await conn.execute("SELECT scope FROM drainpipe.idempotency_keys ORDER BY scope")
    scopes = [row[0] for row in await cur.fetchall()]
    # keyed hashes (HMAC under the server's scope key), never a bare digest of a credential
    key_bytes = os.environ["DRAINPIPE_SCOPE_KEY"].encode()
    expected = [
        "caller:" + hmac.new(key_bytes, b"caller\0Bearer " + who, hashlib.sha256).hexdigest()
        for who in (b"alice", b"bob")
    ]
    assert scopes == sorted(["", *expected])
    bare = {"caller:" + hashlib.sha256(b"Bearer " + who).hexdigest() for who in (b"alice", b"bob")}
    assert not bare & set(scopes)


async def test_scope_option_string_or_callable(db_url: str) -> None:
    async def tenant(request: Any) -> str:
        return "tenant:" + request.headers.get("x-tenant", "none")

    async with site(db_url, "handle", scope=tenant) as (client, shop, _):
        await client.post("/orders", content=b"x", headers=key("k", **{"X-Tenant": "a"}))
        await client.post("/orders", content=b"x", headers=key("k", **{"X-Tenant": "b"}))
        again = await client.post("/orders", content=b"x", headers=key("k", **{"X-Tenant": "a"}))
        assert again.headers["idempotency-replayed"] == "true" and shop.calls["orders"] == 2
    async with site(db_url, "wrap", scope="everyone") as (client, shop, _):
        await client.post("/orders", content=b"y", headers=key("k", Authorization="Bearer a"))
        again = await client.post(
            "/orders", content=b"y", headers=key("k", Authorization="Bearer b")
        )
        assert again.headers["idempotency-replayed"] == "true" and shop.calls["orders"] == 1


async def test_a_response_over_max_body_bytes_is_refused_and_the_key_released(
    db_url: str, mode: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    async with site(db_url, mode, max_body_bytes=100) as (client, shop, _):
        response = await client.post("/binary", content=b"x", headers=key("k-big"))
        assert response.status_code == 500
        assert response.json()["code"] == "IDEMPOTENCY_RESPONSE_TOO_LARGE"
        assert await key_row(conn, "k-big") is None
        assert shop.calls["binary"] == 1
        small = await client.post("/csv", content=b"x", headers=key("k-small"))
        assert small.status_code == 200 and (await key_row(conn, "k-small"))[0] == "completed"  # type: ignore[index]


async def test_a_database_error_answers_its_problem_and_skips_the_handler(
    db_url: str, mode: str
) -> None:
    # connected as anon: the functions are not executable, Postgres answers 42501
    anon_url = make_conninfo(db_url, options="-c role=anon")
    async with site(anon_url, mode) as (client, shop, _):
        response = await client.post("/orders", content=b"x", headers=key("k-anon"))
        assert response.status_code == 403 and response.json()["kind"] == "forbidden"
        assert shop.calls["orders"] == 0


async def test_low_level_begin_complete_release(db_url: str) -> None:
    idem = drainpipe.Idempotency(db_url, anonymous=True)
    try:
        started = await idem.begin("low", "fp1", scope="s")
        assert started.state == "started" and started.status is None
        assert (await idem.begin("low", "fp2", scope="s")).state == "mismatch"
        assert (await idem.begin("low", "fp2", scope="other")).state == "started"
        assert await idem.complete("low", "not-a-token", 200, "x", scope="s") is False
        assert await idem.complete("low", started.holder or "", 200, "x", scope="wrong") is False
        assert await idem.release("low", started.holder or "", scope="s") is True
        again = await idem.begin("low", "fp2", scope="s")  # released: a new request may use it
        assert again.state == "started" and again.holder is not None
        assert await idem.complete("low", again.holder, 202, "héllo", scope="s") is True
        replay = await idem.begin("low", "fp2", scope="s")
        assert (replay.state, replay.status, replay.body, replay.holder) == (
            "replay",
            202,
            "héllo".encode(),
            None,
        )
        with pytest.raises(DrainpipeError) as status_error:
            await idem.complete("low", again.holder, 600, b"", scope="s")
        assert status_error.value.kind == "invalid_request"
        with pytest.raises(DrainpipeError) as key_error:
            await idem.begin("x" * 256, "fp")
        assert key_error.value.code == "IDEMPOTENCY_KEY_INVALID"
    finally:
        await idem.db.close()


@pytest.mark.parametrize(
    "value",
    [{"ok": True}, [1, "two", None, {"three": 3.5}], 0, 2**70, -1.25, True, False, "text"],
    ids=["object", "array", "zero", "big-int", "float", "true", "false", "string"],
)
async def test_a_json_body_is_stored_and_replayed_as_the_same_value(
    db_url: str, value: Any
) -> None:
    idem = drainpipe.Idempotency(db_url, anonymous=True)
    try:
        started = await idem.begin("json", "fp", scope="s")
        assert started.holder is not None
        assert await idem.complete("json", started.holder, 201, value, scope="s") is True
        replay = await idem.begin("json", "fp", scope="s")
        assert (replay.state, replay.status) == ("replay", 201)
        if isinstance(value, str):  # text stays what it was: UTF-8 bytes
            assert (replay.body, replay.content_type) == (value.encode(), None)
        else:
            assert replay.body == value and type(replay.body) is type(value)
            assert replay.content_type == "application/json"
    finally:
        await idem.db.close()


async def test_bytes_bodies_and_their_content_type_are_kept(db_url: str) -> None:
    idem = drainpipe.Idempotency(db_url, anonymous=True)
    try:
        started = await idem.begin("raw", "fp")
        assert started.holder is not None
        stored = b'{"looks": "like json"}'
        assert await idem.complete("raw", started.holder, 200, stored, content_type="text/x")
        replay = await idem.begin("raw", "fp")
        assert (replay.body, replay.content_type) == (stored, "text/x")
    finally:
        await idem.db.close()


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        ({"when": object()}, "validation"),
        (float("nan"), "validation"),
        ({1: {2, 3}}, "validation"),
    ],
)
async def test_a_body_json_cannot_hold_is_refused_and_nothing_is_stored(
    db_url: str, body: Any, kind: str
) -> None:
    idem = drainpipe.Idempotency(db_url, anonymous=True)
    try:
        started = await idem.begin("bad-body", "fp")
        assert started.holder is not None
        with pytest.raises(DrainpipeError) as caught:
            await idem.complete("bad-body", started.holder, 200, body)
        assert caught.value.kind == kind
        assert caught.value.issues and caught.value.issues[0]["path"] == ["body"]
        assert (await idem.begin("bad-body", "fp")).state == "running"  # still ours, unsettled
        with pytest.raises(DrainpipeError) as typed:
            await idem.complete("bad-body", started.holder, 200, {"a": 1}, content_type="text/x")
        assert typed.value.kind == "invalid_request"
        assert await idem.complete("bad-body", started.holder, 200, {"a": 1}) is True
    finally:
        await idem.db.close()


async def test_an_http_replay_of_a_json_value_sends_json_bytes(db_url: str) -> None:
    idem = drainpipe.Idempotency(db_url, scope="", anonymous=True)
    try:
        body = b"{}"
        started = await idem.begin("http", fingerprint("POST", "/orders", body))
        assert started.holder is not None
        assert await idem.complete("http", started.holder, 201, {"id": 7, "name": "é"})

        async def handler() -> Response:
            raise AssertionError("a replay never runs the handler")

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        scope = {
            "type": "http",
            "method": "POST",
            "path": "/orders",
            "query_string": b"",
            "headers": [(b"idempotency-key", b"http")],
        }
        response = await idem.handle(StarletteRequest(scope, receive), handler)
        assert response.status_code == 201
        assert json.loads(response.body) == {"id": 7, "name": "é"}
        assert response.headers["content-type"] == "application/json"
        assert response.headers["idempotency-replayed"] == "true"
    finally:
        await idem.db.close()


def test_options_are_checked_at_construction() -> None:
    for bad in ({"ttl": 0}, {"lock": -1}, {"ttl": "1 day"}, {"lock": float("nan")}):
        with pytest.raises(DrainpipeError) as info:
            drainpipe.Idempotency("postgresql://unused", **bad)
        assert info.value.kind == "validation"
    with pytest.raises(ValueError, match="header"):
        drainpipe.Idempotency("postgresql://unused", header=" ")
    with pytest.raises(TypeError, match="scope"):
        drainpipe.Idempotency("postgresql://unused", scope=42)  # type: ignore[arg-type]


@pytest.mark.parametrize("role", ["anon", "authenticated", "service_role"])
async def test_only_the_service_role_may_execute(db_url: str, role: str) -> None:
    calls = [
        "SELECT * FROM drainpipe.begin_idempotent_v1('', 'p', 'h')",
        "SELECT drainpipe.complete_idempotent_v1('', 'p', gen_random_uuid(), 200, ''::bytea)",
        "SELECT drainpipe.release_idempotent_v1('', 'p', gen_random_uuid())",
        "SELECT drainpipe.purge_idempotency_keys_v1()",
        "SELECT drainpipe.acquire_lease_v1('p')",
        "SELECT drainpipe.extend_lease_v1('p', gen_random_uuid())",
        "SELECT drainpipe.release_lease_v1('p', gen_random_uuid())",
    ]
    conn = await connect(db_url)
    try:
        await conn.execute(f"SET ROLE {role}")
        for sql in calls:
            if role == "service_role":
                await conn.execute(sql)
            else:
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    await conn.execute(sql)
        if role != "service_role":
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                await conn.execute("SELECT * FROM drainpipe.idempotency_keys")
    finally:
        await conn.close()


def load_orders_function() -> Any:
    spec = importlib.util.spec_from_file_location("orders_function", ROOT / "functions/orders.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_the_orders_function(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    module = load_orders_function()  # importing needs neither a database nor the env
    monkeypatch.setenv("DATABASE_URL", db_url)
    try:
        async with serve(module.app) as client:
            order = b'{"item": "tea", "quantity": 2}'
            first = await client.post("/api/orders", content=order, headers=key("o-1"))
            assert first.status_code == 201 and first.json()["item"] == "tea"
            again = await client.post("/api/orders", content=order, headers=key("o-1"))
            assert again.json()["id"] == first.json()["id"]
            assert again.headers["idempotency-replayed"] == "true"
            assert (await client.post("/api/orders", content=order)).status_code == 400
            garbage = await client.post("/api/orders", content=b"\xff\xfe", headers=key("o-2"))
            assert garbage.status_code == 422 and garbage.json()["code"] == "INVALID_JSON"
            deep = b"[" * 5000 + b"]" * 5000  # json.loads raises RecursionError, not a 500
            nested = await client.post("/api/orders", content=deep, headers=key("o-3"))
            assert nested.status_code == 422 and nested.json()["code"] == "INVALID_JSON"
    finally:
        if module.idempotency is not None:
            await module.idempotency.db.close()
    sys.modules.pop("orders_function", None)


# -- review: streams, disconnects, whitespace, races -----------------------------------------


async def test_a_response_body_that_fails_while_streaming_releases_the_key(
    db_url: str, mode: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    # under handle() the body is read after the handler returned; a failure there is the
    # handler's failure: the key must not stay "running" until its lock runs out
    async with site(db_url, mode) as (client, shop, _):
        first = await client.post("/broken-stream", content=b"x", headers=key("k-broken"))
        assert first.status_code == 500  # nothing was sent yet: the server answers 500
        assert await key_row(conn, "k-broken") is None
        retry = await client.post("/broken-stream", content=b"x", headers=key("k-broken"))
        assert retry.status_code == 201 and retry.content == b"partial whole"
        assert shop.calls["broken_stream"] == 2


class RawApp:
    """An ASGI app sending its response the unusual ways (many chunks, no body message,
    raising after the start, a large 5xx); counts calls per path."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        path = scope["path"]
        self.calls[path] += 1
        n = self.calls[path]
        ctype = [(b"content-type", b"text/plain")]
        if path == "/chunks":
            await send({"type": "http.response.start", "status": 201, "headers": ctype})
            for i in range(50):
                part = f"{n}:{i};".encode()
                await send({"type": "http.response.body", "body": part, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        elif path == "/no-body":
            await send({"type": "http.response.start", "status": 204, "headers": []})
        elif path == "/crash-after-start":
            await send({"type": "http.response.start", "status": 200, "headers": ctype})
            if n == 1:
                raise RuntimeError("the app failed after starting its response")
            await send({"type": "http.response.body", "body": b"ok"})
        elif path == "/then-fails":
            # like a Starlette background task failing after the response went out
            await send({"type": "http.response.start", "status": 201, "headers": ctype})
            await send({"type": "http.response.body", "body": f"order {n}".encode()})
            raise RuntimeError("the background task failed")
        elif path == "/big-503":
            await send({"type": "http.response.start", "status": 503, "headers": ctype})
            for _ in range(10):
                await send({"type": "http.response.body", "body": b"e" * 100, "more_body": True})
            await send({"type": "http.response.body", "body": b"!"})


async def test_wrap_handles_chunked_empty_and_crashing_inner_apps(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    idem = drainpipe.Idempotency(db_url, max_body_bytes=500, anonymous=True)
    raw = RawApp()
    try:
        async with serve(idem.wrap(raw)) as client:
            first = await client.post("/chunks", content=b"x", headers=key("k-chunks"))
            again = await client.post("/chunks", content=b"x", headers=key("k-chunks"))
            assert first.status_code == again.status_code == 201
            assert first.content == again.content == "".join(f"1:{i};" for i in range(50)).encode()
            assert again.headers["idempotency-replayed"] == "true"

            empty = await client.post("/no-body", content=b"x", headers=key("k-empty"))
            replay = await client.post("/no-body", content=b"x", headers=key("k-empty"))
            assert (empty.status_code, empty.content) == (204, b"")
            assert (replay.status_code, replay.content) == (204, b"")
            assert replay.headers["idempotency-replayed"] == "true"

            crashed = await client.post("/crash-after-start", content=b"x", headers=key("k-c"))
            assert crashed.status_code == 500
            assert await key_row(conn, "k-c") is None
            retried = await client.post("/crash-after-start", content=b"x", headers=key("k-c"))
            assert (retried.status_code, retried.content) == (200, b"ok")

            # a 5xx is passed through unstored: whole, even over max_body_bytes
            big = await client.post("/big-503", content=b"x", headers=key("k-503-big"))
            assert big.status_code == 503 and big.content == b"e" * 1000 + b"!"
            assert await key_row(conn, "k-503-big") is None
        assert raw.calls == Counter(
            {"/chunks": 1, "/no-body": 1, "/crash-after-start": 2, "/big-503": 1}
        )
    finally:
        await idem.db.close()


async def test_a_key_with_surrounding_whitespace_is_the_same_key(
    db_url: str, mode: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    # a proxy may trim the header value (RFC 9110 field values exclude it); a retry must
    # not run again because one hop kept the spaces and another did not
    idem = drainpipe.Idempotency(db_url, anonymous=True)
    shop = Shop()
    transport = httpx.ASGITransport(app=build_app(idem, shop, mode))
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://shop") as client:
            first = await client.post("/orders", content=b"x", headers=key(" \tk-ws "))
            again = await client.post("/orders", content=b"x", headers=key("k-ws"))
            assert first.status_code == 201
            assert again.headers["idempotency-replayed"] == "true"
            blank = await client.post("/orders", content=b"x", headers=key("  \t "))
            assert blank.status_code == 400 and blank.json()["code"] == "IDEMPOTENCY_KEY_INVALID"
        assert shop.calls["orders"] == 1
        cur = await conn.execute("SELECT key FROM drainpipe.idempotency_keys")
        assert await cur.fetchall() == [("k-ws",)]
    finally:
        await idem.db.close()


async def test_a_request_whose_body_is_cut_short_never_runs_the_handler(
    db_url: str, mode: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    # the client disconnects half way through its body: running the handler on half a
    # body (and storing that as the key's answer) would be worse than not answering
    idem = drainpipe.Idempotency(db_url, anonymous=True)
    shop = Shop()
    app = build_app(idem, shop, mode)
    incoming = [
        {"type": "http.request", "body": b'{"item": "te', "more_body": True},
        {"type": "http.disconnect"},
    ]

    async def receive() -> dict[str, Any]:
        if incoming:
            return incoming.pop(0)
        await asyncio.Event().wait()  # never: the client is gone
        return {"type": "http.disconnect"}

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/orders",
        "raw_path": b"/orders",
        "root_path": "",
        "query_string": b"",
        "headers": [(b"idempotency-key", b"k-cut"), (b"content-length", b"20")],
        "server": ("shop", 80),
        "client": ("127.0.0.1", 1234),
    }
    try:
        async with asyncio.timeout(5):
            await app(scope, receive, send)
    finally:
        await idem.db.close()
    assert shop.calls["orders"] == 0
    assert await key_row(conn, "k-cut") is None
    start = sent[0]
    assert start["type"] == "http.response.start" and start["status"] == 400
    problem = json.loads(b"".join(m.get("body", b"") for m in sent[1:]))
    assert problem["code"] == "REQUEST_BODY_INCOMPLETE" and problem["kind"] == "invalid_request"
    assert problem["instance"] == "/orders" and "detail" not in problem


async def test_problem_formatter_keeps_status_and_retry_after(db_url: str) -> None:
    def problem(body: dict[str, Any], error: DrainpipeError) -> dict[str, Any]:
        return {"error": error.code, "was": body["status"]}

    async with site(db_url, "wrap", problem=problem) as (client, shop, _):
        shop.gate.clear()
        first = asyncio.create_task(client.post("/orders", content=b"a", headers=key("k-f")))
        async with asyncio.timeout(10):
            await shop.entered.wait()
        busy = await client.post("/orders", content=b"a", headers=key("k-f"))
        reused = await client.post("/orders", content=b"b", headers=key("k-f"))
        shop.gate.set()
        assert (await first).status_code == 201
    assert busy.status_code == 409 and busy.headers["retry-after"] == "1"
    assert busy.headers["content-type"] == "application/problem+json"
    assert busy.json() == {"error": "IDEMPOTENCY_KEY_IN_USE", "was": 409}
    assert reused.status_code == 422
    assert reused.json() == {"error": "IDEMPOTENCY_KEY_REUSED", "was": 422}


@pytest.mark.parametrize("aged", ["expires_at", "locked_until"])
async def test_concurrent_begins_on_an_expired_key_start_exactly_once(
    db_url: str, conn: psycopg.AsyncConnection[Any], aged: str
) -> None:
    # expires_at: the whole key ran out (completed, even); locked_until: its holder died
    fp = fingerprint("POST", "/orders", b"x")
    setup = drainpipe.Idempotency(conn)
    begun = await setup.begin("k-race", fp)
    assert begun.holder is not None
    if aged == "expires_at":
        assert await setup.complete("k-race", begun.holder, 201, b"old")
    await conn.execute(
        f"UPDATE drainpipe.idempotency_keys SET {aged} = now() - interval '1 second'"
    )
    takers = [await connect(db_url) for _ in range(8)]
    try:
        results = await asyncio.gather(
            *(drainpipe.Idempotency(c).begin("k-race", fp) for c in takers)
        )
    finally:
        for c in takers:
            await c.close()
    states = Counter(r.state for r in results)
    assert states == Counter({"started": 1, "running": 7})
    [winner] = [r for r in results if r.state == "started"]
    row = await key_row(conn, "k-race")
    assert row is not None and row[0] == "running" and str(row[1]) == winner.holder
    assert await setup.complete("k-race", begun.holder, 201, b"late") is False


async def test_an_app_raising_after_its_whole_response_still_stores_and_sends_it(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    # unwrapped, the client would have had the 201; wrapped, a 500 would make it retry and
    # create the order twice
    idem = drainpipe.Idempotency(db_url, anonymous=True)
    raw = RawApp()
    try:
        async with serve(idem.wrap(raw)) as client:
            first = await client.post("/then-fails", content=b"x", headers=key("k-bg"))
            again = await client.post("/then-fails", content=b"x", headers=key("k-bg"))
        assert (first.status_code, first.content) == (201, b"order 1")
        assert (again.status_code, again.content) == (201, b"order 1")
        assert again.headers["idempotency-replayed"] == "true"
        assert raw.calls["/then-fails"] == 1
        assert (await key_row(conn, "k-bg"))[0::2] == ("completed", 201)  # type: ignore[index]
    finally:
        await idem.db.close()
