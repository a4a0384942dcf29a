"""What :class:`~drainpipe.webhooks.service.WebhookInbox` and the sync twin's share: the
options, and everything between a verified delivery and the statement that stores it
(ids, types, tenants, kept headers), plus the checked parameters of ``list`` and
``purge``; and what the inbox stores and lists (``Stored``, ``InboxEntry``). No I/O: each
twin runs :mod:`drainpipe.webhooks.statements` on its executor."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final, Literal

from ..db.json import dump_json
from ..db.statement_shapes import Params
from ..errors import DrainpipeError, invalid_request, validation_error
from ..validation import MAX_NAME_LENGTH, aware, check_text, positive_int, seconds, text_fault
from . import statements as ops
from .verify import Verify, delivery_text, load_secrets

# -- what the inbox stores and lists ----------------------------------------------------

InboxStatus = Literal["pending", "processing", "processed", "dead"]
STATUSES: Final = ("pending", "processing", "processed", "dead")


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


# -- the rules --------------------------------------------------------------------------


class InboxRules:
    """The options of a webhook inbox (see :class:`WebhookInbox`) and its pure steps."""

    def __init__(
        self,
        *,
        source: str,
        secrets: str | Iterable[str] | None = None,
        verify: Verify | None = None,
        type_of: Callable[[Any], str | None] | None = None,
        tenant_of: Callable[[Any], str | None] | None = None,
        keep_headers: Iterable[str] = (),
        max_attempts: int = 8,
        max_body_bytes: int = 1_048_576,
        worker: str | None = None,
        problem: Callable[[dict[str, Any], DrainpipeError], dict[str, Any]] | None = None,
        now: Callable[[], datetime] | None = None,
        app: str | None = None,
    ) -> None:
        if app is not None and (
            not isinstance(app, str)
            or not app
            or len(app) > MAX_NAME_LENGTH
            or text_fault(app) is not None
        ):
            raise ValueError(
                f"app must be a non-empty string of at most {MAX_NAME_LENGTH} characters"
            )
        # `app` is the ASGI method of the async inbox: the sender's name is kept as app_name
        self.app_name = app
        if not isinstance(source, str) or not source or text_fault(source) is not None:
            raise ValueError(f"source must be a non-empty string, not {source!r}")
        if len(source) > MAX_NAME_LENGTH:  # indexed with every message id
            raise ValueError(f"source must be at most {MAX_NAME_LENGTH} characters")
        if not isinstance(max_attempts, int) or isinstance(max_attempts, bool) or max_attempts < 1:
            raise ValueError(f"max_attempts must be a positive integer, not {max_attempts!r}")
        if (
            not isinstance(max_body_bytes, int)
            or isinstance(max_body_bytes, bool)
            or max_body_bytes < 1
        ):
            raise ValueError(f"max_body_bytes must be a positive integer, not {max_body_bytes!r}")
        if verify is not None and not callable(verify):
            raise TypeError("verify must be a callable (headers, body) -> {id, payload, tenant?}")
        if worker is not None and (
            not isinstance(worker, str)
            or not worker
            or len(worker) > MAX_NAME_LENGTH
            or text_fault(worker) is not None
        ):
            raise ValueError(
                f"worker must be a non-empty string of at most {MAX_NAME_LENGTH} characters"
                f" without NUL or lone surrogates, not {worker!r}"
            )
        names = [keep_headers] if isinstance(keep_headers, str) else list(keep_headers)
        if not all(isinstance(name, str) and name for name in names):
            raise TypeError("keep_headers must be header names")
        self.source = source
        self.max_attempts = max_attempts
        self.max_body_bytes = max_body_bytes
        self.worker = worker or f"worker-{os.urandom(4).hex()}"
        self.keep_headers = tuple(dict.fromkeys(name.lower() for name in names))
        self._verify = verify
        self._webhooks = load_secrets(secrets)
        self._type_of = type_of or default_type_of
        self._tenant_of = tenant_of
        self._problem = problem
        # the clock of claims, retries and the signature timestamp window (None: the
        # database's and the system's); a test moves it instead of waiting
        self.now = now
        self._clock: Callable[[], float] = (
            time.time if now is None else lambda: aware(now(), "now()").timestamp()
        )

    def _instant(self) -> datetime | None:
        """``p_now`` of the transition functions: the caller's clock, or the database's."""
        return ops.instant(self.now)

    def _check_receives(self) -> None:
        if not self._webhooks and self._verify is None:
            raise TypeError(
                f'The inbox for "{self.source}" has no `secrets` or `verify`, '
                "so it only stores events through `store`"
            )

    def _delivery_params(
        self,
        message_id: Any,
        payload: Any,
        text: str,
        tenant: Any,
        headers: Mapping[str, str],
        raw: bytes | None = None,
    ) -> Params:
        """The store statement's parameters for a verified delivery (``raw``: the body's
        bytes as received, kept for agents that check the signature again); what the sender
        controls is refused with a 400 of its own (``WEBHOOK_INVALID_*``), never a database
        error. ``tenant`` is :data:`MISSING` unless ``verify`` named one."""
        message_id = delivery_text(message_id, "id", "WEBHOOK_INVALID_ID", required=True)
        try:
            event_type = self._type_of(payload)
            if tenant is MISSING:
                tenant = self._tenant_of(payload) if self._tenant_of is not None else None
        except DrainpipeError:
            raise
        except Exception as exc:
            raise invalid_request(
                f"type_of/tenant_of could not read the payload: {exc}",
                code="WEBHOOK_INVALID_PAYLOAD",
            ) from exc
        tenant = delivery_text(tenant, "tenant", "WEBHOOK_INVALID_TENANT", required=False)
        event_type = delivery_text(event_type, "type", "WEBHOOK_INVALID_TYPE", required=False)
        kept = {name: headers[name] for name in self.keep_headers if name in headers}
        return self._receive_params(
            message_id, text, event_type, tenant, kept, verified=True, raw=raw
        )

    def _store_params(
        self,
        id: Any,
        payload: Any,
        type: Any,
        tenant: Any,
        headers: Mapping[str, str] | None,
        verified: bool = False,
    ) -> Params:
        """``store``'s parameters (an event verified elsewhere; ``verified`` says whether
        its signature was checked there, shown in agent inbox envelopes)."""
        event_type = self._type_of(payload) if isinstance(type, _Missing) else type
        if isinstance(tenant, _Missing):
            tenant = self._tenant_of(payload) if self._tenant_of is not None else None
        if headers is not None and not isinstance(headers, Mapping):
            raise validation_error(
                "headers must be a mapping of header names to values",
                [{"message": "Expected a mapping", "path": ["headers"]}],
            )
        kept = {str(k).lower(): v for k, v in (headers or {}).items()}
        for label, value in (("id", id), ("type", event_type), ("tenant", tenant)):
            if isinstance(value, str):
                check_text(value, label, allow_empty=label != "id")
        if not isinstance(verified, bool):
            raise TypeError("verified must be True or False")
        # serialised once: these bytes are the stored payload and what a raw read answers
        serialised = dump_json(payload)
        return self._receive_params(
            id,
            serialised.decode("utf-8"),
            event_type,
            tenant,
            kept,
            verified=verified,
            raw=serialised,
        )

    def _receive_params(
        self,
        message_id: Any,
        payload_text: str,
        event_type: Any,
        tenant: Any,
        headers: dict[str, Any],
        *,
        verified: bool,
        raw: bytes | None = None,
    ) -> Params:
        if isinstance(message_id, int) and not isinstance(message_id, bool):
            message_id = str(message_id)
        return ops.receive_params(
            self.source,
            _text(message_id, "id", required=True),
            _text(event_type, "type", required=False),
            payload_text,
            dump_json(headers, "headers").decode("utf-8"),
            _tenant(tenant),
            self.max_attempts,
            self.app_name,
            verified,
            raw,
        )

    def _list_params(self, tenant: Any, status: Any, limit: Any) -> Params:
        tenant_text = None if tenant is None else _text(tenant, "tenant", required=True)
        if status is not None and status not in STATUSES:
            raise validation_error(
                f"status must be one of {', '.join(STATUSES)}, not {status!r}",
                [{"message": "Unknown status", "path": ["status"]}],
            )
        return ops.list_params(
            tenant_text, self.source, status, min(positive_int(limit, "limit"), 1000)
        )

    def _purge_params(
        self, older_than: float | timedelta, include_dead: bool, tenant: Any, batch: Any
    ) -> Params:
        return ops.purge_params(
            seconds(older_than, "older_than"),
            bool(include_dead),
            positive_int(batch, "batch"),
            # '' must not widen a tenant's purge to every tenant
            None if tenant is None else _text(tenant, "tenant", required=True),
            self.source,
        )


__all__ = ["STATUSES", "InboxRules", "InboxStatus"]
