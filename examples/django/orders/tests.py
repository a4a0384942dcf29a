"""Enqueue inside a view's ``transaction.atomic()``, then drain: a committed order has its
job, a rolled-back one has none, and a retried POST with the same key creates nothing."""

import subprocess
import sys

from django.db import connection as django_connection
from django.test import TransactionTestCase

from drainpipe.contrib.django import database_url

from .jobs import jobs, send_receipt
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
        created = self.client.post(
            "/orders",
            {"email": "a@example.com"},
            content_type="application/json",
            headers={"Idempotency-Key": "order-a"},
        )
        self.assertEqual(created.status_code, 201)
        self.assertEqual(jobs().stats(["receipts"])["receipts"].ready, 1)

        replayed = self.client.post(
            "/orders",
            {"email": "a@example.com"},
            content_type="application/json",
            headers={"Idempotency-Key": "order-a"},
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

        report = jobs().drain("receipts", send_receipt)
        self.assertEqual((report.succeeded, report.failed), (1, 0))
        self.assertTrue(Order.objects.get().receipt_sent)
        self.assertTrue(django_connection.get_autocommit())  # nothing left open
