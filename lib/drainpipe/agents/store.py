"""The database half of ``drainpipe.AgentInboxes``: inboxes, subscriptions, the overview,
raw bodies and the fenced release and extend of a leased event. ``AgentInboxes`` adds the
batched acks, LISTEN wake-ups and the HTTP app on top; ``drainpipe.sync.agents_store`` is
this module's generated sync twin.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from datetime import datetime
from typing import Any, Literal

from ..db import as_database, dump_json
from ..db.statement_shapes import Params, Row
from ..errors import DrainpipeError
from ..validation import text_fault
from . import statements as ops
from .answers import InboxSettings, Settlement
from .overview import InboxOverview, parse_overview
from .reads import SETTINGS_TTL as SETTINGS_TTL
from .reads import read_settings
from .statements import (
    ACK_MODES,
    EVENT_NOT_FOUND,
    INBOX_NOT_FOUND,
    MAX_LEASE,
    ORDERS,
    SETTLEMENT_COLUMNS,
    Found,
    LeaseCodec,
    bad_parameter,
    choice,
    error_text,
    number,
    optional_name,
    parse_event_id,
    whole_number,
)

#: How long a process trusts the inbox settings it read (create() refreshes its own).

Op = Literal["ack", "release", "extend"]


# -- the statements of inboxes, subscriptions, the overview and settlements ---------------


def path_parts(value: Any, name: str) -> list[str]:
    """``"data.severity"`` → ``["data", "severity"]``."""
    if not isinstance(value, str) or not value or len(value) > 1000 or text_fault(value):
        raise bad_parameter(name, f"{name} must be a dotted body path such as data.severity")
    parts = value.split(".")
    if any(not part for part in parts):
        raise bad_parameter(name, f"{name} must be a dotted body path such as data.severity")
    return parts


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


SUBSCRIBE = "SELECT drainpipe.agent_subscribe_v1(%s, %s, %s::text[], %s::jsonb, %s::text[])"


def subscribe_params(
    inbox_id: str,
    source: str,
    types: list[str] | None,
    where_json: str | None,
    correlation_path: list[str] | None,
) -> Params:
    return (inbox_id, source, types, where_json, correlation_path)


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


# v2: the bytes the webhook inbox received (``webhook_inbox.raw``), else the payload's text
RAW = "SELECT inbox_id, body FROM drainpipe.agent_raw_v2(%s, %s::text[])"


def raw_params(event_id: int, inboxes: list[str] | None) -> Params:
    return (event_id, inboxes)


# the console's overview of every agent inbox: counts and ages only
OVERVIEW = (
    "SELECT inbox_id, name, counts, open_streams, oldest_open_age_s"
    " FROM drainpipe.agent_inbox_overview_v1(%s)"
)


def overview_params(now: datetime | None) -> Params:
    return (now,)


# -- the calls that run them --------------------------------------------------------------


class AgentInboxesStore:
    """Agent inboxes on ``db``; the options of :class:`drainpipe.AgentInboxes` but
    ``listen``."""

    def __init__(
        self,
        db: Any,
        *,
        lease_secret: str | bytes,
        now: Callable[[], datetime] | None = None,
    ) -> None:
        secret = lease_secret.encode() if isinstance(lease_secret, str) else lease_secret
        if not isinstance(secret, bytes) or len(secret) < 16:
            raise ValueError("lease_secret must be a string or bytes of at least 16 bytes")
        self._secret = secret
        self.leases = LeaseCodec(secret)
        self._db = as_database(db)
        self.now = now
        self._settings: dict[str, tuple[InboxSettings, float]] = {}

    # -- helpers shared with pull and the app ---------------------------------------------

    def _instant(self) -> datetime | None:
        return ops.instant(self.now)

    @property
    def secret(self) -> bytes:
        return self._secret

    async def settings(self, inbox_id: str) -> InboxSettings:
        """The inbox's settings (cached for a few seconds); 404 ``INBOX_NOT_FOUND``."""
        return await read_settings(self, inbox_id)

    # -- inboxes and subscriptions --------------------------------------------------------

    async def create(
        self,
        name: str,
        *,
        lease_seconds: int = 300,
        hold_seconds: int = 604800,
        max_attempts: int | None = None,
        default_order: str = "fifo",
        default_ack: str = "manual",
        allowed_ack: Collection[str] = ("manual", "pickup"),
        priority_path: str | None = None,
        view_paths: Iterable[str] | Mapping[str, str] | None = None,
        view_max_bytes: int = 8192,
    ) -> str:
        """Create the inbox ``name`` and return its id (``inb_…``). Creating a name again
        returns the same id and gives it these settings (a function file may call this at
        every cold start); events keep the ``max_attempts``/``hold_seconds`` they arrived with."""
        name = optional_name(name, "name") or ""
        lease = whole_number(lease_seconds, "lease_seconds", 30, 3600)
        hold = whole_number(hold_seconds, "hold_seconds", 1, 2**31 - 1)
        attempts = (
            None if max_attempts is None else whole_number(max_attempts, "max_attempts", 1, 10**6)
        )
        order = choice(default_order, "default_order", ORDERS)
        ack = choice(default_ack, "default_ack", ACK_MODES)
        if isinstance(allowed_ack, str):
            allowed_ack = [allowed_ack]
        allowed = list(
            dict.fromkeys(choice(mode, "allowed_ack", ACK_MODES) for mode in allowed_ack)
        )
        if not allowed:
            raise bad_parameter("allowed_ack", "allowed_ack must name at least one ack mode")
        if ack not in allowed:
            raise bad_parameter("default_ack", "default_ack must be one of allowed_ack")
        priority = None if priority_path is None else path_parts(priority_path, "priority_path")
        paths = view_paths_of(view_paths)
        cap = whole_number(view_max_bytes, "view_max_bytes", 64, 1048576)
        params = create_inbox_params(
            name, lease, hold, attempts, order, ack, allowed, priority,
            None if paths is None else dump_json(list(paths.items())).decode(), cap,
        )  # fmt: skip
        inbox_id = parse_text(await self._db.fetch(CREATE_INBOX, params))
        assert inbox_id is not None
        self._settings.pop(inbox_id, None)
        return inbox_id

    async def subscribe(
        self,
        inbox_id: str,
        source: str,
        *,
        types: Iterable[str] | None = None,
        where: Mapping[str, Any] | None = None,
        correlation_path: str | None = None,
    ) -> str:
        """Subscribe the inbox to the messages a ``WebhookInbox(source=...)`` stores from now
        on: those whose type is in ``types`` (all when None) and whose body has every
        ``where`` path equal to its value. Returns the subscription id (``sub_…``; the same
        for the same filters). ``correlation_path`` names the body path the ``correlation``
        filter of ``next`` matches."""
        await self.settings(inbox_id)
        source_name = optional_name(source, "source") or ""
        type_list = None
        if types is not None:
            type_list = [
                optional_name(t, "types") or ""
                for t in ([types] if isinstance(types, str) else types)
            ]
            if not type_list:
                raise bad_parameter("types", "types must name at least one type (None: all)")
        where_json = None
        if where is not None:
            if not isinstance(where, Mapping) or not where:
                raise bad_parameter(
                    "where", 'where must map body paths to values: {"data.status": "paid"}'
                )
            for path in where:
                path_parts(path, "where")
            where_json = dump_json(dict(where), "where").decode()
        correlation = (
            None if correlation_path is None else path_parts(correlation_path, "correlation_path")
        )
        params = subscribe_params(inbox_id, source_name, type_list, where_json, correlation)
        found = parse_text(await self._db.fetch(SUBSCRIBE, params))
        if found is None:
            raise DrainpipeError("not_found", f"No inbox {inbox_id}", code=INBOX_NOT_FOUND)
        return found

    async def overview(self) -> list[InboxOverview]:
        """Every inbox, by name: its events counted by state, its open streams and the age of
        its oldest open event, in one round trip (metadata only; the console's
        ``GET /inboxes``). It counts every kept event: an overview, not a hot path."""
        rows = await self._db.fetch(OVERVIEW, overview_params(self._instant()))
        return parse_overview(rows)

    # -- settlements ----------------------------------------------------------------------

    async def release(
        self, event_id: str, lease_id: str, *, delay_seconds: float = 0, error: str | None = None
    ) -> bool:
        """Give the event back: due again after ``delay_seconds`` (failed instead when this
        was its last delivery under ``max_attempts``)."""
        result = await self._settle_fenced(
            "release", event_id, lease_id, None, delay_seconds=delay_seconds, error=error
        )
        return result.ok

    async def extend(self, event_id: str, lease_id: str, seconds: float) -> bool:
        """Still working: the lease then ends ``seconds`` (1..3600) from now."""
        return (await self._settle_fenced("extend", event_id, lease_id, None, seconds=seconds)).ok

    async def _settle_fenced(
        self,
        op: Op,
        event_id: Any,
        lease_id: Any,
        inboxes: Collection[str] | None,
        *,
        delay_seconds: Any = 0,
        error: Any = None,
        seconds: Any = None,
    ) -> Settlement:
        """A release or an extend, fenced by its lease: see ``AgentInboxes.settle``."""
        number_id, delivery, token = ops.fence(self.leases, event_id, lease_id)
        scope = None if inboxes is None else sorted(inboxes)
        now = self._instant()
        if op == "release":
            delay = number(delay_seconds, "delay_seconds", 0, 7 * 86400)
            params = release_params(
                number_id, delivery, token, delay, error_text(error), scope, now
            )
            statement = RELEASE
        else:
            extra = number(seconds, "seconds", 1, MAX_LEASE)
            statement = EXTEND
            params = extend_params(number_id, delivery, token, extra, scope, now)
        found = parse_settlement(await self._db.fetch(statement, params))
        return ops.settlement(event_id, number_id, found)

    async def raw(self, event_id: str, *, inboxes: Collection[str] | None = None) -> bytes:
        """The whole body of an event as the webhook inbox received it, byte for byte, so a
        signature can be checked again (a ``store()``d message: its payload as serialised at
        store time; one stored without its bytes: its payload's JSON text). 404 when
        unknown, outside ``inboxes``, or its webhook message was purged."""
        number_id = parse_event_id(event_id)
        if number_id is None:
            raise DrainpipeError("not_found", "No such event", code=EVENT_NOT_FOUND)
        scope = None if inboxes is None else sorted(inboxes)
        rows = await self._db.fetch(RAW, raw_params(number_id, scope))
        if not rows or rows[0][1] is None:
            raise DrainpipeError("not_found", f"No event {event_id}", code=EVENT_NOT_FOUND)
        return bytes(rows[0][1])

    async def fetch(self, statement: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        return await self._db.fetch(statement, params)

    async def close(self) -> None:
        """Close the pool opened for a DSN (a pool or connection you gave stays open)."""
        await self._db.close()
