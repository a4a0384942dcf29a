"""Agent inbox operations: inboxes and subscriptions, hand-outs (next, claim), peek,
settlements (ack, release, extend), raw bodies and stream slots. See :mod:`drainpipe.statements`
for the shape; :mod:`drainpipe.agents` builds envelopes from the event rows."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..db.statement_shapes import Params, Row, int_array, token_array

#: What an envelope needs of a ``drainpipe.agent_event_v1`` row, in this order: outcome, id,
#: source, app, event_type, received_at, verified, the body as JSON text, delivery, ack, the
#: lease token's 16 bytes, lease_until. Fewer columns than the type has (inbox_id, state and
#: subscription_id are not shown), the body as text (read by ``load_json``: a JSON column
#: makes a caller's pool set up its JSON loaders again for every result) and the token as
#: bytes (no UUID object on the way to the lease id).
EVENT_COLUMNS = (
    "outcome, id, source, app, event_type, received_at, verified, payload::text, delivery,"
    " ack, uuid_send(lease_token), lease_until"
)
INBOX_COLUMNS = (
    "id, name, lease_seconds, hold_seconds, max_attempts, default_order, default_ack,"
    " allowed_ack, priority_path, view_paths, view_max_bytes"
)
SETTLEMENT_COLUMNS = "ok, inbox_id, state, lease_until"

CREATE_INBOX = (
    "SELECT drainpipe.agent_create_inbox_v1(%s, %s, %s, %s, %s, %s, %s::text[], %s::text[],"
    " %s::jsonb, %s)"
)


def create_inbox_params(
    name: str,
    lease_seconds: int,
    hold_seconds: int,
    max_attempts: int | None,
    default_order: str,
    default_ack: str,
    allowed_ack: list[str],
    priority_path: list[str] | None,
    view_paths_json: str | None,
    view_max_bytes: int,
) -> Params:
    return (
        name, lease_seconds, hold_seconds, max_attempts, default_order, default_ack,
        allowed_ack, priority_path, view_paths_json, view_max_bytes,
    )  # fmt: skip


def parse_text(rows: list[Row]) -> str | None:
    return None if not rows or rows[0][0] is None else str(rows[0][0])


INBOX = f"SELECT {INBOX_COLUMNS} FROM drainpipe.agent_inbox_v1(%s)"


def inbox_params(inbox_id: str) -> Params:
    return (inbox_id,)


SUBSCRIBE = "SELECT drainpipe.agent_subscribe_v1(%s, %s, %s::text[], %s::jsonb, %s::text[])"


def subscribe_params(
    inbox_id: str,
    source: str,
    types: list[str] | None,
    where_json: str | None,
    correlation_path: list[str] | None,
) -> Params:
    return (inbox_id, source, types, where_json, correlation_path)


NEXT = (
    f"SELECT {EVENT_COLUMNS} FROM drainpipe.agent_next_v1("
    "%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
)


def next_params(
    inbox_id: str,
    order: str,
    max_events: int,
    ack: str,
    filters: tuple[str | None, str | None, str | None, str | None],
    principal: str | None,
    key: str | None,
    now: datetime | None,
) -> Params:
    return (inbox_id, order, max_events, ack, *filters, principal, key, now)


CLAIM = f"SELECT {EVENT_COLUMNS} FROM drainpipe.agent_claim_v1(%s, %s::bigint[], %s)"


def claim_params(inbox_id: str, event_ids: list[int], now: datetime | None) -> Params:
    return (inbox_id, int_array(event_ids), now)


EVENTS = f"SELECT {EVENT_COLUMNS} FROM drainpipe.agent_events_v1(%s, %s, %s, %s, %s, %s, %s, %s)"


def events_params(
    inbox_id: str,
    after: int,
    limit: int,
    filters: tuple[str | None, str | None, str | None, str | None],
    now: datetime | None,
) -> Params:
    return (inbox_id, after, limit, *filters, now)


ACK = (
    f"SELECT {SETTLEMENT_COLUMNS} FROM drainpipe.agent_ack_v1("
    "%s, %s, %s, %s::jsonb, %s::text[], %s)"
)


def ack_params(
    event_id: int,
    delivery: int,
    token: Any,
    outcome_json: str | None,
    inboxes: list[str] | None,
    now: datetime | None,
) -> Params:
    return (event_id, delivery, token, outcome_json, inboxes, now)


RELEASE = (
    f"SELECT {SETTLEMENT_COLUMNS} FROM drainpipe.agent_release_v1("
    "%s, %s, %s, %s, %s, %s::text[], %s)"
)


def release_params(
    event_id: int,
    delivery: int,
    token: Any,
    delay_seconds: float,
    error: str | None,
    inboxes: list[str] | None,
    now: datetime | None,
) -> Params:
    return (event_id, delivery, token, delay_seconds, error, inboxes, now)


EXTEND = (
    f"SELECT {SETTLEMENT_COLUMNS} FROM drainpipe.agent_extend_v1(%s, %s, %s, %s, %s::text[], %s)"
)


def extend_params(
    event_id: int,
    delivery: int,
    token: Any,
    seconds: float,
    inboxes: list[str] | None,
    now: datetime | None,
) -> Params:
    return (event_id, delivery, token, seconds, inboxes, now)


def parse_settlement(rows: list[Row]) -> tuple[bool, str, str, datetime | None] | None:
    """``(ok, inbox id, state, lease_until)``; None: no such event (within the inboxes)."""
    if not rows:
        return None
    ok, inbox_id, state, lease_until = rows[0]
    return bool(ok), str(inbox_id), str(state), lease_until


# v2: the bytes the webhook inbox received (``webhook_inbox.raw``), else the payload's text
RAW = "SELECT inbox_id, body FROM drainpipe.agent_raw_v2(%s, %s::text[])"


def raw_params(event_id: int, inboxes: list[str] | None) -> Params:
    return (event_id, inboxes)


STREAM_ACQUIRE = "SELECT drainpipe.agent_stream_acquire_v1(%s, %s, %s, %s, %s)"


def stream_acquire_params(
    inbox_id: str, holder: str, seconds: float, limit: int, now: datetime | None
) -> Params:
    return (inbox_id, holder, seconds, limit, now)


STREAM_RENEW = "SELECT drainpipe.agent_stream_renew_v1(%s, %s, %s, %s, %s)"


def stream_renew_params(
    inbox_id: str, slot: int, holder: str, seconds: float, now: datetime | None
) -> Params:
    return (inbox_id, slot, holder, seconds, now)


STREAM_RELEASE = "SELECT drainpipe.agent_stream_release_v1(%s, %s, %s)"


def stream_release_params(inbox_id: str, slot: int, holder: str) -> Params:
    return (inbox_id, slot, holder)


def parse_slot(rows: list[Row]) -> int | None:
    return None if not rows or rows[0][0] is None else int(rows[0][0])


def parse_flag(rows: list[Row]) -> bool:
    return bool(rows[0][0]) if rows else False


# several acks in one call (each fenced as ACK is); n: the 1-based position
ACK_MANY = (
    "SELECT * FROM drainpipe.agent_ack_many_v1("
    "%s::bigint[], %s::integer[], %s::uuid[], %s::jsonb[], %s::text[], %s)"
)


def ack_many_params(
    event_ids: list[int],
    deliveries: list[int],
    tokens: list[str | None],
    outcomes_json: list[str | None],
    inboxes: list[str] | None,
    now: datetime | None,
) -> Params:
    """``tokens``: uuid texts (None: a lease id that fences nothing). The arrays go as
    literals (:func:`int_array`); outcomes, mostly none, as NULL when there are none
    (the function reads a missing outcome as NULL)."""
    outcomes = None if all(o is None for o in outcomes_json) else outcomes_json
    return (
        int_array(event_ids), int_array(deliveries), token_array(tokens), outcomes, inboxes, now,
    )  # fmt: skip


# a batch of acks (ACK_MANY's parameters first) and then a pull (NEXT's) in one call and one
# transaction: the ack rows (outcome 'ack') come first, in EVENT_COLUMNS' shape, then the
# pull's rows
ACK_NEXT = (
    f"SELECT {EVENT_COLUMNS} FROM drainpipe.agent_ack_next_v1("
    "%s::bigint[], %s::integer[], %s::uuid[], %s::jsonb[], %s::text[], %s,"
    " %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
)
#: an ack row's outcome in ACK_NEXT's answer
ACKED_ROW = "ack"


def ack_rows_end(rows: list[Row]) -> int:
    """Where ACK_NEXT's ack rows end: ``rows[:end]`` are the acks (:func:`parse_ack_rows`),
    ``rows[end:]`` the pull's rows, as NEXT returns them."""
    end = 0
    while end < len(rows) and rows[end][0] == ACKED_ROW:
        end += 1
    return end


def parse_ack_rows(rows: list[Row]) -> dict[int, tuple[bool, str, str, datetime | None]]:
    """ACK_NEXT's ack rows as :func:`parse_ack_many` reads its own: an ack row is outcome,
    position, source = inbox, app, event_type = state, received_at, verified = ok, ...,
    lease_until."""
    return {int(row[1]): (bool(row[6]), str(row[2]), str(row[4]), row[11]) for row in rows}


def parse_ack_many(rows: list[Row]) -> dict[int, tuple[bool, str, str, datetime | None]]:
    """Position → ``(ok, inbox id, state, lease_until)``; a position without a row names
    an event that does not exist (within the inboxes)."""
    return {
        int(n): (bool(ok), str(inbox), str(state), until) for n, ok, inbox, state, until in rows
    }


# the console's overview of every agent inbox: counts and ages only
OVERVIEW = (
    "SELECT inbox_id, name, counts, open_streams, oldest_open_age_s"
    " FROM drainpipe.agent_inbox_overview_v1(%s)"
)


def overview_params(now: datetime | None) -> Params:
    return (now,)
