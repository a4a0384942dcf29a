"""POST /api/orders: create an order at most once per Idempotency-Key (``api/orders.py``).

A retried request with the same key and body gets the first response again (with
``Idempotency-Replayed: true``); the same key with another body gets 422; a request without
a key gets 400. Needs ``DATABASE_URL`` (the service role's connection string),
``DRAINPIPE_SCOPE_KEY`` (16+ random bytes: the key of the stored callers' hashes; ``drainpipe
dev`` makes one) and the ``idempotency`` SQL module (``drainpipe sql add idempotency``).
Orders are open to anonymous callers, who share one scope (``anonymous=True``); a caller
with an ``Authorization`` header gets its own. Importing this file touches
neither: the app is built on the first request; until ``DATABASE_URL`` is set, requests get
a 503 Problem with code ``NOT_CONFIGURED``. A plain ASGI function (no web framework to
import at cold start).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime

from drainpipe import DrainpipeError, Idempotency
from drainpipe.serverless import (
    ASGIApp,
    Closer,
    LazyApp,
    Receive,
    Request,
    Response,
    Scope,
    Send,
    json_response,
    problem_response,
    validation_problem,
)


async def create_order(request: Request) -> Response:
    path = request.path
    if request.method != "POST":
        return Response(405, headers={"Allow": "POST"})
    try:
        order = json.loads(await request.body())
    except DrainpipeError as exc:  # the client hung up before its body ended
        return problem_response(exc, path)
    except (ValueError, RecursionError):  # also bodies that are not UTF-8, or nested too deep
        return validation_problem(
            "The body must be a JSON object", code="INVALID_JSON", instance=path
        )
    if not isinstance(order, dict) or not isinstance(order.get("item"), str):
        return validation_problem(
            "An order needs an item",
            [{"message": "Expected a string", "path": ["item"]}],
            instance=path,
        )
    quantity = order.get("quantity", 1)
    if not isinstance(quantity, int) or isinstance(quantity, bool) or quantity < 1:
        return validation_problem(
            "quantity must be a positive integer",
            [{"message": "Expected an integer >= 1", "path": ["quantity"]}],
            instance=path,
        )
    created = {
        "id": "ord_" + uuid.uuid4().hex,
        "item": order["item"],
        "quantity": quantity,
        "createdAt": datetime.now(UTC).isoformat(),
    }
    return json_response(created, status=201)


async def orders(scope: Scope, receive: Receive, send: Send) -> None:
    """Any path: Vercel hands the function the path the client asked for."""
    if scope["type"] != "http":
        return
    response = await create_order(Request.from_asgi(scope, receive))
    await response(scope, receive, send)


idempotency: Idempotency | None = None  # the one the first request built


def build(env: Mapping[str, str]) -> tuple[ASGIApp, Closer | None]:
    """``orders`` behind required idempotency keys, on the service role's database."""
    global idempotency
    idempotency = Idempotency(
        env["DATABASE_URL"],
        required=True,
        anonymous=True,  # a public demo: callers without credentials share one scope
        scope_key=env["DRAINPIPE_SCOPE_KEY"],
    )
    return idempotency.wrap(orders), idempotency.db.close


# Until DATABASE_URL is set, requests get a 503 Problem with code NOT_CONFIGURED (not a
# bare 500); concurrent first requests build one pool, closed on lifespan shutdown.
app = LazyApp(build, needs=("DATABASE_URL", "DRAINPIPE_SCOPE_KEY"))
