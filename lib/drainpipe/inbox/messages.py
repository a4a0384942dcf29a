"""What the webhook inbox hands out and stores: messages, entries, and the checks of the
text it stores."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final, Literal

from ..errors import validation_error

log = logging.getLogger("drainpipe.inbox")

InboxStatus = Literal["pending", "processing", "processed", "dead"]
STATUSES: Final = ("pending", "processing", "processed", "dead")
Handler = Callable[["WebhookMessage"], Any]

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


class WebhookMessage:
    """A claimed message as the handler sees it.

    ``attempts`` is 1 on the first run; ``progress`` is what earlier attempts saved with
    :meth:`checkpoint` (``{}`` at first).
    """

    __slots__ = (
        "_save",
        "attempts",
        "headers",
        "id",
        "max_attempts",
        "message_id",
        "payload",
        "progress",
        "received_at",
        "source",
        "tenant",
        "type",
    )

    def __init__(
        self,
        *,
        id: int,
        source: str,
        message_id: str,
        type: str | None,
        payload: Any,
        headers: dict[str, str],
        attempts: int,
        max_attempts: int,
        received_at: datetime,
        tenant: str | None,
        progress: dict[str, Any],
        save: Callable[[WebhookMessage, dict[str, Any]], Awaitable[bool]] | None = None,
    ) -> None:
        self.id = id
        self.source = source
        self.message_id = message_id
        self.type = type
        self.payload = payload
        self.headers = headers
        self.attempts = attempts
        self.max_attempts = max_attempts
        self.received_at = received_at
        self.tenant = tenant
        self.progress = progress
        self._save = save

    async def checkpoint(self, fields: Mapping[str, Any]) -> bool:
        """Shallow-merge ``fields`` into the stored progress; a later attempt (after a failure
        or a crash) reads them as ``message.progress``. False once another worker took the
        message over (nothing is saved then). Field names must be strings and values JSON
        (``validation`` otherwise, nothing saved); tuples come back as lists, as stored."""
        if not isinstance(fields, Mapping):
            raise validation_error(
                "checkpoint(fields) takes a mapping",
                [{"message": "Expected a mapping", "path": ["fields"]}],
            )
        for name in fields:
            # json.dumps would store 1 as "1" and None as "null": a later attempt would not
            # find the field under the name it was saved with
            if not isinstance(name, str):
                raise validation_error(
                    f"checkpoint field names must be strings, not {name!r}",
                    [{"message": "Expected a string", "path": ["fields", name]}],
                )
        # what is stored, so progress now equals what the next attempt reads
        merged = json.loads(_json_text(dict(fields), "fields"))
        if self._save is None:
            self.progress.update(merged)
            return True
        saved = await self._save(self, merged)
        if saved:
            self.progress.update(merged)
        return saved

    def __repr__(self) -> str:
        return (
            f"WebhookMessage(id={self.id}, source={self.source!r}, message_id={self.message_id!r},"
            f" type={self.type!r}, attempts={self.attempts}/{self.max_attempts})"
        )


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
