"""Idempotency keys, scopes and fingerprints: reading and checking what a request sends,
and the codes of the refusals."""

from __future__ import annotations

import hashlib
import hmac
import os
import uuid
from collections.abc import Mapping
from typing import Any

from ..errors import DrainpipeError, invalid_request, validation_error
from ..models import Begin as Begin  # re-exported: drainpipe.Begin lives here for users
from ..validation import MAX_NAME_LENGTH, seconds, text_fault

MAX_KEY_LENGTH = 255
MAX_SCOPE_LENGTH = MAX_NAME_LENGTH
DEFAULT_MAX_BODY_BYTES = 1_048_576
REPLAYED_HEADER = "Idempotency-Replayed"
KEY_MISSING = "IDEMPOTENCY_KEY_MISSING"
KEY_INVALID = "IDEMPOTENCY_KEY_INVALID"
SCOPE_INVALID = "IDEMPOTENCY_SCOPE_INVALID"
SCOPE_REQUIRED = "IDEMPOTENCY_SCOPE_REQUIRED"
#: Where the key of the stored scopes' keyed hashes comes from when ``scope_key`` is not given.
SCOPE_KEY_ENV = "DRAINPIPE_SCOPE_KEY"
MIN_SCOPE_KEY_BYTES = 16
KEY_IN_USE = "IDEMPOTENCY_KEY_IN_USE"
KEY_REUSED = "IDEMPOTENCY_KEY_REUSED"
RESPONSE_TOO_LARGE = "IDEMPOTENCY_RESPONSE_TOO_LARGE"


def fingerprint(method: str, path: str, body: bytes, query: str = "") -> str:
    """sha256 hex of ``"<METHOD> <path>?<query>\\n<body>"`` (body as raw bytes); without a
    query string ``"<METHOD> <path>\\n<body>"``, as before the query counted, so a key
    stored by an earlier release still matches its retry."""
    target = f"{path}?{query}" if query else path
    head = f"{method.upper()} {target}\n".encode("utf-8", "surrogateescape")
    return hashlib.sha256(head + body).hexdigest()


def scope_key_bytes(value: Any, env: Mapping[str, str] | None = None) -> bytes | None:
    """The key of the scopes' keyed hashes: ``value``, else ``$DRAINPIPE_SCOPE_KEY``, else
    None. ``ValueError`` for one shorter than 16 bytes (or not text/bytes)."""
    if value is None:
        value = (os.environ if env is None else env).get(SCOPE_KEY_ENV) or None
        if value is None:
            return None
    if isinstance(value, str):
        value = value.encode("utf-8")
    if not isinstance(value, bytes) or len(value) < MIN_SCOPE_KEY_BYTES:
        raise ValueError(f"scope_key must be text or bytes of at least {MIN_SCOPE_KEY_BYTES} bytes")
    return value


def keyed_scope(key: bytes, label: str, credential: str) -> str:
    """``"<label>:" + HMAC-SHA256 hex`` of what identifies a caller: a database reader can
    neither read the credential back nor confirm a guess without the server's key."""
    mac = hmac.new(key, label.encode() + b"\0" + _wire_bytes(credential), hashlib.sha256)
    return f"{label}:{mac.hexdigest()}"


def caller_scope(headers: Mapping[str, str], key: bytes) -> str:
    """``"caller:" + HMAC-SHA256 hex of the Authorization header`` under ``key``, or ``""``
    without one."""
    credential = headers.get("authorization")
    if not credential:
        return ""
    return keyed_scope(key, "caller", credential)


def parse_key(raw: str) -> str:
    """The key a client sent, as text without surrounding spaces/tabs; ``invalid_request``
    with code ``IDEMPOTENCY_KEY_INVALID`` when it is empty, longer than 255 characters, not
    UTF-8 or holds control characters."""
    try:
        # servers hand header bytes over as latin-1 text; the client meant UTF-8
        key = raw.encode("latin-1").decode("utf-8")
    except UnicodeEncodeError:
        key = raw  # already real text (a Request built by hand)
    except UnicodeDecodeError:
        raise _key_invalid("The idempotency key is not valid UTF-8") from None
    # spaces and tabs around a field value are not part of it (RFC 9110 §5.5): a proxy may
    # trim them, and " k" and "k" must not be two keys that each run the request
    return check_key(key.strip(" \t"))


def check_key(key: Any) -> str:
    if not isinstance(key, str):
        raise _key_invalid(f"The idempotency key must be a string, not {type(key).__name__}")
    if not key:
        raise _key_invalid("The idempotency key is empty")
    if len(key) > MAX_KEY_LENGTH:
        raise _key_invalid(f"The idempotency key is longer than {MAX_KEY_LENGTH} characters")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in key):
        raise _key_invalid("The idempotency key holds control characters")
    if text_fault(key) is not None:  # a lone surrogate: Postgres text cannot hold it
        raise _key_invalid("The idempotency key is not valid Unicode (a lone surrogate)")
    return key


def _key_invalid(message: str) -> DrainpipeError:
    return invalid_request(message, code=KEY_INVALID)


def _check_scope(scope: Any) -> str:
    """A scope Postgres can index: a string of at most 255 characters without NUL or a lone
    surrogate; else 400 ``IDEMPOTENCY_SCOPE_INVALID`` (a scope function may build it from
    what a client sent, so over HTTP it is the client's Problem, not a 500)."""
    if not isinstance(scope, str):
        raise invalid_request(f"scope must be a string, not {type(scope).__name__}")
    if len(scope) > MAX_SCOPE_LENGTH:
        raise invalid_request(
            f"The idempotency scope is longer than {MAX_SCOPE_LENGTH} characters",
            code=SCOPE_INVALID,
        )
    fault = text_fault(scope)
    if fault is not None:
        raise invalid_request(f"The idempotency scope {fault}", code=SCOPE_INVALID)
    return scope


def _holder(holder: Any) -> uuid.UUID | None:
    """The holder token, or None when it cannot be anybody's (so the call answers False)."""
    try:
        return uuid.UUID(str(holder))
    except ValueError:
        return None


def _positive_seconds(value: Any, name: str) -> float:
    result = seconds(value, name)
    if result <= 0:
        raise validation_error(
            f"{name} must be more than 0 seconds", [{"message": "Must be > 0", "path": [name]}]
        )
    return result


def _wire_bytes(text: str) -> bytes:
    try:
        return text.encode("latin-1")  # the bytes as sent (servers decode headers as latin-1)
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogateescape")
