"""Agent inbox operations: inboxes and subscriptions, hand-outs (next, claim), peek,
settlements (ack, release, extend), raw bodies and stream slots. See :mod:`drainpipe.statements`
for the shape; :mod:`drainpipe.agents` builds envelopes from the event rows.

Above the statements, what agents send and are handed besides the envelope: event ids,
lease ids, and the checks of what agents send into the statements: query parameters,
bodies and frames all answer 400 with a stable code when wrong (docs/reference.md section
11: ``max`` 1..10, ``wait`` 0..30, ...), and how long a long poll waits (both twins, and the
executor's pull of jobs, speak the same protocol). The statements of inboxes,
subscriptions, the overview, release and extend sit beside the calls that run them in
:mod:`drainpipe.agents.store`, the stream slots' in :mod:`drainpipe.agents.stream`.

Lease ids: ``lse_<base64url>`` of the event id, the delivery and the 16-byte token the
database minted in the hand-out transaction, and an HMAC-SHA256 of them (16 bytes) under
``lease_secret`` (:class:`LeaseCodec`). The format is
:func:`drainpipe.engine.core.mint_lease_id`'s, byte for byte: lease ids handed out before
an upgrade still settle after it (``tests/agents/test_lease_codec.py`` checks both ways).
What differs is the cost, since every hand-out mints one per event and every settlement
reads one: the HMAC's keyed state (the secret and the prefix, hashed once) is copied instead
of being set up again per id, and base64 goes through ``binascii`` without ``base64``'s
wrappers, about 1.5 us instead of 4 per mint-and-read. The database never sees a lease id,
only its token; without the secret nobody (the database's readers included) can make a
lease id from a token.

A codec also remembers the last lease ids it minted (a bounded map, in memory only): an ack
quoting one of them is authentic by construction, so its MAC is not computed again. That is
the common case of an agent acking what it pulled from the same process, or a server
answering the ack of what it handed out; any other lease id is decoded and its MAC checked.
"""

from __future__ import annotations

import binascii
import hashlib
import hmac
import math
import struct
from collections.abc import Callable
from datetime import datetime
from typing import Any, Final

from ..db.json import dump_json
from ..db.statement_shapes import Params, Row, int_array, token_array
from ..errors import DrainpipeError
from ..validation import MAX_NAME_LENGTH, aware, text_fault
from .answers import Settlement

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


# -- event ids and lease ids --------------------------------------------------------------

EVENT_PREFIX: Final = "evt_"
_BIGINT_MAX: Final = 2**63 - 1


def event_id_text(event_id: int) -> str:
    return f"{EVENT_PREFIX}{event_id}"


def parse_event_id(text: Any) -> int | None:
    """The database id of an ``evt_…`` id, or None for anything that is not one."""
    # str methods instead of the regex ^evt_([1-9][0-9]{0,18})$ (every settlement parses
    # one): ASCII digits only, no leading zero, at most 19 of them, within bigint; and, as
    # that regex's $ did, one trailing newline is let through
    if isinstance(text, str) and text.endswith("\n"):
        text = text[:-1]
    if (
        not isinstance(text, str)
        or not text.startswith(EVENT_PREFIX)
        or not 5 <= len(text) <= 23
        or not text.isascii()
    ):
        return None
    digits = text[4:]
    if not digits.isdigit() or digits[0] == "0":
        return None
    value = int(digits)
    return value if value <= _BIGINT_MAX else None


LEASE_PREFIX: Final = "lse"
_HEAD: Final = LEASE_PREFIX + "_"
_LAYOUT: Final = struct.Struct(">qi16s")  # bigint event id, integer delivery, uuid token
_MAC_BYTES: Final = 16
_RAW_BYTES: Final = _LAYOUT.size + _MAC_BYTES  # 44 bytes: 59 base64 characters, unpadded
_TEXT_CHARS: Final = len(_HEAD) + 59
_TO_URLSAFE: Final = bytes.maketrans(b"+/", b"-_")
_FROM_URLSAFE: Final = bytes.maketrans(b"-_", b"+/")
_BLOCK: Final = 64  # SHA-256's block size
_INNER_PAD: Final = bytes(byte ^ 0x36 for byte in range(256))
_OUTER_PAD: Final = bytes(byte ^ 0x5C for byte in range(256))
Lease = tuple[int, int, bytes]
#: A codec remembers the last 2048 to 4096 lease ids it minted: the last few pulls of every
#: concurrent consumer, about a megabyte.
REMEMBERED: Final = 2048


