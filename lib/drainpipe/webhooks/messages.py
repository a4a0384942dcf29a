"""What the webhook inbox stores and lists (entries, ``Stored``) and the checks of the text
it stores; the claimed message a handler gets is :mod:`.claimed`."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final, Literal

from ..errors import validation_error

log = logging.getLogger("drainpipe.inbox")

InboxStatus = Literal["pending", "processing", "processed", "dead"]
STATUSES: Final = ("pending", "processing", "processed", "dead")

_THIRTY_DAYS = timedelta(days=30)


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()


@dataclass(frozen=True, slots=True)
class Stored:
    """The result of storing a delivery: the inbox row ``id`` and whether it was already there."""

    id: int
    duplicate: bool


@dataclass(frozen=True, slots=True)
class InboxEntry:
    """One line of a tenant's delivery log (see :meth:`WebhookInbox.list`)."""

    id: int
    message_id: str
    type: str | None
    status: InboxStatus
    attempts: int
    max_attempts: int
    last_error: str | None
    tenant: str | None
    received_at: datetime
    processed_at: datetime | None


# -- pure pieces ---------------------------------------------------------------------------


def default_type_of(payload: Any) -> str | None:
    """``payload["type"]`` when the payload is an object whose ``type`` is a string."""
    if isinstance(payload, Mapping):
        value = payload.get("type")
        if isinstance(value, str):
            return value
    return None


def _json_text(value: Any, name: str) -> str:
    try:
        return json.dumps(value, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError) as exc:
        raise validation_error(
            f"{name} must be JSON-serialisable: {exc}",
            [{"message": "Not JSON-serialisable", "path": [name]}],
        ) from None


def _text(value: Any, name: str, *, required: bool) -> str | None:
    """A string Postgres can store as text: no NUL, encodable as UTF-8."""
    if value is None and not required:
        return None
    if not isinstance(value, str) or (required and not value):
        raise validation_error(
            f"{name} must be a {'non-empty ' if required else ''}string, not {value!r}",
            [{"message": "Expected a string", "path": [name]}],
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise validation_error(
            f"{name} is not valid Unicode text", [{"message": "Invalid text", "path": [name]}]
        ) from None
    if "\x00" in value:
        raise validation_error(
            f"{name} must not contain NUL characters", [{"message": "NUL", "path": [name]}]
        )
    return value


def _tenant(value: Any) -> str | None:
    # '' is no tenant: the uniqueness index treats a null tenant as ''
    return _text(value or None, "tenant", required=False)
