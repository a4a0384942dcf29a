"""drainpipe in a Flask app: an order and its job in one transaction, idempotent POSTs
through the WSGI wrapper, and a webhook inbox answering from a view.

    export DATABASE_URL=postgresql://postgres@127.0.0.1/shop
    export WEBHOOK_SECRET=whsec_...     # the billing provider's signing secret
    drainpipe sql apply                 # drainpipe's SQL, once per release
    flask --app app run

Environment: ``DATABASE_URL`` (the app's Postgres, drainpipe's SQL applied) and
``WEBHOOK_SECRET`` (Standard Webhooks ``whsec_...``; several separated by spaces during a
rotation). ``flask --app app run`` calls ``create_app()``, which reads both.
"""

from __future__ import annotations

import os
from typing import Any

import psycopg_pool
from flask import Flask, Response, jsonify, request
from pydantic import BaseModel

from drainpipe import sync


class Receipt(BaseModel):
    order_id: int
    email: str


def create_app(database_url: str | None = None, webhook_secret: str | None = None) -> Flask:
    """The app; ``DATABASE_URL`` and ``WEBHOOK_SECRET`` are read for the arguments not given."""
    database_url = database_url or os.environ.get("DATABASE_URL")
    webhook_secret = webhook_secret or os.environ.get("WEBHOOK_SECRET")
    missing = [
        name
        for name, value in (("DATABASE_URL", database_url), ("WEBHOOK_SECRET", webhook_secret))
        if not value
    ]
    if missing or database_url is None or webhook_secret is None:
        raise RuntimeError(f"set {' and '.join(missing)} (see the docstring of app.py)")
    app = Flask(__name__)
    # one pool for the app's own writes; drainpipe's statements join its transactions
    pool = psycopg_pool.ConnectionPool(database_url, min_size=1, max_size=5, open=True)
    jobs = sync.Jobs(pool, {"receipts": Receipt})
    inbox = sync.WebhookInbox(pool, source="billing", secrets=webhook_secret.split())
    # keys on a pool of their own (autocommit); this shop has no sign-in, so its callers share
    # one scope (anonymous=True); a caller's Authorization header, when sent, is its own
    # scope, stored as an HMAC under DRAINPIPE_SCOPE_KEY
    idempotency = sync.Idempotency(
        database_url,
        anonymous=True,
        scope_key=os.environ.get("DRAINPIPE_SCOPE_KEY", "example-only-scope-key-not-secret"),
    )
    with pool.connection() as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS orders (id bigserial PRIMARY KEY, email text)")

    @app.post("/orders")
    def create_order() -> Any:
        data = request.get_json()
        with pool.connection() as conn, conn.transaction():
            (order_id,) = conn.execute(
                "INSERT INTO orders (email) VALUES (%s) RETURNING id", (data["email"],)
            ).fetchone() or (0,)
            jobs.bound_to(conn).enqueue("receipts", Receipt(order_id=order_id, email=data["email"]))
            if data.get("fail"):
                raise RuntimeError("payment declined")  # the order and its job roll back
        return jsonify(order=order_id), 201

    @app.post("/hooks/billing")
    def billing_webhook() -> Response:
        status, headers, body = inbox.receive(
            request.headers, request.get_data(), path=request.path
        )
        return Response(body, status=status, headers=headers)

    app.wsgi_app = idempotency.wrap_wsgi(app.wsgi_app)  # type: ignore[method-assign]
    app.extensions["drainpipe"] = {"jobs": jobs, "inbox": inbox, "pool": pool}
    return app


if __name__ == "__main__":
    create_app().run()
