"""The shop's queues: one ``sync.Jobs`` for the process (its pool is drainpipe's own, for
draining); views bind it to the request's ORM connection to enqueue in their transaction."""

import os
from functools import cache

from pydantic import BaseModel

from drainpipe import sync
from drainpipe.contrib.django import database_url


class Receipt(BaseModel):
    order_id: int
    email: str


@cache
def jobs() -> sync.Jobs:
    return sync.Jobs(database_url(), {"receipts": Receipt})


#: the billing provider's signing secret (Standard Webhooks, ``whsec_...``)
WEBHOOK_SECRET = os.environ.get("SHOP_WEBHOOK_SECRET", "whsec_ZXhhbXBsZS1vbmx5LXNlY3JldC0wMDAw")


@cache
def billing_inbox() -> sync.WebhookInbox:
    """Billing webhooks, verified and stored once; processed later (async inbox or a drain)."""
    return sync.WebhookInbox(database_url(), source="billing", secrets=WEBHOOK_SECRET)


def send_receipt(receipt: Receipt, job: object) -> None:
    """The handler a worker (or a cron-called management command) drains with."""
    from .models import Order

    Order.objects.filter(id=receipt.order_id).update(receipt_sent=True)
