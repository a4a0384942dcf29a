"""Idempotency-key operations: begin, complete, release, purge; and how a response body is
stored. See :mod:`drainpipe.statements` for the shape."""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Any

from ..db.statement_shapes import Params, Row
from ..errors import invalid_request, validation_error
from ..models import Begin

#: The stored content type of a body given as a JSON value (dict, list, number, bool):
#: ``begin`` reads it back as that value (and reports ``application/json``), while bytes
#: and text stay bytes. A parameter on ``application/json``, so an HTTP replay of such a
#: key still sends a valid JSON media type.
JSON_VALUE_CONTENT_TYPE = "application/json; drainpipe=value"
JSON_CONTENT_TYPE = "application/json"

BEGIN = (
    "SELECT state, status, body, content_type, holder"
    " FROM drainpipe.begin_idempotent_v1(%s, %s, %s, %s, %s, %s)"
)


def begin_params(
    scope: str, key: str, fingerprint: str, ttl: float, lock: float, now: datetime | None = None
) -> Params:
    """``now`` (p_now): the caller's clock, or None for the database's."""
    return (scope, key, fingerprint, ttl, lock, now)


def parse_begin(rows: list[Row]) -> Begin:
    """The one row ``(state, status, body, content_type, holder)`` → :class:`Begin`."""
    state, status, body, content_type, holder = rows[0]
    data = bytes(body) if body is not None else None
    if content_type == JSON_VALUE_CONTENT_TYPE and data is not None:
        # a replay: no holder
        return Begin(
            state=state, status=status, body=json.loads(data), content_type=JSON_CONTENT_TYPE
        )
    return Begin(
        state=state,
        status=status,
        body=data,
        holder=str(holder) if holder is not None else None,
        content_type=content_type,
    )


def encode_body(body: Any, content_type: str | None) -> tuple[bytes, str | None]:
    """The bytes and content type to store for a response body: bytes as they are, a
    ``str`` as UTF-8, None as no body, any other value as JSON (so ``begin`` hands the same
    value back). A value JSON cannot hold → ``validation``."""
    if isinstance(body, bytes | bytearray | memoryview):
        return bytes(body), content_type
    if isinstance(body, str):
        return body.encode("utf-8"), content_type
    if body is None:
        return b"", content_type
    if content_type is not None:
        raise invalid_request(
            "content_type applies to a bytes or str body; a JSON value is stored as JSON"
            " and handed back as the same value"
        )
    try:
        text = json.dumps(
            body, ensure_ascii=False, allow_nan=False, separators=(",", ":"), default=_refuse
        )
    except (TypeError, ValueError, RecursionError) as exc:
        raise validation_error(
            f"body must be bytes, str or a JSON value: {exc}",
            [{"message": "Not a JSON value", "path": ["body"]}],
        ) from None
    return text.encode("utf-8"), JSON_VALUE_CONTENT_TYPE


def _refuse(value: Any) -> Any:
    raise TypeError(f"{type(value).__name__} is not a JSON value")


def json_body_bytes(body: Any) -> bytes:
    """A replayed body as bytes for an HTTP response (a JSON value re-encoded)."""
    if isinstance(body, bytes):
        return body
    if body is None:
        return b""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


COMPLETE = "SELECT drainpipe.complete_idempotent_v1(%s, %s, %s, %s, %s, %s)"


def complete_params(
    scope: str, key: str, holder: uuid.UUID, status: int, data: bytes, content_type: str | None
) -> Params:
    return (scope, key, holder, status, data, content_type)


def parse_complete(rows: list[Row]) -> bool:
    """False (nothing stored): the holder no longer holds the running key."""
    return bool(rows[0][0]) if rows else False


RELEASE = "SELECT drainpipe.release_idempotent_v1(%s, %s, %s)"


def release_params(scope: str, key: str, holder: uuid.UUID) -> Params:
    return (scope, key, holder)


parse_release = parse_complete

PURGE = "SELECT drainpipe.purge_idempotency_keys_v1(%s)"


def purge_params(batch: int) -> Params:
    return (batch,)


def parse_purge(rows: list[Row]) -> int:
    """How many expired keys were deleted."""
    return int(rows[0][0] or 0) if rows else 0
