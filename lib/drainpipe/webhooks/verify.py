"""Webhook verification: is this delivery authentic, and what does it say?

Standard Webhooks (``webhook-*`` or Svix ``svix-*`` headers): the message id, a Unix
timestamp within ±:data:`TOLERANCE` seconds, and ``v1,<base64>`` HMAC-SHA256 signatures over
``"<id>.<timestamp>.<body>"``, checked against every secret so a rotation overlaps. Every
failure is a 401 ``DrainpipeError`` with a ``WEBHOOK_*`` code, never a 500. Also here: the
body read under a size cap (413 before it is buffered in full), strict JSON for a verified
body, and the call of a custom ``verify``. :mod:`drainpipe.webhooks` stores what passes.

``verify_signature`` is pure (it takes ``now``); ``standardwebhooks`` is imported only when
secrets are loaded, so importing this module stays cheap.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import inspect
import json
import re
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Final

from ..errors import DrainpipeError, invalid_request
from ..http import Request
from ..validation import text_fault

#: ``verify(headers, body)`` (plain or async) → a mapping with ``id``, ``payload``, ``tenant``?
Verify = Callable[[Mapping[str, str], bytes], Any]

#: Standard Webhooks tolerance: a timestamp further than this from now is refused (seconds).
TOLERANCE: Final = 300
_DIGITS = re.compile(r"[0-9]+")
_CONTENT_LENGTH = re.compile(r"\s*[0-9]{1,19}\s*")


def _unauthorized(code: str, message: str) -> DrainpipeError:
    return DrainpipeError("unauthorized", message, code=code)


def _header(headers: Mapping[str, str], name: str) -> str:
    """A Standard Webhooks header, under its ``webhook-`` or its Svix ``svix-`` name."""
    return headers.get("webhook-" + name) or headers.get("svix-" + name) or ""


def load_secrets(secrets: str | Iterable[str] | None) -> list[Any]:
    """One ``whsec_`` secret or several (``v1,whsec_`` accepted) as signers for
    :func:`verify_signature`; ``None`` gives none. ``ValueError`` names a bad one."""
    secret_list = [secrets] if isinstance(secrets, str) else list(secrets or ())
    return [_load_secret(secret, index) for index, secret in enumerate(secret_list)]


def _load_secret(secret: Any, index: int) -> Any:
    from standardwebhooks import Webhook

    if not isinstance(secret, str) or not secret.strip():
        raise ValueError(f"secrets[{index}] must be a non-empty string (a whsec_ secret)")
    text = secret.strip()
    if text.startswith("v1,whsec_"):
        text = text[3:]
    try:
        return Webhook(text)
    except Exception as exc:
        raise ValueError(f"secrets[{index}] is not a valid webhook secret: {exc}") from exc


def verify_signature(
    webhooks: Iterable[Any], headers: Mapping[str, str], body: bytes, now: float
) -> str:
    """Check a Standard Webhooks delivery against each secret; returns the message id.

    ``webhooks`` comes from :func:`load_secrets`; ``now`` is the current Unix time in
    seconds. Raises ``DrainpipeError("unauthorized")`` with code ``WEBHOOK_MISSING_HEADERS``,
    ``WEBHOOK_INVALID_TIMESTAMP``, ``WEBHOOK_TIMESTAMP_TOO_OLD``, ``WEBHOOK_TIMESTAMP_TOO_NEW``
    or ``WEBHOOK_INVALID_SIGNATURE``, and never anything else. A body that passes is UTF-8.
    """
    msg_id, stamp, signatures = (
        _header(headers, "id"),
        _header(headers, "timestamp"),
        _header(headers, "signature"),
    )
    if not (msg_id and stamp and signatures):
        raise _unauthorized(
            "WEBHOOK_MISSING_HEADERS",
            "The webhook-id, webhook-timestamp and webhook-signature headers are required",
        )
    # digits only: float() would also take "1e9", "nan" and " 12 "; int() can still refuse
    # a number with thousands of digits
    try:
        if not _DIGITS.fullmatch(stamp):
            raise ValueError(stamp)
        timestamp = int(stamp)
    except ValueError:
        raise _unauthorized(
            "WEBHOOK_INVALID_TIMESTAMP", "webhook-timestamp must be Unix time in whole seconds"
        ) from None
    if timestamp < now - TOLERANCE:
        raise _unauthorized(
            "WEBHOOK_TIMESTAMP_TOO_OLD", f"The webhook timestamp is more than {TOLERANCE} s old"
        )
    if timestamp > now + TOLERANCE:
        raise _unauthorized(
            "WEBHOOK_TIMESTAMP_TOO_NEW",
            f"The webhook timestamp is more than {TOLERANCE} s in the future",
        )
    forged = _unauthorized("WEBHOOK_INVALID_SIGNATURE", "No webhook signature matches")
    try:
        # Standard Webhooks signs "<id>.<timestamp>.<body>" as UTF-8 text; a body that is not
        # UTF-8 cannot carry a signature the package would accept.
        text = body.decode("utf-8")
        when = datetime.fromtimestamp(timestamp, UTC)
        expected = [
            base64.b64decode(webhook.sign(msg_id, when, text).partition(",")[2])
            for webhook in webhooks
        ]
    except Exception:
        raise forged from None
    # Parsed here rather than by the package: it raises ValueError for an entry without a
    # comma and binascii.Error for bad base64, which must be a 401, not a 500.
    for entry in signatures.split():
        version, _, encoded = entry.partition(",")
        if version != "v1" or not encoded:
            continue
        try:
            given = base64.b64decode(encoded)
        except (binascii.Error, ValueError):
            continue
        for candidate in expected:
            if hmac.compare_digest(candidate, given):
                return msg_id
    raise forged


def body_too_large(max_bytes: int) -> DrainpipeError:
    """413 ``WEBHOOK_BODY_TOO_LARGE``."""
    return DrainpipeError(
        "invalid_request",
        f"The webhook body is larger than {max_bytes} bytes",
        code="WEBHOOK_BODY_TOO_LARGE",
        status=413,
    )


async def read_body(request: Request, max_bytes: int) -> bytes:
    """The whole body, or 413 ``WEBHOOK_BODY_TOO_LARGE`` once it passes ``max_bytes`` (a
    declared Content-Length over the cap is refused before anything is read)."""
    too_large = body_too_large(max_bytes)
    declared = request.headers.get("content-length")
    if declared is not None and _CONTENT_LENGTH.fullmatch(declared) and int(declared) > max_bytes:
        raise too_large
    chunks: list[bytes] = []
    size = 0
    stream = request.stream()
    try:
        async for chunk in stream:
            size += len(chunk)
            if size > max_bytes:
                raise too_large  # stop reading: the rest is never buffered
            chunks.append(chunk)
    finally:
        close = getattr(stream, "aclose", None)
        if close is not None:
            await close()
    return b"".join(chunks)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_json(text: str) -> Any:
    """Strict JSON (no NaN/Infinity, which Postgres jsonb refuses); ValueError otherwise."""
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def parse_body(body: bytes) -> tuple[str, Any]:
    """A verified body as ``(text, payload)``; 400 ``WEBHOOK_INVALID_JSON`` unless it is
    UTF-8 strict JSON, 400 ``WEBHOOK_INVALID_PAYLOAD`` (naming the path) when it holds what
    jsonb cannot store exactly (``\\u0000``, a lone surrogate escape, nesting deeper than
    254). The text to store is the parsed payload written again, so the handler later reads
    what Python parsed: ``1e16`` stays a float (jsonb would store the text's ``1e16`` as an
    integer) and every digit of a long integer is kept."""
    try:
        text = body.decode("utf-8")
        payload = parse_json(text)
    except ValueError:  # UnicodeDecodeError is a ValueError
        raise invalid_request("Webhook body is not JSON", code="WEBHOOK_INVALID_JSON") from None
    return payload_text(payload), payload


def payload_text(payload: Any) -> str:
    """``payload`` as the JSON text stored for a delivery. What jsonb cannot hold exactly is
    the sender's mistake: 400 ``WEBHOOK_INVALID_PAYLOAD``, of kind ``validation`` so that the
    Problem's ``detail`` and ``issues`` name the path."""
    from ..db import dump_json

    try:
        return dump_json(payload).decode("utf-8")
    except DrainpipeError as exc:
        raise DrainpipeError(
            "validation",
            f"Webhook {exc.message}",
            code="WEBHOOK_INVALID_PAYLOAD",
            issues=exc.issues,
            status=400,
        ) from None


