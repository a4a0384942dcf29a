"""Every HTTP entry (tests/chaos/http_entries.py: the functions, ``drainpipe serve``)
answers a few hundred fuzzed requests, fixed seed, without a single 5xx, exception or
missing answer. ``scripts/chaos`` sends 2,500 per entry."""

from __future__ import annotations

import json
import random
from collections.abc import Mapping

import pytest

from drainpipe.serverless import ASGIApp, Receive, Scope, Send, json_response
from tests.chaos.http_entries import ENTRIES, Draft, HttpEntry, by_name, entry_env
from tests.chaos.http_fuzz import fuzz_entry, send_to

REQUESTS = 300
SEED = 19


@pytest.mark.slow
@pytest.mark.parametrize("entry", ENTRIES, ids=[entry.name for entry in ENTRIES])
async def test_no_fuzzed_request_gets_a_5xx(db_url: str, entry: HttpEntry) -> None:
    figures = await fuzz_entry(entry, entry_env(db_url), requests=REQUESTS, seed=SEED)
    assert figures.requests == REQUESTS
    assert figures.failures == 0, "\n".join([figures.line(), *figures.examples])
    # the fuzz got past the front door, not only refusals
    assert sum(n for status, n in figures.statuses.items() if status < 300) > REQUESTS // 10


async def naive_app(scope: Scope, receive: Receive, send: Send) -> None:
    """What the fuzz must catch: a JSON endpoint that trusts its body."""
    message = await receive()
    value = json.loads(message.get("body", b""))  # raises on most bodies the fuzz sends
    await json_response({"got": value["item"]})(scope, receive, send)


def naive_build(env: Mapping[str, str]) -> ASGIApp:
    return naive_app


async def test_the_fuzz_counts_an_app_that_raises_or_answers_500() -> None:
    entry = HttpEntry("naive", "/api/orders", naive_build, by_name("orders").request)
    figures = await fuzz_entry(entry, entry_env("postgresql://unused"), requests=60, seed=SEED)
    assert figures.failures > 10 and figures.examples


@pytest.mark.parametrize("depth", [990, 100_000])
async def test_orders_answers_deeply_nested_json_with_a_400_problem(
    db_url: str, depth: int
) -> None:
    # issue 19, item 2: a plain-text 500 with a RecursionError traceback before; now a
    # validation Problem (400 when the parser gives up, 422 when it parsed a list)

    app = by_name("orders").build(entry_env(db_url))
    body = b"[" * depth + b"]" * depth
    draft = Draft(
        "POST",
        "/api/orders",
        [("content-type", "application/json"), ("idempotency-key", f"deep-{depth}")],
        body,
    )
    try:
        answer = await send_to(app, draft, random.Random(0))
    finally:
        await app.aclose()  # type: ignore[attr-defined]
    assert answer.error is None and answer.status in (400, 422)
