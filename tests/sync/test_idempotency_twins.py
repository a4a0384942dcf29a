"""Idempotency keys on both twins, and the WSGI wrapper under a real threaded WSGI server:
20 concurrent requests with one key run the view once."""

from __future__ import annotations

import asyncio
import http.client
import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import pytest

import drainpipe
from drainpipe import DrainpipeError, sync
from drainpipe.http import Headers, Request, Response
from drainpipe.testing import Clock
from tests.sync.conftest import Twin


async def test_begin_complete_release_on_both_twins(twin: Twin, db_url: str) -> None:
    idem = twin.idempotency(db_url)
    first = await idem.begin("k1", "fp")
    assert first.state == "started" and first.holder
    assert (await idem.begin("k1", "fp")).state == "running"
    assert (await idem.begin("k1", "other")).state == "mismatch"
    assert await idem.complete("k1", first.holder, 201, {"id": 7}) is True
    assert await idem.complete("k1", first.holder, 201, {"id": 7}) is False
    replay = await idem.begin("k1", "fp")
    assert (replay.state, replay.status, replay.body) == ("replay", 201, {"id": 7})
    second = await idem.begin("k2", "fp", "tenant:a")
    assert await idem.release("k2", "not-a-holder", "tenant:a") is False
    assert await idem.release("k2", second.holder, "tenant:a") is True
    assert (await idem.begin("k2", "fp", "tenant:a")).state == "started"
    assert await idem.purge() == 0


async def test_both_twins_refuse_the_same_keys(db_url: str) -> None:
    async_idem = drainpipe.Idempotency(db_url)
    sync_idem = sync.Idempotency(db_url)
    calls = [
        ("begin", ("x" * 256, "fp")),
        ("begin", ("", "fp")),
        ("begin", ("k", "")),
        ("begin", ("k", "fp", "\x00")),
        ("complete", ("k", "h", 99, b"")),
        ("complete", ("k", "h", 200, {1, 2})),
        ("release", ("k\n", "h")),
        ("purge", ()),
    ]
    try:
        for name, args in calls:
            kwargs = {"batch": 0} if name == "purge" else {}
            with pytest.raises(DrainpipeError) as expected:
                await getattr(async_idem, name)(*args, **kwargs)
            with pytest.raises(DrainpipeError) as got:
                getattr(sync_idem, name)(*args, **kwargs)
            assert (got.value.kind, got.value.code, str(got.value)) == (
                expected.value.kind,
                expected.value.code,
                str(expected.value),
            ), name
    finally:
        await async_idem.db.close()
        sync_idem.close()


# -- WSGI ---------------------------------------------------------------------------------


class ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    request_queue_size = 64  # 20 clients connect at once (the default backlog is 5)


class QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def order_view(runs: list[bytes], hold: float = 0.0) -> Callable[..., Iterable[bytes]]:
    lock = threading.Lock()

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        if environ["REQUEST_METHOD"] == "POST":
            with lock:
                runs.append(body)
                number = len(runs)
            time.sleep(hold)
            status = "201 Created"
        else:
            number, status = 0, "200 OK"
        data = json.dumps({"order": number}).encode()
        start_response(status, [("Content-Type", "application/json")])
        return [data]

    return app


@pytest.fixture
def serve() -> Iterator[Callable[[Any], int]]:
    servers: list[Any] = []

    def start(app: Any) -> int:
        server = make_server(
            "127.0.0.1", 0, app, server_class=ThreadingWSGIServer, handler_class=QuietHandler
        )
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return int(server.server_address[1])

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def post(port: int, body: bytes, headers: dict[str, str], method: str = "POST") -> Any:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, "/orders", body=body, headers=headers)
        response = conn.getresponse()
        headers = {name.lower(): value for name, value in response.getheaders()}
        return response.status, headers, response.read()
    finally:
        conn.close()


