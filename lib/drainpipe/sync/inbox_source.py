# generated from lib/drainpipe/webhooks/source.py by ./scripts/sync-twin: do not edit.
# Change the async source (or tools/sync_twin.py) and run ./scripts/sync-twin again.
"""The webhook inbox as a claimable source of the lease engine (:mod:`drainpipe.engine`);
``drainpipe.sync.inbox_source`` is its generated sync twin, which the sync ``process`` runs."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..webhooks import statements as ops
from .inbox_claimed import WebhookMessage

if TYPE_CHECKING:
    from .inbox_store import InboxStore

log = logging.getLogger("drainpipe.inbox")

Handler = Callable[["WebhookMessage"], Any]


class _InboxSource:
    """One inbox source as a :class:`~drainpipe.engine.runner.ClaimableSource`: the SQL of
    ``sql/webhook_inbox.sql``, every call fenced by (id, worker, attempt)."""

    leases = True
    heartbeat_floor = 0.0  # section 5: every half lease, however short
    complete_each = True  # no batch completion in SQL: each message is settled when done
    concept = "inbox"
    log = log

    def __init__(self, inbox: InboxStore, handler: Handler) -> None:
        self.async_handler = inspect.iscoroutinefunction(handler)
        self.name = inbox.source
        self._inbox = inbox
        self._db = inbox._db
        self._handler = handler

    def claim(self, batch: int, lease: float) -> list[WebhookMessage]:
        inbox = self._inbox
        rows = self._db.fetch(
            ops.CLAIM, ops.claim_params(inbox.source, inbox.worker, batch, lease, inbox._instant())
        )
        return [inbox._message(row) for row in rows]

    def extend(self, items: Sequence[WebhookMessage], lease: float) -> set[int]:
        params = ops.extend_params(
            [m.id for m in items], [m.attempts for m in items], self._inbox.worker, lease
        )
        return ops.parse_extend(self._db.fetch(ops.EXTEND, params))

    def complete(self, items: Sequence[WebhookMessage]) -> list[WebhookMessage]:
        refused = []
        for message in items:
            done = ops.parse_flag(
                self._db.fetch(
                    ops.COMPLETE,
                    ops.complete_params(message.id, self._inbox.worker, message.attempts),
                )
            )
            if not done:
                refused.append(message)
        return refused

    def fail(
        self,
        item: WebhookMessage,
        error: str,
        retry_in: float | None,
        code: str | None = None,
        discard: bool = False,
    ) -> None:
        """(Webhook messages keep no codes: ``code`` and ``discard`` are not recorded.)"""
        inbox = self._inbox
        self._db.fetch(
            ops.FAIL,
            ops.fail_params(
                item.id, inbox.worker, item.attempts, error, retry_in, inbox._instant()
            ),
        )

    def start(self, item: WebhookMessage) -> Any:
        return self._handler(item)

    def fields(self, item: WebhookMessage | None) -> dict[str, Any]:
        if item is None:
            return {"source": self.name, "message_id": None, "attempt": None}
        return {"source": item.source, "message_id": item.message_id, "attempt": item.attempts}

    def trace_of(self, item: WebhookMessage) -> dict[str, str] | None:
        """The sender's trace context, when the inbox keeps its ``traceparent`` header."""
        if "traceparent" in item.headers:
            return {k: v for k, v in item.headers.items() if k in ("traceparent", "tracestate")}
        return None

    def describe(self, item: WebhookMessage | None) -> str:
        if item is None:
            return f"inbox {self._inbox.source}"
        return (
            f"inbox {item.source} message {item.message_id} (id {item.id},"
            f" attempt {item.attempts}/{item.max_attempts})"
        )
