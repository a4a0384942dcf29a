"""The Flask example on a real database (``SHOP_DATABASE_URL``, drainpipe's SQL installed)."""

from __future__ import annotations

import base64
import json
import os
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from app import create_app
from standardwebhooks import Webhook

SECRET = "whsec_" + base64.b64encode(b"flask-example-secret-000").decode()


@pytest.fixture
def client() -> Any:
    app = create_app(os.environ["SHOP_DATABASE_URL"], SECRET)
    app.config["TESTING"] = False  # errors answer 500, as in production
    yield app.test_client(), app.extensions["drainpipe"]
    app.extensions["drainpipe"]["pool"].close()


def test_an_order_enqueues_with_its_transaction_and_drains(client: Any) -> None:
    http, parts = client
    jobs = parts["jobs"]
    jobs.drain("receipts", lambda receipt, job: None)  # what an earlier run left behind
    key = f"order-{uuid.uuid4().hex}"  # a new key per run: the database outlives the test
    created = http.post("/orders", json={"email": "a@example.com"}, headers={"Idempotency-Key": key})
    assert created.status_code == 201
    replayed = http.post(
        "/orders", json={"email": "a@example.com"}, headers={"Idempotency-Key": key}
    )
    assert (replayed.status_code, replayed.headers["Idempotency-Replayed"]) == (201, "true")
    assert http.post("/orders", json={"email": "b@example.com", "fail": True}).status_code == 500
    assert jobs.stats(["receipts"])["receipts"].ready == 1  # the failed order left no job
    sent: list[str] = []
    report = jobs.drain("receipts", lambda receipt, job: sent.append(receipt.email))
    assert (report.succeeded, sent) == (1, ["a@example.com"])


def test_the_webhook_view_stores_once(client: Any) -> None:
    http, _ = client
    body = json.dumps({"type": "invoice.paid"})
    stamp = datetime.fromtimestamp(int(time.time()), UTC)
    message_id = f"msg_{uuid.uuid4().hex}"  # a new delivery per run
    headers = {
        "webhook-id": message_id,
        "webhook-timestamp": str(int(stamp.timestamp())),
        "webhook-signature": Webhook(SECRET).sign(message_id, stamp, body),
        "content-type": "application/json",
    }
    assert http.post("/hooks/billing", data=body, headers=headers).status_code == 202
    again = http.post("/hooks/billing", data=body, headers=headers)
    assert (again.status_code, again.get_json()["duplicate"]) == (200, True)
    forged = http.post(
        "/hooks/billing", data=body, headers={**headers, "webhook-signature": "v1,x"}
    )
    assert (forged.status_code, forged.get_json()["code"]) == (401, "WEBHOOK_INVALID_SIGNATURE")
