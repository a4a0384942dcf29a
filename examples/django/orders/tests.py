"""Enqueue inside a view's ``transaction.atomic()``, then drain: a committed order has its
job, a rolled-back one has none, and a retried POST with the same key creates nothing."""

import io
import json
import subprocess
import sys
import uuid
from datetime import UTC, datetime

from django.core.management import call_command
from django.db import connection as django_connection
from django.test import TransactionTestCase
from standardwebhooks import Webhook

from drainpipe.contrib.django import database_url

from .jobs import WEBHOOK_SECRET, jobs, send_receipt
from .models import Order


class OrderJobsTest(TransactionTestCase):
    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        # drainpipe's SQL (idempotent: "up to date" when it is there already)
        subprocess.run(  # noqa: S603 - our interpreter, fixed arguments
            [
                sys.executable,
                "-m",
                "drainpipe.cli",
                "sql",
                "apply",
                "--database-url",
                database_url(),
            ],
            check=True,
            capture_output=True,
        )

    def test_enqueue_commits_with_the_order_and_drains(self) -> None:
        self.client.raise_request_exception = False
        jobs().drain("receipts", send_receipt)  # what an earlier run left behind
        key = f"order-{uuid.uuid4().hex}"  # a new key per run: the keys outlive the test
        created = self.client.post(
            "/orders",
            {"email": "a@example.com"},
            content_type="application/json",
            headers={"Idempotency-Key": key},
        )
        self.assertEqual(created.status_code, 201)
        self.assertEqual(jobs().stats(["receipts"])["receipts"].ready, 1)

        replayed = self.client.post(
            "/orders",
            {"email": "a@example.com"},
            content_type="application/json",
            headers={"Idempotency-Key": key},
        )
        self.assertEqual(replayed.status_code, 201)
        self.assertEqual(replayed["Idempotency-Replayed"], "true")
        self.assertEqual(replayed.content, created.content)

        failed = self.client.post(
            "/orders", {"email": "b@example.com", "fail": True}, content_type="application/json"
        )
        self.assertEqual(failed.status_code, 500)
        self.assertEqual(Order.objects.count(), 1)  # the order rolled back ...
        self.assertEqual(jobs().stats(["receipts"])["receipts"].ready, 1)  # ... and its job

        out = io.StringIO()
        call_command("drain", "receipts", stdout=out)  # what cron runs
        self.assertEqual(out.getvalue().strip(), "succeeded=1 failed=0")
        self.assertTrue(Order.objects.get().receipt_sent)
        self.assertEqual(tuple(jobs().drain("receipts", send_receipt)), (0, 0))
        self.assertTrue(django_connection.get_autocommit())  # nothing left open

    def test_the_webhook_view_stores_a_delivery_once(self) -> None:
        body = json.dumps({"type": "invoice.paid", "amount": 12})
        stamp = datetime.now(UTC).replace(microsecond=0)
        message_id = f"msg_{uuid.uuid4().hex}"  # a new delivery per run
        headers = {
            "webhook-id": message_id,
            "webhook-timestamp": str(int(stamp.timestamp())),
            "webhook-signature": Webhook(WEBHOOK_SECRET).sign(message_id, stamp, body),
        }
        first = self.client.post(
            "/hooks/billing", body, content_type="application/json", headers=headers
        )
        self.assertEqual((first.status_code, first.json()["duplicate"]), (202, False))
        again = self.client.post(
            "/hooks/billing", body, content_type="application/json", headers=headers
        )
        self.assertEqual((again.status_code, again.json()["duplicate"]), (200, True))
        forged = self.client.post(
            "/hooks/billing",
            body,
            content_type="application/json",
            headers={**headers, "webhook-signature": "v1,Zm9yZ2Vk"},
        )
        self.assertEqual(forged.status_code, 401)
        self.assertEqual(forged.json()["code"], "WEBHOOK_INVALID_SIGNATURE")
        self.assertEqual(self.client.get("/hooks/billing")["Allow"], "POST")
