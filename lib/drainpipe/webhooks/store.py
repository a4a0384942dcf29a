"""The database half of the webhook inbox: its options, storing a verified delivery, the
delivery log (``list``, ``purge``) and the claimed messages a handler gets.
:class:`~drainpipe.webhooks.service.WebhookInbox` adds the ASGI endpoint and ``process`` on
top; ``drainpipe.sync.inbox_store`` is this module's generated sync twin.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from ..db import as_database
from ..db.statement_shapes import Params
from ..errors import DrainpipeError
from . import statements as ops
from .inbox_rules import MISSING, InboxEntry, InboxRules, InboxStatus, Stored, _json_text, _Missing
from .source import WebhookMessage
from .verify import Verify

_THIRTY_DAYS = timedelta(days=30)


class InboxStore(InboxRules):
    """The options of :class:`~drainpipe.webhooks.service.WebhookInbox` and the calls that
    read and write its messages."""

    def __init__(
        self,
        db: Any,
        *,
        source: str,
        secrets: str | Iterable[str] | None = None,
        verify: Verify | None = None,
        type_of: Callable[[Any], str | None] | None = None,
        tenant_of: Callable[[Any], str | None] | None = None,
        keep_headers: Iterable[str] = (),
        max_attempts: int = 8,
        max_body_bytes: int = 1_048_576,
        worker: str | None = None,
        problem: Callable[[dict[str, Any], DrainpipeError], dict[str, Any]] | None = None,
        now: Callable[[], datetime] | None = None,
        app: str | None = None,
    ) -> None:
        super().__init__(
            source=source,
            secrets=secrets,
            verify=verify,
            type_of=type_of,
            tenant_of=tenant_of,
            keep_headers=keep_headers,
            max_attempts=max_attempts,
            max_body_bytes=max_body_bytes,
            worker=worker,
            problem=problem,
            now=now,
            app=app,
        )
        self._db = as_database(db)

    # -- storage -------------------------------------------------------------------------

    async def store(
        self,
        *,
        id: str,
        payload: Any,
        type: str | _Missing | None = MISSING,
        tenant: str | _Missing | None = MISSING,
        headers: Mapping[str, str] | None = None,
        verified: bool = False,
    ) -> Stored:
        """Store an event that was verified elsewhere (e.g. by a provider's SDK).

        ``verified=True`` says its signature was checked (agent inbox envelopes show it;
        false by default). ``type``/``tenant`` default to ``type_of(payload)``/
        ``tenant_of(payload)`` when not passed (passing ``None`` stores none). Returns ``Stored(id, duplicate)``; a duplicate
        (same source, tenant and id) keeps the first payload.
        """
        params = self._store_params(id, payload, type, tenant, headers, verified)
        return await self._receive(params)

    async def _receive(self, params: Params) -> Stored:
        stored_id, duplicate = ops.parse_receive(await self._db.fetch(ops.RECEIVE, params))
        return Stored(id=stored_id, duplicate=duplicate)

    async def _checkpoint(self, message: WebhookMessage, fields: dict[str, Any]) -> bool:
        params = ops.checkpoint_params(
            message.id, self.worker, message.attempts, _json_text(fields, "fields")
        )
        return ops.parse_flag(await self._db.fetch(ops.CHECKPOINT, params))

    # -- the delivery log ----------------------------------------------------------------

    async def list(
        self, *, tenant: str | None, status: InboxStatus | None = None, limit: int = 100
    ) -> list[InboxEntry]:
        """A tenant's messages of this source, newest first (``limit`` is capped at 1000).

        ``tenant=None`` lists the messages stored without a tenant, never other tenants';
        an empty string is refused (``validation``).
        """
        rows = await self._db.fetch(ops.LIST, self._list_params(tenant, status, limit))
        return [InboxEntry(*row) for row in rows]

    async def purge(
        self,
        *,
        older_than: float | timedelta = _THIRTY_DAYS,
        include_dead: bool = False,
        tenant: str | None = None,
        batch: int = 10000,
    ) -> int:
        """Delete up to ``batch`` messages of this source processed more than ``older_than``
        ago (seconds or a timedelta) and, with ``include_dead``, dead ones received that long
        ago; only ``tenant``'s when given. Pending and processing messages are never
        deleted. Returns how many were deleted (call again while it returns ``batch``)."""
        params = self._purge_params(older_than, include_dead, tenant, batch)
        return ops.parse_purge(await self._db.fetch(ops.PURGE, params))

    async def close(self) -> None:
        """Close the connection pool the inbox opened for a DSN (yours stays open)."""
        await self._db.close()