#: Longest message id, tenant and type of a delivery (characters): they are indexed, and a
#: btree entry holds at most 2704 bytes.
MAX_FIELD_LENGTH: Final = 255


def delivery_text(value: Any, what: str, code: str, *, required: bool) -> str | None:
    """A delivery's id, tenant or type as text Postgres can index, else 400 with ``code``:
    a string (an int id is its decimal text) of at most 255 characters, without NUL or a
    lone surrogate. ``None`` (or an empty optional value) is returned as None."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if value is None or (value == "" and not required):
        if required:
            raise invalid_request(f"The webhook {what} is missing", code=code)
        return None
    if not isinstance(value, str) or not value:
        raise invalid_request(f"The webhook {what} must be a non-empty string", code=code)
    if len(value) > MAX_FIELD_LENGTH:
        raise invalid_request(
            f"The webhook {what} is longer than {MAX_FIELD_LENGTH} characters", code=code
        )
    fault = text_fault(value)
    if fault is not None:
        raise invalid_request(f"The webhook {what} {fault}", code=code)
    return value


async def call_verify(verify: Verify, headers: Mapping[str, str], body: bytes) -> Mapping[str, Any]:
    """Run a custom ``verify`` and return its mapping (it has ``id`` and ``payload``).

    A ``DrainpipeError`` it raises passes through (its Problem is the answer); any other
    exception is a 401 ``WEBHOOK_INVALID_SIGNATURE``. A result without ``id`` and ``payload``
    is a programming error: ``DrainpipeError("unexpected")``.
    """
    try:
        result = verify(headers, body)
        if inspect.isawaitable(result):
            result = await result
    except DrainpipeError:
        raise
    except Exception as exc:
        raise _unauthorized("WEBHOOK_INVALID_SIGNATURE", "The webhook was refused") from exc
    if not isinstance(result, Mapping) or "id" not in result or "payload" not in result:
        raise DrainpipeError("unexpected", "verify must return a mapping with `id` and `payload`")
    return result
