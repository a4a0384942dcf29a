"""The webhook inbox for synchronous code: :meth:`WebhookInbox.receive` takes the headers
and body a Flask or Django view has and answers ``(status, headers, body)``;
:meth:`WebhookInbox.process` runs plain-function handlers on the caller's thread.

``store``, ``list``, ``purge``, ``close`` and the claimed message come from the generated
twins of the async modules (:mod:`drainpipe.sync.inbox_store`,
:mod:`drainpipe.sync.inbox_source`); verification
(Standard Webhooks, or your ``verify``) and the checks are the async inbox's
(:mod:`drainpipe.webhooks.verify`, :class:`~drainpipe.webhooks.inbox_rules.InboxRules`), so a delivery
gets the same answer under both. This module is the part a thread does differently.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from ..engine.core import run_deadline
from ..errors import DrainpipeError
from ..http import Headers, json_response, problem_response
from ..models import WorkReport
from ..validation import seconds
from ..webhooks.inbox_rules import MISSING, InboxEntry, Stored
from ..webhooks.verify import (
    _unauthorized,
    body_too_large,
    parse_body,
    payload_text,
    verify_signature,
)
from .inbox_source import Handler, WebhookMessage, _InboxSource, process_options
from .inbox_store import InboxStore
from .source_runner import SourceRunner, SyncSourceOnError

__all__ = ["InboxEntry", "Stored", "WebhookInbox", "WebhookMessage"]


class WebhookInbox(InboxStore):
    """Webhooks of one ``source`` on a DSN, a sync pool or a connection; options as for
    :class:`drainpipe.WebhookInbox` (``verify`` must be a plain function here)."""

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

    def process(
        self,
        handler: Handler,
        *,
        batch: int = 10,
        lease: float | timedelta = 300,
        budget: float | timedelta | None = None,
        deadline: float | None = None,
        on_error: SyncSourceOnError | None = None,
        heartbeat_every: float | None = None,
    ) -> WorkReport:
        """Claim and handle messages until none is due or the budget is spent, as
        :meth:`drainpipe.WebhookInbox.process` does, with a plain ``handler(message)``
        (its ``message.checkpoint(fields)`` needs no ``await``) and a plain
        ``on_error(error, message)``. ``deadline`` is a ``time.monotonic()`` time. A
        handler running when its lease is lost runs to its end; its outcome is dropped
        and reported as ``LEASE_LOST`` (:mod:`drainpipe.sync.source_runner`)."""
        if not callable(handler):
            raise TypeError("handler must be callable: def handler(message)")
        if inspect.iscoroutinefunction(handler):
            raise TypeError(
                "drainpipe.sync processes with plain functions; an async handler belongs to "
                "drainpipe.WebhookInbox.process"
            )
        size, length, every = process_options(batch, lease, heartbeat_every)
        assert not callable(length)  # only the async drain route passes a callable lease
        runner = SourceRunner(
            _InboxSource(self, handler),
            batch=size,
            lease=length,
            deadline=run_deadline(
                time.monotonic(), None if budget is None else seconds(budget, "budget"), deadline
            ),
            on_error=on_error,
            heartbeat_every=every,
        )
        return runner.run()

    def __enter__(self) -> WebhookInbox:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
