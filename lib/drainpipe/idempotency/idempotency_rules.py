"""What :class:`~drainpipe.idempotency.service.Idempotency` and the sync twin's share:
the options, the checked parameters of ``begin``/``complete``/``release``/``purge``, and the
decisions around a request (which key, what a ``begin`` answer means, what is stored).

No I/O: each twin runs the :mod:`drainpipe.idempotency.statements` statements on its executor,
so both answer the same statuses, codes and bodies for the same requests.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from ..db.statement_shapes import Params
from ..errors import DrainpipeError, invalid_request, validation_error
from ..http import ProblemFormatter, Response, problem_response
from ..models import Begin
from ..validation import aware, positive_int, text_fault
from . import statements as ops
from .keys import (
    DEFAULT_MAX_BODY_BYTES,
    KEY_IN_USE,
    KEY_MISSING,
    KEY_REUSED,
    MAX_SCOPE_LENGTH,
    REPLAYED_HEADER,
    RESPONSE_TOO_LARGE,
    SCOPE_KEY_ENV,
    SCOPE_REQUIRED,
    _check_scope,
    _holder,
    _positive_seconds,
    caller_scope,
    check_key,
    parse_key,
    scope_key_bytes,
)

ScopeOption = str | Callable[[Any], Any] | None

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})

logger = logging.getLogger("drainpipe.idempotency")


@dataclass(frozen=True, slots=True)
class _Claim:
    """A key this request holds: run the handler, then settle."""

    key: str
    holder: str
    scope: str


def _storable(status: int) -> bool:
    """2xx, 3xx and 4xx responses are stored; after a 1xx/5xx the key is released."""
    return 200 <= status < 500


def _warn_taken_over(claim: _Claim) -> None:
    logger.warning(
        "Idempotency key %r: the lock ran out and another request took the key over; "
        "this response was not stored",
        claim.key,
    )


class IdempotencyRules:
    """The options of an idempotency object (see :class:`Idempotency`) and its decisions."""

    def __init__(
        self,
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
        if not isinstance(header, str) or not header.strip():
            raise ValueError("header must be a non-empty header name")
        if scope is not None and not isinstance(scope, str) and not callable(scope):
            raise TypeError("scope must be a string or a callable(request) -> str")
        if isinstance(scope, str) and (len(scope) > MAX_SCOPE_LENGTH or text_fault(scope)):
            # refused here, not as a 400 on every request
            raise ValueError(
                f"scope must be at most {MAX_SCOPE_LENGTH} characters, without NUL or lone"
                " surrogates"
            )
        if (
            not isinstance(max_body_bytes, int)
            or isinstance(max_body_bytes, bool)
            or max_body_bytes < 0
        ):
            raise ValueError("max_body_bytes must be an integer >= 0")
        self.ttl = _positive_seconds(ttl, "ttl")
        self.lock = _positive_seconds(lock, "lock")
        self.required = bool(required)
        self.header = header.strip()
        self.scope = scope
        self.problem = problem
        self.max_body_bytes = max_body_bytes
        self.anonymous = bool(anonymous)
        # the default scope is a keyed hash of the caller's Authorization header: its key
        # is the server's, so the stored scopes give a database reader no credential
        self.scope_key = scope_key_bytes(scope_key)
        if self.scope is None and self.scope_key is None:
            raise ValueError(
                "The default idempotency scope (the Authorization header) is stored as a keyed"
                f" hash: pass scope_key= or set {SCOPE_KEY_ENV} (16+ random bytes, the same on"
                " every instance), or pass scope="
            )
        # the clock key expiry and lock takeover are measured on (None: the database's);
        # a test moves it instead of waiting a lock out
        self.now = now

    # -- checked parameters --------------------------------------------------------------

    def _begin_params(self, key: Any, fingerprint: Any, scope: Any) -> Params:
        key = check_key(key)
        if not isinstance(fingerprint, str) or not fingerprint:
            raise invalid_request("fingerprint must be a non-empty string")
        now = None if self.now is None else aware(self.now(), "now()")
        return ops.begin_params(_check_scope(scope), key, fingerprint, self.ttl, self.lock, now)

    def _complete_params(
        self, key: Any, holder: Any, status: Any, body: Any, scope: Any, content_type: Any
    ) -> Params | None:
        """None: the holder cannot be anybody's, so the call answers False."""
        key = check_key(key)
        if not isinstance(status, int) or isinstance(status, bool) or not 100 <= status <= 599:
            raise invalid_request(f"status must be an HTTP status (100-599), not {status!r}")
        data, content_type = ops.encode_body(body, content_type)
        if len(data) > self.max_body_bytes:
            raise invalid_request(
                f"A {len(data)}-byte response body is over max_body_bytes={self.max_body_bytes}",
                code=RESPONSE_TOO_LARGE,
            )
        token = _holder(holder)
        if token is None:
            return None
        return ops.complete_params(_check_scope(scope), key, token, status, data, content_type)

    def _release_params(self, key: Any, holder: Any, scope: Any) -> Params | None:
        key = check_key(key)
        token = _holder(holder)
        if token is None:
            return None
        return ops.release_params(_check_scope(scope), key, token)

    def _purge_params(self, batch: Any) -> Params:
        positive_int(batch, "batch")  # an integer: a bigger int reached SQL as numeric
        return ops.purge_params(batch)

    # -- decisions around a request ------------------------------------------------------

    def _default_scope(self, headers: Mapping[str, str]) -> str:
        assert self.scope_key is not None  # checked at construction
        return caller_scope(headers, self.scope_key)

    def _scope_answer(self, value: Any) -> str:
        """The scope a request runs under, from the scope function's (or the default's)
        answer: no caller (None or "") → 400 ``IDEMPOTENCY_SCOPE_REQUIRED`` unless
        ``anonymous``, so one caller's stored response never replays to another."""
        if value is None or value == "":
            if self.anonymous:
                return ""
            raise invalid_request(
                "This request names no caller to keep its idempotency key apart from other"
                " callers' (send Authorization, or sign in)",
                code=SCOPE_REQUIRED,
            )
        if not isinstance(value, str):
            raise TypeError(f"scope(request) must return a str, not {type(value).__name__}")
        return value

    def _key_of(self, method: str, headers: Mapping[str, str], path: str) -> str | Response | None:
        """The request's key; None: run without idempotency (a safe method, or no key and
        not ``required``); a Response: the Problem to answer (missing or invalid key)."""
        if method.upper() in SAFE_METHODS:
            return None
        raw = headers.get(self.header)
        if raw is None:
            if not self.required:
                return None
            error = invalid_request(
                f"Send an {self.header} header with this request", code=KEY_MISSING
            )
            return self._problem(error, path)
        try:
            return parse_key(raw)
        except DrainpipeError as exc:
            return self._problem(exc, path)

    def _answer(self, begun: Begin, key: str, scope: str, path: str) -> Response | _Claim:
        """What a ``begin`` answer means for the request: a claim to run the handler under,
        the stored response to replay, or the Problem (409 in use, 422 reused)."""
        if begun.state == "started":
            assert begun.holder is not None
            return _Claim(key, begun.holder, scope)
        if begun.state == "replay":
            return Response(
                begun.status or 200,
                ops.json_body_bytes(begun.body),
                headers={REPLAYED_HEADER: "true"},
                content_type=begun.content_type,
            )
        if begun.state == "running":
            error = DrainpipeError(
                "conflict", "A request with this idempotency key is still running", code=KEY_IN_USE
            )
            return self._problem(error, path, headers={"Retry-After": "1"})
        error = validation_error(
            "This idempotency key was used for a different request",
            [{"message": "Use a new key for a new request", "path": [self.header.lower()]}],
            code=KEY_REUSED,
        )
        return self._problem(error, path)

    def _storable_or_refusal(
        self, claim: _Claim, status: int, size: int, path: str
    ) -> Response | Literal[False] | None:
        """False: store the response. Otherwise release the key, then send the handler's
        response (None: a 1xx/5xx) or this 500 (a body over ``max_body_bytes``)."""
        if not _storable(status):
            return None
        if size > self.max_body_bytes:
            logger.error(
                "Idempotency key %r: a %d-byte response is over max_body_bytes=%d; the key was "
                "released and the client gets a 500",
                claim.key,
                size,
                self.max_body_bytes,
            )
            error = DrainpipeError(
                "unexpected",
                f"The response is too large to store ({size} > {self.max_body_bytes} bytes)",
                code=RESPONSE_TOO_LARGE,
            )
            return problem_response(error, path, problem=self.problem)
        return False

    def _problem(
        self, error: DrainpipeError, path: str, headers: Mapping[str, str] | None = None
    ) -> Response:
        return problem_response(error, path, problem=self.problem, headers=headers)
