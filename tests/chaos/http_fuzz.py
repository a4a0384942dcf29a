"""The HTTP fuzz: plausible requests for each entry (tests/chaos/http_entries.py), broken
in a few random ways each, sent to the ASGI app in process with a fixed seed. An answer
of 500 or more, an exception out of the app, or no answer at all is a failure.

Requests go straight to the app (the ASGI messages a server would send, bodies in random
chunks, sometimes a client that disconnects mid-body), so the fuzz reaches the app's own
parsing with what an HTTP server lets through: any bytes in header values but CR, LF and
NUL, any method token, any path.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import random
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

from drainpipe.dev.server import start_server
from drainpipe.serverless import ASGIApp

from .http_entries import Draft, HttpEntry, signed_headers

METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "TRACE", "FOO", "post"]
HEADER_NAMES = [
    "content-type", "content-length", "authorization", "idempotency-key", "webhook-id",
    "webhook-timestamp", "webhook-signature", "svix-id", "svix-signature", "x-tenant",
    "transfer-encoding", "accept", "user-agent", "cookie", "origin", "sec-fetch-site", "host",
]  # fmt: skip


def _value(rng: random.Random) -> str:
    """A header value an HTTP server would pass on (latin-1 text without CR, LF, NUL)."""
    choice = rng.randrange(8)
    if choice == 0:
        return ""
    if choice == 1:
        return "x" * rng.choice([255, 256, 3000, 20_000])
    if choice == 2:
        return "".join(
            chr(rng.choice([*range(1, 10), *range(11, 13), *range(14, 256)]))
            for _ in range(rng.randrange(1, 40))
        )
    if choice == 3:
        return str(rng.choice([-1, 0, 2**31, 2**63, 10**30]))
    if choice == 4:
        return "Bearer " + rng.choice(["", "x", "chaos-cron-secret ", "\x7f"])
    if choice == 5:
        return "v1," + "".join(rng.choice("AZaz09+/=, ") for _ in range(rng.randrange(60)))
    if choice == 6:  # what the cross-site check reads: origins, hosts, fetch sites, cookies
        return rng.choice(
            [
                "https://chaos", "null", "https://evil.example", "http://[::1]:99999",
                "https://chaos:443/path", "same-origin", "cross-site", "session=1", "a=b; c",
            ]
        )  # fmt: skip
    return "".join(rng.choice(" abc-_.:;/\t") for _ in range(rng.randrange(1, 12)))


def _json_body(rng: random.Random) -> bytes:
    choice = rng.randrange(14)
    if choice == 0:
        depth = rng.choice([254, 255, 990, 3000, 100_000])
        opener, closer = rng.choice([(b"[", b"]"), (b'{"a":', b"}")])
        return opener * depth + b"1" + closer * depth
    if choice == 1:
        return b'{"item": "a\\u0000b", "type": "x\\u0000"}'
    if choice == 2:
        return rng.choice([b'{"\\ud800": 1}', b'{"item": "\\udfff"}', b'["\\ud83d"]'])
    if choice == 3:
        return rng.choice([b'{"n": NaN}', b'{"quantity": Infinity}', b"[-Infinity]"])
    if choice == 4:
        return b'{"n": ' + b"9" * rng.choice([20, 4300, 5000]) + b"}"
    if choice == 5:
        return rng.choice([b'{"n": 1e400}', b'{"n": 1e16}', b'{"quantity": 1.0}', b"1e999"])
    if choice == 6:
        return rng.choice([b"[]", b"null", b"0", b'"s"', b"true", b'{"item": ["x"]}'])
    if choice == 7:
        return json.dumps(
            {"item": "i" * rng.choice([256, 3000, 70_000]), "type": "t" * 300}
        ).encode()
    if choice == 8:
        return json.dumps({"type": rng.random(), "tenant": [1], "quantity": True}).encode()
    if choice == 9:
        return b'{"item": "a", "item": "b", "quantity": 2, "quantity": -1}'
    if choice == 10:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))
    if choice == 11:
        return b'{"item": "\xff\xfe"}'
    if choice == 12:  # around the entries' caps: 64 KiB, 80 KiB, 128 KiB, 1 MiB
        return b"x" * rng.choice(
            [65_536, 65_537, 81_921, 131_072, 131_073, 1_048_576, 1_048_577, 3_000_000]
        )
    return b""


def _mutate(draft: Draft, rng: random.Random) -> None:
    choice = rng.randrange(-3, 10)
    if choice <= 2:  # a hostile body, the likeliest break
        draft.body = _json_body(rng)
    elif choice == 3:
        draft.method = rng.choice(METHODS)
    elif choice == 4 and draft.headers:
        del draft.headers[rng.randrange(len(draft.headers))]
    elif choice == 5:
        draft.headers.append((rng.choice(HEADER_NAMES), _value(rng)))
    elif choice == 6 and draft.headers:
        name, _ = draft.headers[rng.randrange(len(draft.headers))]
        draft.headers = [(k, _value(rng) if k == name else v) for k, v in draft.headers]
    elif choice == 7:
        # raw bytes past ASCII too (é as latin-1: not UTF-8), as a lenient HTTP parser hands on
        draft.query = rng.choice(
            ["a=1", "budget=-1", "%ff%00", "x=" + "y" * 5000, "&&==", "q=\xe9", "limit=\xff1"]
        )
    elif choice == 8:
        draft.path = draft.path + rng.choice(["/", "//x", "%00", "/..", "é", "?"])
    elif choice == 9 and draft.body:
        cut = rng.randrange(len(draft.body))
        draft.body = draft.body[:cut] if rng.random() < 0.5 else draft.body[cut:] + draft.body[:cut]


def fuzzed(entry: HttpEntry, rng: random.Random, env: Mapping[str, str]) -> Draft:
    draft = entry.request(rng, env)
    for _ in range(rng.choice([0, 1, 1, 2, 2, 3])):  # some requests stay valid
        _mutate(draft, rng)
    if draft.sign and rng.random() < 0.75:
        signed_headers(draft, rng)
    return draft


@dataclasses.dataclass
class Answer:
    status: int | None  # None: the app answered nothing
    error: BaseException | None = None
    body: bytes = b""  # what it answered (up to 1 MiB), for entries that learn ids from it


async def send_to(app: ASGIApp, draft: Draft, rng: random.Random) -> Answer:
    """The ASGI messages of one request; the body in random chunks, sometimes cut off by a
    client disconnect."""
    body = draft.body
    size = max(1, rng.choice([len(body) or 1, 1, 7, 512, 65_536]), len(body) // 256)
    chunks = [body[i : i + size] for i in range(0, len(body), size)] or [b""]
    disconnect_after = (
        rng.randrange(len(chunks)) if len(chunks) > 1 and rng.random() < 0.1 else None
    )
    sent = 0
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": draft.method,
        "scheme": "https",
        "path": draft.path,
        "raw_path": draft.path.encode("utf-8", "surrogateescape"),
        "query_string": draft.query.encode("latin-1", "replace"),
        "root_path": "",
        "headers": [
            (name.lower().encode("latin-1"), value.encode("latin-1", "replace"))
            for name, value in draft.headers
        ],
        "client": ("127.0.0.1", 40000),
        "server": ("chaos", 443),
    }

    responded = asyncio.Event()

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if disconnect_after is not None and sent > disconnect_after:
            return {"type": "http.disconnect"}  # the client hung up mid-body
        if sent >= len(chunks):
            await responded.wait()  # a server says "disconnect" once the answer went out
            return {"type": "http.disconnect"}
        sent += 1
        return {"type": "http.request", "body": chunks[sent - 1], "more_body": sent < len(chunks)}

    started: list[int] = []
    answered = bytearray()

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            started.append(int(message["status"]))
        elif message["type"] == "http.response.body":
            if len(answered) < 1_048_576:
                answered.extend(message.get("body", b""))
            if not message.get("more_body"):
                responded.set()

    try:
        await asyncio.wait_for(app(scope, receive, send), timeout=30)
    except Exception as exc:
        return Answer(started[0] if started else None, exc)
    return Answer(started[0] if started else None, body=bytes(answered))


# what the HTTP client sets itself: the true length of the body, one request per connection
CLIENT_HEADERS = ("content-length", "transfer-encoding", "host", "connection")


async def send_over_http(port: int, draft: Draft) -> Answer:
    """The draft as raw HTTP/1.1 bytes to a real server (uvicorn): what its parser refuses
    it answers itself (400), the rest reaches the app as uvicorn hands it over."""
    target = quote(draft.path, safe="/%?&=:;,+") + (
        f"?{quote(draft.query, safe='=&%')}" if draft.query else ""
    )
    lines = [f"{draft.method} {target} HTTP/1.1", "Host: chaos", "Connection: close"]
    lines.append(f"Content-Length: {len(draft.body)}")
    lines += [f"{name}: {value}" for name, value in draft.headers if name not in CLIENT_HEADERS]
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace")
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(head + draft.body)
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), timeout=30)
    except (ConnectionError, TimeoutError) as exc:
        return Answer(None, exc)
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    parts = status_line.split()
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/"):
        return Answer(None, ValueError(f"no status line: {status_line!r}"))
    return Answer(int(parts[1]))


@dataclasses.dataclass
class FuzzFigures:
    entry: str
    requests: int = 0
    statuses: Counter[int] = dataclasses.field(default_factory=Counter)
    failures: int = 0  # 5xx, an exception, or no answer
    examples: list[str] = dataclasses.field(default_factory=list)

    def line(self) -> str:
        classes = Counter(f"{status // 100}xx" for status in self.statuses.elements())
        shown = ", ".join(f"{name} {count}" for name, count in sorted(classes.items()))
        return f"{self.entry}: {self.requests} requests, {self.failures} 5xx ({shown})"


async def fuzz_entry(
    entry: HttpEntry,
    env: Mapping[str, str],
    *,
    requests: int,
    seed: int,
    parallel: int = 4,
    over_http: bool = False,
    progress: Callable[[FuzzFigures], None] | None = None,
) -> FuzzFigures:
    """Send ``requests`` fuzzed requests, ``parallel`` at a time (same keys race); to the
    app in process, or (``over_http``) through a real uvicorn serving it."""
    rng = random.Random(f"{seed}:{entry.name}")
    app = entry.build(env)
    figures = FuzzFigures(entry.name + (" over HTTP" if over_http else ""))
    server = await start_server(app) if over_http else None

    async def send(draft: Draft, chunk_seed: float) -> Answer:
        if server is not None:
            return await send_over_http(server.port, draft)
        return await send_to(app, draft, random.Random(chunk_seed))

    try:
        for start in range(0, requests, parallel):
            drafts = [fuzzed(entry, rng, env) for _ in range(min(parallel, requests - start))]
            seeds = [rng.random() for _ in drafts]
            answers = await asyncio.gather(
                *(send(draft, s) for draft, s in zip(drafts, seeds, strict=True))
            )
            for draft, answer in zip(drafts, answers, strict=True):
                if entry.learn is not None and answer.status is not None and answer.status < 300:
                    entry.learn(answer.body)
                figures.requests += 1
                if answer.status is not None:
                    figures.statuses[answer.status] += 1
                if answer.error is not None or answer.status is None or answer.status >= 500:
                    figures.failures += 1
                    if len(figures.examples) < 5:
                        figures.examples.append(_describe(draft, answer))
            if progress is not None:
                progress(figures)
    finally:
        if server is not None:
            await server.stop()  # its lifespan shutdown closes the app
        else:
            close = getattr(app, "aclose", None) or getattr(
                getattr(app, "app", None), "aclose", None
            )
            if close is not None:
                await close()
    return figures


def _describe(draft: Draft, answer: Answer) -> str:
    body = draft.body[:120]
    return (
        f"{draft.method} {draft.path[:80]}?{draft.query[:40]} body={body!r} ({len(draft.body)} bytes)"
        f" headers={[(k, v[:40]) for k, v in draft.headers]} -> {answer.status} {answer.error!r}"
    )
