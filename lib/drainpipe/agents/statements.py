"""Agent inbox operations: inboxes and subscriptions, hand-outs (next, claim), peek,
settlements (ack, release, extend), raw bodies and stream slots. See :mod:`drainpipe.statements`
for the shape; :mod:`drainpipe.agents` builds envelopes from the event rows.

Above the statements, the checks of what agents send into them: query parameters, bodies
and frames all answer 400 with a stable code when wrong (docs/reference.md section 11:
``max`` 1..10, ``wait`` 0..30, ...), and how long a long poll waits (both twins, and the
executor's pull of jobs, speak the same protocol)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

from ..db.json import dump_json
from ..db.statement_shapes import Params, Row, int_array, token_array
from ..errors import DrainpipeError
from ..validation import MAX_NAME_LENGTH, aware, text_fault
from .envelope import Settlement, event_id_text, parse_event_id

if TYPE_CHECKING:
    from .envelope import LeaseCodec

#: ``(ok, inbox id, state, lease_until)`` of a settlement the statement found
Found = tuple[bool, str, str, datetime | None]

ORDERS: Final = ("fifo", "lifo", "priority")
ACK_MODES: Final = ("manual", "pickup")
MAX_EVENTS: Final = 10
MAX_WAIT: Final = 30.0
MAX_PEEK: Final = 200
MAX_LEASE: Final = 3600.0
MAX_ERROR_CHARS: Final = 4000
MAX_OUTCOME_BYTES: Final = 65536
#: What a long poll leaves of the function's budget to answer in (seconds).
RESERVE: Final = 1.0

INVALID_PARAMETER: Final = "INVALID_PARAMETER"
ACK_MODE_NOT_ALLOWED: Final = "ACK_MODE_NOT_ALLOWED"
LEASE_LOST: Final = "LEASE_LOST"
PULL_CONSUMED: Final = "PULL_CONSUMED"
INBOX_NOT_FOUND: Final = "INBOX_NOT_FOUND"
EVENT_NOT_FOUND: Final = "EVENT_NOT_FOUND"
INBOX_FORBIDDEN: Final = "INBOX_FORBIDDEN"
CURSOR_INVALID: Final = "CURSOR_INVALID"


def bad_parameter(name: str, message: str) -> DrainpipeError:
    """A 400 naming the parameter (kind ``validation``, so ``issues`` travel with it)."""
    return DrainpipeError(
        "validation",
        message,
        code=INVALID_PARAMETER,
        issues=[{"message": message, "path": [name]}],
        status=400,
    )


def whole_number(value: Any, name: str, low: int, high: int) -> int:
    if isinstance(value, str):
        text = value.strip()
        if not text.lstrip("-").isdigit() or len(text) > 12:
            raise bad_parameter(name, f"{name} must be a whole number from {low} to {high}")
        value = int(text)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise bad_parameter(name, f"{name} must be a whole number from {low} to {high}")
    return value


def number(value: Any, name: str, low: float, high: float) -> float:
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise bad_parameter(name, f"{name} must be a number from {low:g} to {high:g}") from None
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not math.isfinite(value)
        or not low <= value <= high
    ):
        raise bad_parameter(name, f"{name} must be a number from {low:g} to {high:g}")
    return float(value)


def choice(value: Any, name: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise bad_parameter(name, f"{name} must be one of {', '.join(allowed)}")
    return str(value)


def optional_name(value: Any, name: str) -> str | None:
    """A filter or key: None, or text of 1..255 characters Postgres can store."""
    if value is None:
        return None
    if (
        not isinstance(value, str)
        or not value
        or len(value) > MAX_NAME_LENGTH
        or text_fault(value) is not None
    ):
        raise bad_parameter(name, f"{name} must be text of 1 to {MAX_NAME_LENGTH} characters")
    return value


def lease_text(value: Any) -> str:
    if not isinstance(value, str) or not value or len(value) > 200:
        raise bad_parameter("lease_id", "lease_id must be the lease id the event was handed with")
    return value


def error_text(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or text_fault(value) is not None:
        raise bad_parameter("error", "error must be text")
    return value[:MAX_ERROR_CHARS]


def path_parts(value: Any, name: str) -> list[str]:
    """``"data.severity"`` → ``["data", "severity"]``."""
    if not isinstance(value, str) or not value or len(value) > 1000 or text_fault(value):
        raise bad_parameter(name, f"{name} must be a dotted body path such as data.severity")
    parts = value.split(".")
    if any(not part for part in parts):
        raise bad_parameter(name, f"{name} must be a dotted body path such as data.severity")
    return parts


Filters = tuple[str | None, str | None, str | None, str | None]


def filters_of(type: Any, source: Any, subscription: Any, correlation: Any) -> Filters:
    return (
        optional_name(type, "type"),
        optional_name(source, "source"),
        optional_name(subscription, "subscription"),
        optional_name(correlation, "correlation"),
    )


def view_paths_of(value: Any) -> dict[str, list[str]] | None:
    """``["data.amount"]`` (keys are the paths) or ``{"amount": "data.amount"}``."""
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if isinstance(value, Mapping):
        pairs = list(value.items())
    elif isinstance(value, Iterable):
        pairs = [(path, path) for path in value]
    else:
        raise bad_parameter("view_paths", "view_paths must be a list of body paths or a mapping")
    paths: dict[str, list[str]] = {}
    for name, path in pairs:
        if not isinstance(name, str) or not name or text_fault(name) is not None:
            raise bad_parameter("view_paths", "view_paths names must be text")
        paths[name] = path_parts(path, "view_paths")
    if not paths or len(paths) > 100:
        raise bad_parameter("view_paths", "view_paths must name 1 to 100 paths")
    return paths


def long_poll_wait(wait: float, budget: float, reserve: float, cap: float = 30.0) -> float:
    """How long a long poll may wait: ``min(wait, cap, budget - reserve)``, never negative,
    so the answer always leaves the function ``reserve`` seconds to send it."""
    return max(0.0, min(wait, cap, budget - reserve))


def poll_backoff(step: int, first: float = 0.1, cap: float = 1.0) -> float:
    """The pause after empty poll step number ``step`` (1-based): 100 ms doubling to 1 s."""
    return min(cap, first * 2.0 ** (step - 1))


def instant(now: Callable[[], datetime] | None) -> datetime | None:
    """``p_now`` of the statements: the inboxes' clock, or None for the database's."""
    return None if now is None else aware(now(), "now()")


def fence(leases: LeaseCodec, event_id: Any, lease_id: Any) -> tuple[int, int, str | None]:
    """``(event id, delivery, token)`` to fence a settlement with. A lease id that is not
    one of this event's (altered, forged, another event's) can only be refused, but an
    event outside the caller's inboxes must still be a 404: it fences with a delivery
    and token no hand-out has (the SQL answers not found or not ok)."""
    lease = lease_text(lease_id)
    number_id = parse_event_id(event_id)
    if number_id is None:
        raise DrainpipeError("not_found", "No such event", code=EVENT_NOT_FOUND)
    decoded = leases.read(lease)
    if decoded is None or decoded[0] != number_id:
        return number_id, -1, None
    # the token as hex text (Postgres reads it as a uuid): no UUID object per ack
    return number_id, decoded[1], decoded[2].hex()


def checked_ack(
    leases: LeaseCodec, event_id: Any, lease_id: Any, outcome: Any
) -> tuple[int, int, str | None, str | None]:
    """An ack's :func:`fence` and its outcome as JSON text."""
    number_id, delivery, token = fence(leases, event_id, lease_id)
    outcome_json = None
    if outcome is not None:
        outcome_json = dump_json(outcome, "outcome").decode()
        if len(outcome_json.encode()) > MAX_OUTCOME_BYTES:
            raise bad_parameter("outcome", "outcome must be at most 64 KiB of JSON")
    return number_id, delivery, token, outcome_json


# -- the statements ---------------------------------------------------------------------

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


def parse_settlement(rows: list[Row]) -> Found | None:
    """``(ok, inbox id, state, lease_until)``; None: no such event (within the inboxes)."""
    if not rows:
        return None
    ok, inbox_id, state, lease_until = rows[0]
    return bool(ok), str(inbox_id), str(state), lease_until


def settlement(event_id: Any, number_id: int, found: Found | None) -> Settlement:
    """What a settlement answers; 404 ``EVENT_NOT_FOUND`` when the statement found none."""
    if found is None:
        raise DrainpipeError("not_found", f"No event {event_id}", code=EVENT_NOT_FOUND)
    ok, inbox_id, state, until = found
    return Settlement(ok, event_id_text(number_id), inbox_id, state, until)


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
