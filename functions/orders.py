"""POST /api/orders: create an order at most once per Idempotency-Key (a Vercel function).

A retried request with the same key and body gets the first response again (with
``Idempotency-Replayed: true``); the same key with another body gets 422; a request without
a key gets 400. Needs ``DATABASE_URL`` (the service role's connection string) and the
``idempotency`` SQL module (``drainpipe sql add idempotency``). Importing this file touches
neither: the app is built on the first request.
"""

from __future__ import annotations

import json
import os
import uuid
from datetime import UTC, datetime
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from drainpipe.errors import validation_error
from drainpipe.http import Receive, Scope, Send, problem_response
from drainpipe.idempotency import Idempotency


async def create_order(request: Request) -> Any:
    try:
        order = json.loads(await request.body())
    except ValueError:  # also bodies that are not UTF-8
        error = validation_error("The body must be a JSON object", code="INVALID_JSON")
        return problem_response(error, request.url.path).to_starlette()
    if not isinstance(order, dict) or not isinstance(order.get("item"), str):
        error = validation_error(
            "An order needs an item",
            [{"message": "Expected a string", "path": ["item"]}],
        )
        return problem_response(error, request.url.path).to_starlette()
    quantity = order.get("quantity", 1)
    if not isinstance(quantity, int) or isinstance(quantity, bool) or quantity < 1:
        error = validation_error(
            "quantity must be a positive integer",
            [{"message": "Expected an integer >= 1", "path": ["quantity"]}],
        )
        return problem_response(error, request.url.path).to_starlette()
    created = {
        "id": "ord_" + uuid.uuid4().hex,
        "item": order["item"],
        "quantity": quantity,
        "createdAt": datetime.now(UTC).isoformat(),
    }
    return JSONResponse(created, status_code=201)


# Any path: Vercel hands the function the path it was routed from (see vercel.json rewrites).
orders = Starlette(routes=[Route("/{path:path}", create_order, methods=["POST"])])
idempotency: Idempotency | None = None
_wrapped: Any = None


def build() -> Any:
    global idempotency
    url = os.environ.get("DATABASE_URL")
    if not url:
        raise RuntimeError("DATABASE_URL is not set")
    idempotency = Idempotency(url, required=True)
    return idempotency.wrap(orders)


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    global _wrapped
    if scope["type"] != "http":  # lifespan: nothing to start, and no database needed
        await orders(scope, receive, send)
        return
    if _wrapped is None:
        _wrapped = build()
    await _wrapped(scope, receive, send)
