"""The webhook inbox: verify a delivery (:mod:`.verify`), store it once and process it later
(:mod:`.service`, on the lease engine through :mod:`.source`, which holds the claimed
message); :mod:`.inbox_rules` holds what it stores and lists. :class:`WebhookInbox` loads on first use (the sync twin imports no asyncio)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .inbox_rules import InboxEntry, Stored
from .source import WebhookMessage

if TYPE_CHECKING:
    from .service import WebhookInbox

__all__ = ["InboxEntry", "Stored", "WebhookInbox", "WebhookMessage"]


def __getattr__(name: str) -> Any:
    if name != "WebhookInbox":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = importlib.import_module(".service", __name__).WebhookInbox
    globals()[name] = value
    return value
