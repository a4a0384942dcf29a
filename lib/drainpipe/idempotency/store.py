"""The database half of idempotency keys: claim a key, store the response, release it,
purge expired keys. :class:`~drainpipe.idempotency.service.Idempotency` adds the ASGI
handling on top; ``drainpipe.sync.idempotency_store`` is this module's generated sync twin,
under the WSGI and Django handling of ``drainpipe.sync.Idempotency``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from ..db import as_database
from ..errors import DrainpipeError
from ..http import ProblemFormatter, Response
from ..models import Begin
from . import statements as ops
from .idempotency_rules import IdempotencyRules, ScopeOption, _Claim, _warn_taken_over
from .keys import DEFAULT_MAX_BODY_BYTES

logger = logging.getLogger("drainpipe.idempotency")


class IdempotencyStore(IdempotencyRules):
    """The options of :class:`~drainpipe.idempotency.service.Idempotency` and the calls
    that read and write keys."""

    def __init__(
        self,
        db: Any,
        *,
        ttl: float | timedelta = timedelta(hours=24),
        lock: float | timedelta = 60,
        required: bool = False,
        header: str = "Idempotency-Key",
        scope: ScopeOption = None,
        problem: ProblemFormatter | None = None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        now: Callable[[], datetime] | None = None,
        anonymous: bool = False,
        scope_key: str | bytes | None = None,
    ) -> None:
        super().__init__(
            ttl=ttl,
            lock=lock,
            required=required,
            header=header,
            scope=scope,
            problem=problem,
            max_body_bytes=max_body_bytes,
            now=now,
            anonymous=anonymous,
            scope_key=scope_key,
        )
        self.db = as_database(db)

    # -- low level -----------------------------------------------------------------------

    async def begin(self, key: str, fingerprint: str, scope: str = "") -> Begin:
        """Claim ``key`` for a request with this fingerprint (see :class:`Begin`).

        ``mismatch`` wins over ``running``; an expired key behaves as new; a running key
        whose lock ran out is taken over (``started`` with a new holder)."""
        rows = await self.db.fetch(ops.BEGIN, self._begin_params(key, fingerprint, scope))
        return ops.parse_begin(rows)  # the function always returns one row

    async def complete(
        self,
        key: str,
        holder: str,
        status: int,
        body: Any,
        scope: str = "",
        *,
        content_type: str | None = None,
    ) -> bool:
        """Store the response for later replays. False (nothing stored) when ``holder`` no
        longer holds the running key (it was taken over, released or completed).

        ``body`` is bytes, a ``str`` (stored as UTF-8; replayed as bytes), None (no body) or
        any JSON value (a dict, list, number, bool), which ``begin`` hands back as the same
        value with content type ``application/json``; ``content_type`` is for bytes and
        text only. A value JSON cannot hold → ``validation``. A body above
        ``max_body_bytes`` raises ``invalid_request`` with code
        ``IDEMPOTENCY_RESPONSE_TOO_LARGE``."""
        params = self._complete_params(key, holder, status, body, scope, content_type)
        if params is None:
            return False
        rows = await self.db.fetch(ops.COMPLETE, params)
        return ops.parse_complete(rows)

    async def release(self, key: str, holder: str, scope: str = "") -> bool:
        """Forget the running key so a retry runs again. False (nothing changed) when
        ``holder`` no longer holds it."""
        params = self._release_params(key, holder, scope)
        if params is None:
            return False
        return ops.parse_release(await self.db.fetch(ops.RELEASE, params))

    async def purge(self, *, batch: int = 10_000) -> int:
        """Delete up to ``batch`` expired keys (and expired, unreleased leases); returns the
        number of keys deleted. Expired keys already behave as new: this only frees space."""
        return ops.parse_purge(await self.db.fetch(ops.PURGE, self._purge_params(batch)))

    # -- settling a claimed request ---------------------------------------------------

    async def _settle(
        self,
        claim: _Claim,
        status: int,
        body: bytes,
        content_type: str | None,
        path: str,
        *,
        size: int | None = None,
    ) -> Response | None:
        """Store a 2xx-4xx response, release the key on a 5xx. None: send the handler's
        response; a Response: send that instead (the body was too large to store).
        ``size`` is the full body size when ``body`` was cut short at the cap."""
        size = len(body) if size is None else size
        refusal = self._storable_or_refusal(claim, status, size, path)
        if refusal is not False:
            await self._release_quietly(claim)
            return refusal
        try:
            stored = await self.complete(
                claim.key, claim.holder, status, body, claim.scope, content_type=content_type
            )
        except DrainpipeError:
            # the handler ran: the client should still get its answer; the key's lock runs out
            logger.exception("Idempotency key %r: storing the response failed", claim.key)
            return None
        if not stored:
            _warn_taken_over(claim)
        return None

    async def _release_quietly(self, claim: _Claim) -> None:
        try:
            await self.release(claim.key, claim.holder, claim.scope)
        except Exception:
            # the original error matters more; the lock runs out on its own
            logger.exception("Idempotency key %r: releasing the key failed", claim.key)