def _text(raw: bytes) -> str:
    """The lease id of its 44 bytes."""
    text = binascii.b2a_base64(raw, newline=False).translate(_TO_URLSAFE).rstrip(b"=")
    return _HEAD + text.decode("ascii")


class LeaseCodec:
    """Mints and reads the lease ids of one secret."""

    __slots__ = ("_earlier", "_inner", "_minted", "_outer")

    def __init__(self, secret: bytes) -> None:
        # HMAC-SHA256 (RFC 2104) from its two keyed hash states, copied per id: hmac's own
        # copy() and digest() are Python around the same two hashes (1.9 us an id against
        # 1.1). The MAC input is prefix, NUL, body (engine.core's layout): the key and the
        # first two are absorbed here once.
        key = hashlib.sha256(secret).digest() if len(secret) > _BLOCK else secret
        key = key.ljust(_BLOCK, b"\0")
        self._inner = hashlib.sha256(key.translate(_INNER_PAD))
        self._inner.update(LEASE_PREFIX.encode() + b"\0")
        self._outer = hashlib.sha256(key.translate(_OUTER_PAD))
        # two generations: when this one is full it becomes the earlier one and the one
        # before is dropped (deleting a dict's oldest keys one by one makes every iter()
        # walk the holes they leave)
        self._minted: dict[str, Lease] = {}
        self._earlier: dict[str, Lease] = {}

    def _mac(self, body: bytes) -> bytes:
        inner = self._inner.copy()
        inner.update(body)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()[:_MAC_BYTES]

    def mint(self, event_id: int, delivery: int, token: bytes) -> str:
        body = _LAYOUT.pack(event_id, delivery, token)
        lease_id = _text(body + self._mac(body))
        minted = self._minted
        minted[lease_id] = (event_id, delivery, token)
        if len(minted) >= REMEMBERED:
            self._earlier, self._minted = minted, {}
        return lease_id

    def read(self, lease_id: object) -> Lease | None:
        """``(event id, delivery, token)`` of a lease id this secret minted, else None
        (malformed, altered, another prefix's or another secret's)."""
        if isinstance(lease_id, str):
            known = self._minted.get(lease_id) or self._earlier.get(lease_id)
            if known is not None:
                return known
        if (
            not isinstance(lease_id, str)
            or len(lease_id) != _TEXT_CHARS
            or not lease_id.startswith(_HEAD)
            or not lease_id.isascii()
        ):
            return None
        try:
            raw = binascii.a2b_base64(
                lease_id[len(_HEAD) :].encode("ascii").translate(_FROM_URLSAFE) + b"=",
                strict_mode=True,
            )
        except binascii.Error:
            return None
        if len(raw) != _RAW_BYTES or _text(raw) != lease_id:
            # one text per lease id: the last character's 2 unused low bits must be zero,
            # or an id with another last character would read as the same lease
            return None
        body = raw[: _LAYOUT.size]
        if not hmac.compare_digest(raw[_LAYOUT.size :], self._mac(body)):
            return None
        event_id, delivery, token = _LAYOUT.unpack(body)
        return event_id, delivery, token


# -- the checks of what agents send -------------------------------------------------------


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


Filters = tuple[str | None, str | None, str | None, str | None]


def filters_of(type: Any, source: Any, subscription: Any, correlation: Any) -> Filters:
    return (
        optional_name(type, "type"),
        optional_name(source, "source"),
        optional_name(subscription, "subscription"),
        optional_name(correlation, "correlation"),
    )


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
INBOX = f"SELECT {INBOX_COLUMNS} FROM drainpipe.agent_inbox_v1(%s)"


def inbox_params(inbox_id: str) -> Params:
    return (inbox_id,)


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


def settlement(event_id: Any, number_id: int, found: Found | None) -> Settlement:
    """What a settlement answers; 404 ``EVENT_NOT_FOUND`` when the statement found none."""
    if found is None:
        raise DrainpipeError("not_found", f"No event {event_id}", code=EVENT_NOT_FOUND)
    ok, inbox_id, state, until = found
    return Settlement(ok, event_id_text(number_id), inbox_id, state, until)


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
