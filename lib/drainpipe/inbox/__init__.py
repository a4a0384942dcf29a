"""The webhook inbox: verify a delivery (:mod:`.verify`), store it once and process it later
(:mod:`.service`, on the lease engine through :mod:`.source`); :mod:`.messages` holds what
it hands out."""

from .messages import InboxEntry, Stored, WebhookMessage
from .service import WebhookInbox

__all__ = ["InboxEntry", "Stored", "WebhookInbox", "WebhookMessage"]
