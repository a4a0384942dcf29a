# generated from lib/drainpipe/webhooks/claimed.py by ./scripts/sync-twin: do not edit.
# Change the async source (or tools/sync_twin.py) and run ./scripts/sync-twin again.
"""The claimed webhook message a handler gets: its fields and ``checkpoint``, which keeps
progress for a later attempt (``drainpipe.sync.inbox_claimed`` is its generated sync twin,
whose ``checkpoint`` needs no ``await``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from ..errors import validation_error
from ..webhooks.messages import _json_text


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
        save: Callable[[WebhookMessage, dict[str, Any]], bool] | None = None,
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

    def checkpoint(self, fields: Mapping[str, Any]) -> bool:
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
        saved = self._save(self, merged)
        if saved:
            self.progress.update(merged)
        return saved

    def __repr__(self) -> str:
        return (
            f"WebhookMessage(id={self.id}, source={self.source!r}, message_id={self.message_id!r},"
            f" type={self.type!r}, attempts={self.attempts}/{self.max_attempts})"
        )
