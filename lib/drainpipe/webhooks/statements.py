"""Webhook inbox operations: receive (store once), claim, extend, complete, fail,
checkpoint, list, purge. See :mod:`drainpipe.statements` for the shape; the inbox builds its
messages from the claimed rows (they carry the checkpoint callback)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from ..db.statement_shapes import Params, Row, int_array
from ..validation import aware

MESSAGE_COLUMNS = (
    "id, source, message_id, event_type, payload, headers, attempts, max_attempts,"
    " received_at, tenant, checkpoint"
)
ENTRY_COLUMNS = (
    "id, message_id, event_type, status, attempts, max_attempts, last_error, tenant,"
    " received_at, processed_at"
)

# v2: also the app the envelope of an agent inbox names and whether the signature checked out;
# v3: also the body's bytes as received (``webhook_inbox.raw``), for an agent's raw read
RECEIVE = (
    "SELECT id, duplicate FROM drainpipe.receive_webhook_v3("
    "%s, %s, %s, %s::jsonb, %s::jsonb, %s, %s, %s, %s, %s::bytea)"
)


def receive_params(
    source: str,
    message_id: str | None,
    event_type: str | None,
    payload_json: str,
    headers_json: str,
    tenant: str | None,
    max_attempts: int,
    app: str | None = None,
    verified: bool = False,
    raw: bytes | None = None,
) -> Params:
    return (
        source, message_id, event_type, payload_json, headers_json, tenant, max_attempts,
        app, verified, raw,
    )  # fmt: skip


def parse_receive(rows: list[Row]) -> tuple[int, bool]:
    """``(id, duplicate)`` of the stored message (the function always returns one row)."""
    return int(rows[0][0]), bool(rows[0][1])


# ``now`` (p_now): the caller's clock, or None for the database's


def instant(now: Callable[[], datetime] | None) -> datetime | None:
    """``p_now`` of the transition functions from the inbox's clock (None: the database's)."""
    return None if now is None else aware(now(), "now()")


CLAIM = f"SELECT {MESSAGE_COLUMNS} FROM drainpipe.claim_webhooks_v1(%s, %s, %s, %s, %s)"


def claim_params(
    source: str, worker: str, batch: int, lease: float, now: datetime | None = None
) -> Params:
    return (source, worker, batch, lease, now)


EXTEND = "SELECT drainpipe.extend_webhooks_v1(%s::bigint[], %s::integer[], %s, %s)"


def extend_params(ids: list[int], attempts: list[int], worker: str, lease: float) -> Params:
    return (int_array(ids), int_array(attempts), worker, lease)


def parse_extend(rows: list[Row]) -> set[int]:
    """The ids still held by this worker (the others' leases were lost)."""
    return {int(row[0]) for row in rows}


COMPLETE = "SELECT drainpipe.complete_webhook_v1(%s, %s, %s)"


def complete_params(message_id: int, worker: str, attempt: int) -> Params:
    return (message_id, worker, attempt)


def parse_flag(rows: list[Row]) -> bool:
    """False: the fenced change found another attempt (or worker); nothing changed."""
    return bool(rows[0][0]) if rows else False


FAIL = "SELECT drainpipe.fail_webhook_v1(%s, %s, %s, %s, %s, %s)"


def fail_params(
    message_id: int,
    worker: str,
    attempt: int,
    error: str,
    retry_in: float | None,
    now: datetime | None = None,
) -> Params:
    return (message_id, worker, attempt, error, retry_in, now)


CHECKPOINT = "SELECT drainpipe.checkpoint_webhook_v1(%s, %s, %s, %s::jsonb)"


def checkpoint_params(message_id: int, worker: str, attempt: int, fields_json: str) -> Params:
    return (message_id, worker, attempt, fields_json)


LIST = f"SELECT {ENTRY_COLUMNS} FROM drainpipe.list_webhooks_v1(%s, %s, %s, %s)"


def list_params(tenant: str | None, source: str, status: str | None, limit: int) -> Params:
    return (tenant, source, status, limit)


PURGE = "SELECT drainpipe.purge_webhooks_v1(%s, %s, %s, %s, %s)"


def purge_params(
    older_than: float, include_dead: bool, batch: int, tenant: str | None, source: str
) -> Params:
    return (older_than, include_dead, batch, tenant, source)


def parse_purge(rows: list[Row]) -> int:
    return int(rows[0][0] or 0) if rows else 0