def test_twenty_concurrent_requests_with_one_key_run_the_view_once(
    db_url: str, serve: Callable[[Any], int]
) -> None:
    runs: list[bytes] = []
    with sync.Idempotency(db_url, anonymous=True) as idem:
        port = serve(idem.wrap_wsgi(order_view(runs, hold=0.5)))
        barrier = threading.Barrier(20)
        answers: list[Any] = [None] * 20

        def client(index: int) -> None:
            barrier.wait()
            try:
                answers[index] = post(port, b'{"sku": 1}', {"Idempotency-Key": "order-1"})
            except Exception as exc:  # seen by the assertion below, not lost in a thread
                answers[index] = (repr(exc), {}, b"")

        threads = [threading.Thread(target=client, args=(n,)) for n in range(20)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert runs == [b'{"sku": 1}']  # the view ran once
        statuses = sorted(status for status, _, _ in answers)
        assert statuses.count(201) >= 1 and set(statuses) <= {201, 409}
        for status, headers, body in answers:
            if status == 409:
                assert headers["retry-after"] == "1"
                assert json.loads(body)["code"] == "IDEMPOTENCY_KEY_IN_USE"
            else:
                assert json.loads(body) == {"order": 1}

        status, headers, body = post(port, b'{"sku": 1}', {"Idempotency-Key": "order-1"})
        assert (status, headers["idempotency-replayed"], json.loads(body)) == (
            201,
            "true",
            {"order": 1},
        )
        assert headers["content-type"] == "application/json"
        status, _, body = post(port, b'{"sku": 2}', {"Idempotency-Key": "order-1"})
        assert (status, json.loads(body)["code"]) == (422, "IDEMPOTENCY_KEY_REUSED")
        assert post(port, b"{}", {})[0] == 201  # no key: no idempotency
        assert post(port, b"", {"Idempotency-Key": "order-1"}, method="GET")[0] == 200
        assert len(runs) == 2


def test_a_raising_or_failing_view_releases_the_key(db_url: str) -> None:
    calls: list[str] = []

    def flaky(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        calls.append("run")
        if len(calls) == 1:
            raise RuntimeError("boom")
        if len(calls) == 2:
            start_response("503 Service Unavailable", [("Content-Type", "text/plain")])
            return [b"later"]
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"done"]

    with sync.Idempotency(db_url, required=True, anonymous=True) as idem:
        app = idem.wrap_wsgi(flaky)
        with pytest.raises(RuntimeError):
            call_wsgi(app, b"x", {"HTTP_IDEMPOTENCY_KEY": "k"})
        assert call_wsgi(app, b"x", {"HTTP_IDEMPOTENCY_KEY": "k"})[0] == "503 Service Unavailable"
        assert call_wsgi(app, b"x", {"HTTP_IDEMPOTENCY_KEY": "k"})[0] == "200 OK"
        assert call_wsgi(app, b"x", {"HTTP_IDEMPOTENCY_KEY": "k"})[2] == b"done"
        assert calls == ["run", "run", "run"]
        status, _, body = call_wsgi(app, b"x", {})
        assert (status, json.loads(body)["code"]) == ("400 Bad Request", "IDEMPOTENCY_KEY_MISSING")


def call_wsgi(app: Any, body: bytes, extra: dict[str, str]) -> tuple[str, dict[str, str], bytes]:
    import io

    environ: dict[str, Any] = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": "/orders",
        "SCRIPT_NAME": "",
        "CONTENT_LENGTH": str(len(body)),
        "CONTENT_TYPE": "application/json",
        "wsgi.input": io.BytesIO(body),
        **extra,
    }
    seen: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        seen["status"], seen["headers"] = status, dict(headers)
        return lambda data: None

    data = b"".join(app(environ, start_response))
    return seen["status"], seen["headers"], data


async def test_the_wsgi_wrapper_answers_as_the_async_handle_does(db_url: str) -> None:
    """The same request sequence through ``Idempotency.handle`` and ``wrap_wsgi``: the same
    statuses, codes, bodies and replay header."""
    async_idem = drainpipe.Idempotency(db_url, required=True, scope="async")
    sync_idem = sync.Idempotency(db_url, required=True, scope="sync")
    runs = {"async": 0, "sync": 0}

    async def handler() -> Response:
        runs["async"] += 1
        return Response(201, b'{"ok":true}', content_type="application/json")

    def view(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        runs["sync"] += 1
        start_response("201 Created", [("Content-Type", "application/json")])
        return [b'{"ok":true}']

    app = sync_idem.wrap_wsgi(view)
    sequence = [
        (b"a", {"idempotency-key": "k"}),
        (b"a", {"idempotency-key": "k"}),
        (b"b", {"idempotency-key": "k"}),
        (b"a", {}),
        (b"a", {"idempotency-key": "x" * 300}),
        (b"a", {"idempotency-key": " "}),
    ]
    try:
        for body, headers in sequence:

            async def stream(data: bytes = body) -> Any:
                yield data

            request = Request("POST", "/orders", Headers(headers), stream)
            expected = await async_idem.handle(request, handler)
            environ = {f"HTTP_{k.upper().replace('-', '_')}": v for k, v in headers.items()}
            status, got_headers, got_body = await asyncio.to_thread(call_wsgi, app, body, environ)
            assert int(status.split()[0]) == expected.status
            assert got_body == expected.body
            assert got_headers.get("Idempotency-Replayed") == expected.headers.get(
                "Idempotency-Replayed"
            )
        assert runs == {"async": 1, "sync": 1}
    finally:
        await async_idem.db.close()
        sync_idem.close()


async def test_a_lock_that_ran_out_is_taken_over_on_the_given_clock(
    twin: Twin, db_url: str
) -> None:
    clock = Clock(datetime.now(UTC))
    idem = twin.idempotency(db_url, lock=30, ttl=3600, now=clock)
    first = await idem.begin("slow", "fp")
    assert (await idem.begin("slow", "fp")).state == "running"
    clock.advance(31)  # the first holder's lock ran out: a retry takes the key over
    second = await idem.begin("slow", "fp")
    assert second.state == "started" and second.holder != first.holder
    assert await idem.complete("slow", first.holder, 200, b"late") is False
    assert await idem.complete("slow", second.holder, 200, b"done") is True
    clock.advance(3600)  # past the ttl: the key is new again
    assert (await idem.begin("slow", "fp")).state == "started"
