"""The webhook inbox: verify a delivery, store it once, answer fast, process it later.

``receive`` (an ASGI app as ``inbox.app``) checks the size, the Standard Webhooks signature
(or your ``verify``; both in :mod:`drainpipe.webhooks.verify`) and stores the message under (source,
tenant, message id), so a provider's retries are answered ``200 {"duplicate": true}``
instead of being handled twice.
``process`` claims stored messages in batches and runs your handler on the lease engine
(:mod:`drainpipe.engine`, the same runner as jobs) with retries (``min(3600, 2**attempts)``
s), leases renewed every half lease, lost leases dropped and reported, and fencing by the
claimed attempt. The state transitions are SQL functions (``sql/webhook_inbox.sql``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from ..engine.core import run_deadline
from ..engine.runner import ClaimableSource, OnError, Runner
from ..errors import DrainpipeError
from ..http import (
    Receive,
    Request,
    Response,
    Scope,
    Send,
    as_request,
    json_response,
    method_not_allowed,
    problem_response,
    run_asgi,
)
from ..models import WorkReport
from ..telemetry import SYSTEM as TELEMETRY_SYSTEM
from ..telemetry import active_telemetry
from ..validation import seconds
from .inbox_rules import MISSING, Stored
from .source import WebhookMessage, _InboxSource, process_options
from .store import InboxStore
from .verify import (
    call_verify,
    parse_body,
    payload_text,
    read_body,
    verify_signature,
)

log = logging.getLogger("drainpipe.inbox")

Handler = Callable[["WebhookMessage"], Any]


# -- the inbox -----------------------------------------------------------------------------


class WebhookInbox(InboxStore):
    """Webhooks of one ``source``, stored once and processed later.

    * ``secrets``: one ``whsec_`` secret or several (rotation: any may match), for Standard
      Webhooks (``webhook-*`` or ``svix-*`` headers, ±300 s). Or ``verify(headers, body)``
      (plain or async) returning ``{"id", "payload", "tenant"?}``; it may raise a
      ``DrainpipeError`` to answer its Problem, anything else answers 401.
    * ``type_of(payload)`` / ``tenant_of(payload)``: the stored type and tenant (default:
      ``payload["type"]`` when a string / no tenant). An empty tenant counts as none.
    * ``keep_headers``: request headers stored with the message (names lower-cased).
    * ``max_attempts``: tries before a message is dead (each message keeps the limit it
      arrived with); ``max_body_bytes``: larger bodies get 413 before they are read in full.
    * ``worker``: this process's id in the locks (default ``worker-<8 hex>``).
    * ``app``: the sending application (``"stripe"``), named in agent inbox envelopes.
    """

    # -- HTTP ----------------------------------------------------------------------------

    async def app(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The ASGI app of :meth:`receive`."""
        await run_asgi(self._respond, scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)

    async def receive(self, request: Any) -> Any:
        """Answer one delivery: 202 ``{"id", "duplicate": false}`` for a new message, 200 with
        ``"duplicate": true`` for one already stored, a Problem otherwise (405, 413, 401 with
        a ``WEBHOOK_*`` code, 400 for a verified body that is not JSON). Nothing is stored
        unless the answer is 2xx. Returns a Starlette response for a Starlette request, our
        :class:`~drainpipe.http.Response` for ours.

        Raises ``TypeError`` when the inbox has neither ``secrets`` nor ``verify``.
        """
        response = await self._respond(as_request(request))
        return response if isinstance(request, Request) else response.to_starlette()

    async def _respond(self, request: Request) -> Response:
        if (otel := active_telemetry()) is None:
            return await self._answer(request)
        attributes = {
            "messaging.system": TELEMETRY_SYSTEM,
            "messaging.destination.name": self.source,
            "messaging.operation.type": "send",
            "messaging.operation.name": "receive",
        }
        with otel.span("drainpipe.webhook.receive", attributes, kind="PRODUCER") as span:
            response = await self._answer(request)
            span.set_attribute("http.response.status_code", response.status)
        return response

    async def _answer(self, request: Request) -> Response:
        self._check_receives()
        if request.method != "POST":
            return method_not_allowed("POST")
        try:
            stored = await self._accept(request)
        except DrainpipeError as error:
            return problem_response(error, request.path, problem=self._problem)
        body = {"id": stored.id, "duplicate": stored.duplicate}
        return json_response(body, 200 if stored.duplicate else 202)

    async def _accept(self, request: Request) -> Stored:
        body = await read_body(request, self.max_body_bytes)
        tenant: Any = MISSING
        if self._verify is not None:
            verified = await call_verify(self._verify, request.headers, body)
            message_id, payload = verified["id"], verified["payload"]
            tenant = verified.get("tenant", MISSING)
            text = payload_text(payload)
        else:
            message_id = verify_signature(self._webhooks, request.headers, body, self._clock())
            text, payload = parse_body(body)
        params = self._delivery_params(message_id, payload, text, tenant, request.headers, body)
        return await self._receive(params)

    # -- processing ----------------------------------------------------------------------

    async def process(
        self,
        handler: Handler,
        *,
        batch: int = 10,
        lease: float | timedelta = 300,
        budget: float | timedelta | None = None,
        deadline: float | None = None,
        on_error: OnError | None = None,
        heartbeat_every: float | None = None,
    ) -> WorkReport:
        """Claim and handle messages until none is due or the budget is spent.

        ``handler(message)`` (plain or async) returning normally marks the message processed;
        raising fails it: it comes back after ``min(3600, 2**attempts)`` seconds (or
        ``Retry(after=...)`` seconds) and is dead after ``max_attempts``. ``lease`` (seconds)
        is renewed every half lease (or every ``heartbeat_every`` seconds) while a batch
        runs; a message whose lease was lost meanwhile is dropped (its handler cancelled, no
        settlement sent) and reported as ``LEASE_LOST``. ``budget`` (seconds) and
        ``deadline`` (an ``asyncio`` loop time) are checked before each claim; claimed
        messages always finish. Transient claim errors are retried 3 times (1, 2, 4 s).
        ``on_error(error, message)`` hears of every failure (default: logged on the
        ``drainpipe.inbox`` logger). A message whose worker died on its last attempt is marked
        dead by the next claim. See ``docs/engine.md``.
        """
        runner = self._runner(
            handler,
            batch=batch,
            lease=lease,
            budget=budget,
            deadline=deadline,
            on_error=on_error,
            heartbeat_every=heartbeat_every,
        )
        return await runner.run(until_empty=True)

    def _runner(
        self,
        handler: Handler,
        *,
        batch: int = 10,
        lease: float | timedelta | Callable[[], float] = 300,
        budget: float | timedelta | None = None,
        deadline: float | None = None,
        on_error: OnError | None = None,
        heartbeat_every: float | None = None,
        retry_unreached: bool = True,
    ) -> Runner:
        """The engine run behind :meth:`process` (the drain route builds it directly, with
        a lease re-read at each claim and beat and ``retry_unreached=False``)."""
        if not callable(handler):
            raise TypeError("handler must be callable: async def handler(message)")
        batch, lease_seconds, every = process_options(batch, lease, heartbeat_every)
        loop = asyncio.get_running_loop()
        source: ClaimableSource[Any] = _InboxSource(self, handler)
        if (otel := active_telemetry()) is not None:  # chosen once per run
            source = otel.traced(source)
        return Runner(
            source,
            batch=batch,
            lease=lease_seconds,
            on_error=on_error,
            deadline=run_deadline(
                loop.time(), None if budget is None else seconds(budget, "budget"), deadline
            ),
            heartbeat_every=every,
            retry_unreached=retry_unreached,
        )
