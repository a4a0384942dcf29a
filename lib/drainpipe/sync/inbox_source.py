# generated from lib/drainpipe/webhooks/source.py by ./scripts/sync-twin: do not edit.
# Change the async source (or tools/sync_twin.py) and run ./scripts/sync-twin again.
"""Processing the webhook inbox: the checked options of ``process``, the inbox as a
claimable source of the lease engine (:mod:`drainpipe.engine`), and the claimed message a
handler gets, with ``checkpoint``, which keeps progress for a later attempt.
``drainpipe.sync.inbox_source`` is its generated sync twin, which the sync ``process`` runs
(its ``checkpoint`` needs no ``await``)."""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..errors import validation_error
from ..validation import positive_int, seconds
from ..webhooks import statements as ops
from ..webhooks.inbox_rules import _json_text

if TYPE_CHECKING:
    from .inbox_store import InboxStore

log = logging.getLogger("drainpipe.inbox")

Handler = Callable[["WebhookMessage"], Any]


def process_options(
    batch: Any,
    lease: float | timedelta | Callable[[], float],
    heartbeat_every: float | None,
) -> tuple[int, float | Callable[[], float], float | None]:
    """``process``'s checked batch size, lease (seconds, or a callable the drain route
    re-reads at each claim and beat) and heartbeat interval (None: half the lease)."""
    size = positive_int(batch, "batch")
    if callable(lease):
        return size, lease, _heartbeat_every(heartbeat_every)
    length = seconds(lease, "lease")
    if length <= 0:
        raise validation_error(
            "lease must be more than 0 seconds",
            [{"message": "Must be > 0", "path": ["lease"]}],
        )
    return size, length, _heartbeat_every(heartbeat_every)


def _heartbeat_every(value: float | None) -> float | None:
    return None if value is None else seconds(value, "heartbeat_every", minimum=0.001)


class WebhookMessage:
    """A claimed message as the handler sees it.

    ``attempts`` is 1 on the first run; ``progress`` is what earlier attempts saved with
    :meth:`checkpoint` (``{}`` at first).
    """

    __slots__ = (
        "_save",
        "attempts",
        "headers",
        "id",
        "max_attempts",
        "message_id",
        "payload",
        "progress",
        "received_at",
        "source",
        "tenant",
        "type",
    )

    def __init__(
        self,
        *,
        id: int,
        source: str,
        message_id: str,
        type: str | None,
        payload: Any,
        headers: dict[str, str],
        attempts: int,
        max_attempts: int,
        received_at: datetime,
        tenant: str | None,
        progress: dict[str, Any],
        save: Callable[[WebhookMessage, dict[str, Any]], bool] | None = None,
    ) -> None:
        self.id = id
        self.source = source
        self.message_id = message_id
        self.type = type
        self.payload = payload
        self.headers = headers
        self.attempts = attempts
        self.max_attempts = max_attempts
        self.received_at = received_at
        self.tenant = tenant
        self.progress = progress
        self._save = save

    def checkpoint(self, fields: Mapping[str, Any]) -> bool:
        """Shallow-merge ``fields`` into the stored progress; a later attempt (after a failure
        or a crash) reads them as ``message.progress``. False once another worker took the
        message over (nothing is saved then). Field names must be strings and values JSON
        (``validation`` otherwise, nothing saved); tuples come back as lists, as stored."""
        if not isinstance(fields, Mapping):
            raise validation_error(
                "checkpoint(fields) takes a mapping",
                [{"message": "Expected a mapping", "path": ["fields"]}],
            )
        for name in fields:
            # json.dumps would store 1 as "1" and None as "null": a later attempt would not
            # find the field under the name it was saved with
            if not isinstance(name, str):
                raise validation_error(
                    f"checkpoint field names must be strings, not {name!r}",
                    [{"message": "Expected a string", "path": ["fields", name]}],
                )
        # what is stored, so progress now equals what the next attempt reads
        merged = json.loads(_json_text(dict(fields), "fields"))
        if self._save is None:
            self.progress.update(merged)
            return True
        saved = self._save(self, merged)
        if saved:
            self.progress.update(merged)
        return saved

    def __repr__(self) -> str:
        return (
            f"WebhookMessage(id={self.id}, source={self.source!r}, message_id={self.message_id!r},"
            f" type={self.type!r}, attempts={self.attempts}/{self.max_attempts})"
        )


def _message(inbox: InboxStore, row: tuple[Any, ...]) -> WebhookMessage:
    (id_, source, message_id, event_type, payload, headers, attempts, max_attempts,
     received_at, tenant, checkpoint) = row  # fmt: skip
    return WebhookMessage(
        id=id_,
        source=source,
        message_id=message_id,
        type=event_type,
        payload=payload,
        headers=dict(headers or {}),
        attempts=attempts,
        max_attempts=max_attempts,
        received_at=received_at,
        tenant=tenant,
        progress=dict(checkpoint or {}),
        save=inbox._checkpoint,
    )


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
            ops.CLAIM,
            ops.claim_params(inbox.source, inbox.worker, batch, lease, ops.instant(inbox.now)),
        )
        return [_message(inbox, row) for row in rows]

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
                item.id, inbox.worker, item.attempts, error, retry_in, ops.instant(inbox.now)
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
