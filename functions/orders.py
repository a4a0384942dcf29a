"""POST /api/orders: create an order at most once per Idempotency-Key (a Vercel function).

A retried request with the same key and body gets the first response again (with
``Idempotency-Replayed: true``); the same key with another body gets 422; a request without
a key gets 400. Needs ``DATABASE_URL`` (the service role's connection string) and the
``idempotency`` SQL module (``drainpipe sql add idempotency``). Importing this file touches
neither: the app is built on the first request; until ``DATABASE_URL`` is set, requests get
a 503 Problem with code ``NOT_CONFIGURED``.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from drainpipe.errors import validation_error
from drainpipe.http import problem_response
from drainpipe.idempotency import Idempotency

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:  # Vercel imports this file by its path: make ``_app.py`` importable
    sys.path.insert(0, _HERE)
from _app import ASGIApp, Closer, LazyApp  # noqa: E402


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
idempotency: Idempotency | None = None  # the one the first request built


def build(env: Mapping[str, str]) -> tuple[ASGIApp, Closer | None]:
    """``orders`` behind required idempotency keys, on the service role's database."""
    global idempotency
    idempotency = Idempotency(env["DATABASE_URL"], required=True)
    return idempotency.wrap(orders), idempotency.db.close


# Until DATABASE_URL is set, requests get a 503 Problem with code NOT_CONFIGURED (not a
# bare 500); concurrent first requests build one pool, closed on lifespan shutdown.
app = LazyApp(build, needs=("DATABASE_URL",))
