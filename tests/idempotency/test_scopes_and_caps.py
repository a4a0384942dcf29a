"""Idempotency's hardening (docs/reference.md, "Hardening"), async and sync twins alike: a
stored response replays only to its caller, the query string is fingerprinted, scopes are
keyed hashes, and request bodies are capped before fingerprinting."""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Callable, Iterable
from typing import Any

import httpx
import psycopg
import pytest

import drainpipe
from drainpipe import sync
from drainpipe.dev.server import start_server
from drainpipe.http import Receive, Scope, Send, json_response
from tests.streamed import post_streamed, rss_bytes

MiB = 1024 * 1024


class Counter:
    """An ASGI app answering how many times it ran (and the query it saw)."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        self.calls += 1
        body = {"n": self.calls, "query": scope.get("query_string", b"").decode()}
        await json_response(body, 201)(scope, receive, send)


def asgi_client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://shop")


async def test_a_key_without_a_caller_is_refused_unless_anonymous(db_url: str) -> None:
    # issue 36, 2: callers without Authorization shared one scope: B got A's stored answer
    idem = drainpipe.Idempotency(db_url)
    counter = Counter()
    try:
        async with asgi_client(idem.wrap(counter)) as http:
            refused = await http.post("/pay", content=b"{}", headers={"idempotency-key": "k1"})
            assert refused.status_code == 400
            assert refused.json()["code"] == "IDEMPOTENCY_SCOPE_REQUIRED"
            assert counter.calls == 0
            # without a key nothing is stored, so nothing is refused
            assert (await http.post("/pay", content=b"{}")).status_code == 201
            alice = {"idempotency-key": "k1", "authorization": "Bearer alice-0123456789"}
            bob = {"idempotency-key": "k1", "authorization": "Bearer bob-0123456789ab"}
            first = await http.post("/pay", content=b"{}", headers=alice)
            second = await http.post("/pay", content=b"{}", headers=bob)
            assert (first.json()["n"], second.json()["n"]) == (2, 3)  # bob's own ran
            assert "idempotency-replayed" not in second.headers
    finally:
        await idem.db.close()


async def test_the_query_string_is_part_of_the_fingerprint(db_url: str) -> None:
    idem = drainpipe.Idempotency(db_url, anonymous=True)
    try:
        async with asgi_client(idem.wrap(Counter())) as http:
            key = {"idempotency-key": "transfer-1"}
            first = await http.post("/transfer?to=acct1", content=b"{}", headers=key)
            other = await http.post("/transfer?to=acct2", content=b"{}", headers=key)
            again = await http.post("/transfer?to=acct1", content=b"{}", headers=key)
        assert first.status_code == 201
        assert other.status_code == 422 and other.json()["code"] == "IDEMPOTENCY_KEY_REUSED"
        assert again.headers["idempotency-replayed"] == "true" and again.json() == first.json()
    finally:
        await idem.db.close()


def test_the_default_scope_needs_a_key_and_stores_no_bare_digest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("DRAINPIPE_SCOPE_KEY")
    for twin in (drainpipe.Idempotency, sync.Idempotency):
        with pytest.raises(ValueError, match="DRAINPIPE_SCOPE_KEY"):
            twin("postgresql://unused")
        with pytest.raises(ValueError, match="16 bytes"):
            twin("postgresql://unused", scope_key="short")
        twin("postgresql://unused", scope=lambda request: "tenant-1")  # a scope of its own
    headers = {"authorization": "Bearer alice-0123456789"}
    one = drainpipe.idempotency.caller_scope(headers, b"k" * 16)
    two = drainpipe.idempotency.caller_scope(headers, b"j" * 16)
    bare = "caller:" + hashlib.sha256(b"Bearer alice-0123456789").hexdigest()
    assert one.startswith("caller:") and len({one, two, bare}) == 3


async def test_a_streamed_body_over_max_body_bytes_is_refused_before_fingerprinting(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    # issue 36, 1: one unauthenticated 200 MiB POST with a key grew the server by 200 MiB
    idem = drainpipe.Idempotency(db_url, anonymous=True)
    counter = Counter()
    server = await start_server(idem.wrap(counter))
    key = {"idempotency-key": "big"}
    try:
        await post_streamed(server.port, "/orders", key | {"idempotency-key": "warm"}, 1024)
        before = rss_bytes()
        answer = await post_streamed(server.port, "/orders", key, 50 * MiB)
        grown = rss_bytes() - before
    finally:
        await server.stop()
        await idem.db.close()
    assert answer.status == 413 and json.loads(answer.body)["code"] == "BODY_TOO_LARGE"
    assert answer.sent < 10 * MiB and answer.seconds < 10
    assert grown < 20 * MiB, f"the server grew by {grown / MiB:.1f} MiB"
    assert counter.calls == 1  # only the warm-up ran
    cur = await conn.execute("SELECT count(*) FROM drainpipe.idempotency_keys WHERE key = 'big'")
    assert await cur.fetchone() == (0,)


# -- the sync twin: WSGI and Django ----------------------------------------------------------


def wsgi_counter() -> tuple[Callable[..., Iterable[bytes]], list[str]]:
    seen: list[str] = []

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        seen.append(str(environ.get("QUERY_STRING", "")))
        start_response("201 Created", [("Content-Type", "application/json")])
        return [json.dumps({"n": len(seen)}).encode()]

    return app, seen


def call_wsgi(
    app: Any, path: str, body: bytes, headers: dict[str, str], query: str = "", **extra: Any
) -> tuple[str, bytes]:
    environ: dict[str, Any] = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": path,
        "QUERY_STRING": query,
        "CONTENT_LENGTH": str(len(body)),
        "wsgi.input": io.BytesIO(body),
        **{"HTTP_" + k.upper().replace("-", "_"): v for k, v in headers.items()},
        **extra,
    }
    status: list[str] = []
    chunks = app(environ, lambda s, h, e=None: status.append(s))
    return status[0], b"".join(chunks)


def test_the_wsgi_wrapper_scopes_fingerprints_the_query_and_caps_bodies(db_url: str) -> None:
    inner, seen = wsgi_counter()
    with sync.Idempotency(db_url, max_body_bytes=1024) as idem:
        app = idem.wrap_wsgi(inner)
        status, body = call_wsgi(app, "/pay", b"{}", {"idempotency-key": "w1"})
        assert status.startswith("400") and json.loads(body)["code"] == "IDEMPOTENCY_SCOPE_REQUIRED"
        caller = {"idempotency-key": "w1", "authorization": "Bearer carol-0123456789"}
        assert call_wsgi(app, "/pay", b"{}", caller, "to=a")[0].startswith("201")
        status, body = call_wsgi(app, "/pay", b"{}", caller, "to=b")
        assert status.startswith("422") and json.loads(body)["code"] == "IDEMPOTENCY_KEY_REUSED"
        status, body = call_wsgi(app, "/pay", b"x" * 2048, caller | {"idempotency-key": "w2"})
        assert status.startswith("413") and json.loads(body)["code"] == "BODY_TOO_LARGE"
        # a chunked body (no length) is read in pieces and refused once past the cap
        chunked = io.BytesIO(b"y" * 5000)
        status, _ = call_wsgi(
            app,
            "/pay",
            b"",
            caller | {"idempotency-key": "w3"},
            CONTENT_LENGTH="",
            **{"wsgi.input": chunked, "wsgi.input_terminated": True},
        )
        assert status.startswith("413") and chunked.tell() <= 1024 + 65536
    assert seen == ["to=a"]


def test_the_django_middleware_scopes_by_user_else_session(db_url: str) -> None:
    pytest.importorskip("django")
    from django.conf import settings

    if not settings.configured:
        settings.configure(SECRET_KEY="django-secret-of-the-tests", ALLOWED_HOSTS=["*"])
    from django.http import HttpRequest, HttpResponse

    from drainpipe.contrib.django import IdempotencyMiddleware

    calls: list[str] = []

    def view(request: Any) -> HttpResponse:
        calls.append(request.path)
        return HttpResponse(json.dumps({"n": len(calls)}), status=201)

    settings.DRAINPIPE_IDEMPOTENCY = {"db": db_url}
    middleware = IdempotencyMiddleware(view)

    def request(user: Any = None, session: str | None = None, query: str = "") -> Any:
        made = HttpRequest()
        made.method, made.path = "POST", "/orders"
        made.META.update(
            HTTP_IDEMPOTENCY_KEY="d1", QUERY_STRING=query, SERVER_NAME="shop", SERVER_PORT="80"
        )
        made._body = b"{}"
        if user is not None:
            made.user = user
        if session is not None:
            made.session = type("Session", (), {"session_key": session})()
        return made

    class User:
        is_authenticated = True

        def __init__(self, pk: int) -> None:
            self.pk = pk

    try:
        anonymous = middleware(request())
        assert anonymous.status_code == 400
        assert json.loads(anonymous.content)["code"] == "IDEMPOTENCY_SCOPE_REQUIRED"
        first = middleware(request(User(1)))
        other_user = middleware(request(User(2)))
        by_session = middleware(request(session="s-abc"))
        replayed = middleware(request(User(1)))
        moved_query = middleware(request(User(1), query="x=1"))
        assert [first.status_code, other_user.status_code, by_session.status_code] == [201] * 3
        assert replayed["Idempotency-Replayed"] == "true" and replayed.content == first.content
        assert moved_query.status_code == 422
        assert len(calls) == 3
    finally:
        middleware.idempotency.close()
        del settings.DRAINPIPE_IDEMPOTENCY
