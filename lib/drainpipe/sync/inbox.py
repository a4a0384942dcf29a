"""The webhook inbox for synchronous views: :meth:`WebhookInbox.receive` takes the headers
and body a Flask or Django view has and answers ``(status, headers, body)``; ``store``,
``list`` and ``purge`` as the async inbox has them.

Verification (Standard Webhooks, or your ``verify``), the checks and the statements are
the async :class:`drainpipe.WebhookInbox`'s (:mod:`drainpipe.inbox.verify`,
:class:`~drainpipe.inbox.rules.InboxRules`, :mod:`drainpipe.ops.inbox`), so a delivery
gets the same answer under both. Processing stays with the async inbox (``process``) or a
drain route; this twin is for the request path.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from ..db.sync import as_sync_database
from ..errors import DrainpipeError
from ..http import Headers, json_response, problem_response
from ..inbox.messages import MISSING, InboxEntry, Stored, _Missing
from ..inbox.rules import InboxRules, InboxStatus
from ..inbox.verify import (
    Verify,
    _unauthorized,
    body_too_large,
    parse_body,
    payload_text,
    verify_signature,
)
from ..ops import inbox as ops
from ..ops._types import Params

__all__ = ["InboxEntry", "Stored", "WebhookInbox"]

_THIRTY_DAYS = timedelta(days=30)


class WebhookInbox(InboxRules):
    """Webhooks of one ``source`` on a DSN, a sync pool or a connection; options as for
    :class:`drainpipe.WebhookInbox` (``verify`` must be a plain function here)."""

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
        self._db = as_sync_database(db)

    def receive(
        self, headers: Mapping[str, str], body: bytes, *, path: str | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        """Answer one delivery (the view routes POSTs here): 202 ``{"id", "duplicate":
        false}`` for a new message, 200 with ``"duplicate": true`` for a stored one, else a
        Problem (413, 401 with a ``WEBHOOK_*`` code, 400). Nothing is stored unless the
        answer is 2xx. ``path`` is the Problem's ``instance``. Raises ``TypeError`` when
        the inbox has neither ``secrets`` nor ``verify``."""
        self._check_receives()
        try:
            stored = self._accept(Headers(headers), bytes(body))
        except DrainpipeError as error:
            response = problem_response(error, path, problem=self._problem)
        else:
            payload = {"id": stored.id, "duplicate": stored.duplicate}
            response = json_response(payload, 200 if stored.duplicate else 202)
        return response.status, dict(response.headers), response.body

    def _accept(self, headers: Headers, body: bytes) -> Stored:
        if len(body) > self.max_body_bytes:
            raise body_too_large(self.max_body_bytes)
        tenant: Any = MISSING
        if self._verify is not None:
            verified = self._call_verify(headers, body)
            message_id, payload = verified["id"], verified["payload"]
            tenant = verified.get("tenant", MISSING)
            text = payload_text(payload)
        else:
            message_id = verify_signature(self._webhooks, headers, body, self._clock())
            text, payload = parse_body(body)
        return self._receive(
            self._delivery_params(message_id, payload, text, tenant, headers, body)
        )

    def _call_verify(self, headers: Headers, body: bytes) -> Mapping[str, Any]:
        assert self._verify is not None
        try:
            result = self._verify(headers, body)
            if inspect.isawaitable(result):
                getattr(result, "close", lambda: None)()
                raise TypeError("drainpipe.sync.WebhookInbox needs a plain verify function")
        except DrainpipeError:
            raise
        except Exception as exc:
            raise _unauthorized("WEBHOOK_INVALID_SIGNATURE", "The webhook was refused") from exc
        if not isinstance(result, Mapping) or "id" not in result or "payload" not in result:
            raise DrainpipeError(
                "unexpected", "verify must return a mapping with `id` and `payload`"
            )
        return result

    def store(
        self,
        *,
        id: str,
        payload: Any,
        type: str | _Missing | None = MISSING,
        tenant: str | _Missing | None = MISSING,
        headers: Mapping[str, str] | None = None,
        verified: bool = False,
    ) -> Stored:
        """Store an event verified elsewhere; ``Stored(id, duplicate)``."""
        return self._receive(self._store_params(id, payload, type, tenant, headers, verified))

    def _receive(self, params: Params) -> Stored:
        stored_id, duplicate = ops.parse_receive(self._db.fetch(ops.RECEIVE, params))
        return Stored(id=stored_id, duplicate=duplicate)

    def list(
        self, *, tenant: str | None, status: InboxStatus | None = None, limit: int = 100
    ) -> list[InboxEntry]:
        """A tenant's messages of this source, newest first (at most 1000)."""
        rows = self._db.fetch(ops.LIST, self._list_params(tenant, status, limit))
        return [InboxEntry(*row) for row in rows]

    def purge(
        self,
        *,
        older_than: float | timedelta = _THIRTY_DAYS,
        include_dead: bool = False,
        tenant: str | None = None,
        batch: int = 10000,
    ) -> int:
        """Delete up to ``batch`` processed (and, with ``include_dead``, dead) messages."""
        params = self._purge_params(older_than, include_dead, tenant, batch)
        return ops.parse_purge(self._db.fetch(ops.PURGE, params))

    def close(self) -> None:
        """Close the pool opened for a DSN (yours stays open)."""
        self._db.close()

    def __enter__(self) -> WebhookInbox:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
