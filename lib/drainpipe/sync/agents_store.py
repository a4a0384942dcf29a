# generated from lib/drainpipe/agents/store.py by ./scripts/sync-twin: do not edit.
# Change the async source (or tools/sync_twin.py) and run ./scripts/sync-twin again.
"""The database half of ``drainpipe.AgentInboxes``: inboxes, subscriptions, the overview,
raw bodies and the fenced release and extend of a leased event. ``AgentInboxes`` adds the
batched acks, LISTEN wake-ups and the HTTP app on top; ``drainpipe.sync.agents_store`` is
this module's generated sync twin.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from datetime import datetime
from typing import Any

from ..agents import statements as ops
from ..agents.answers import InboxSettings, Settlement
from ..agents.overview import InboxOverview, parse_overview
from ..agents.reads import SETTINGS_TTL as SETTINGS_TTL
from ..agents.statements import (
    ACK_MODES,
    EVENT_NOT_FOUND,
    INBOX_NOT_FOUND,
    MAX_LEASE,
    ORDERS,
    LeaseCodec,
    bad_parameter,
    choice,
    error_text,
    number,
    optional_name,
    parse_event_id,
    whole_number,
)
from ..agents.store import (
    CREATE_INBOX,
    EXTEND,
    OVERVIEW,
    RAW,
    RELEASE,
    SUBSCRIBE,
    Op,
    create_inbox_params,
    extend_params,
    overview_params,
    parse_settlement,
    parse_text,
    path_parts,
    raw_params,
    release_params,
    subscribe_params,
    view_paths_of,
)
from ..db import dump_json
from ..db.sync import as_sync_database
from ..errors import DrainpipeError
from .agents_reads import read_settings

#: How long a process trusts the inbox settings it read (create() refreshes its own).


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
        self._db = as_sync_database(db)
        self.now = now
        self._settings: dict[str, tuple[InboxSettings, float]] = {}

    # -- helpers shared with pull and the app ---------------------------------------------

    def _instant(self) -> datetime | None:
        return ops.instant(self.now)

    @property
    def secret(self) -> bytes:
        return self._secret

    def settings(self, inbox_id: str) -> InboxSettings:
        """The inbox's settings (cached for a few seconds); 404 ``INBOX_NOT_FOUND``."""
        return read_settings(self, inbox_id)

    # -- inboxes and subscriptions --------------------------------------------------------

    def create(
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
        inbox_id = parse_text(self._db.fetch(CREATE_INBOX, params))
        assert inbox_id is not None
        self._settings.pop(inbox_id, None)
        return inbox_id

    def subscribe(
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
        self.settings(inbox_id)
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
        found = parse_text(self._db.fetch(SUBSCRIBE, params))
        if found is None:
            raise DrainpipeError("not_found", f"No inbox {inbox_id}", code=INBOX_NOT_FOUND)
        return found

    def overview(self) -> list[InboxOverview]:
        """Every inbox, by name: its events counted by state, its open streams and the age of
        its oldest open event, in one round trip (metadata only; the console's
        ``GET /inboxes``). It counts every kept event: an overview, not a hot path."""
        rows = self._db.fetch(OVERVIEW, overview_params(self._instant()))
        return parse_overview(rows)

    # -- settlements ----------------------------------------------------------------------

    def release(
        self, event_id: str, lease_id: str, *, delay_seconds: float = 0, error: str | None = None
    ) -> bool:
        """Give the event back: due again after ``delay_seconds`` (failed instead when this
        was its last delivery under ``max_attempts``)."""
        result = self._settle_fenced(
            "release", event_id, lease_id, None, delay_seconds=delay_seconds, error=error
        )
        return result.ok

    def extend(self, event_id: str, lease_id: str, seconds: float) -> bool:
        """Still working: the lease then ends ``seconds`` (1..3600) from now."""
        return (self._settle_fenced("extend", event_id, lease_id, None, seconds=seconds)).ok

    def _settle_fenced(
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
        found = parse_settlement(self._db.fetch(statement, params))
        return ops.settlement(event_id, number_id, found)

    def raw(self, event_id: str, *, inboxes: Collection[str] | None = None) -> bytes:
        """The whole body of an event as the webhook inbox received it, byte for byte, so a
        signature can be checked again (a ``store()``d message: its payload as serialised at
        store time; one stored without its bytes: its payload's JSON text). 404 when
        unknown, outside ``inboxes``, or its webhook message was purged."""
        number_id = parse_event_id(event_id)
        if number_id is None:
            raise DrainpipeError("not_found", "No such event", code=EVENT_NOT_FOUND)
        scope = None if inboxes is None else sorted(inboxes)
        rows = self._db.fetch(RAW, raw_params(number_id, scope))
        if not rows or rows[0][1] is None:
            raise DrainpipeError("not_found", f"No event {event_id}", code=EVENT_NOT_FOUND)
        return bytes(rows[0][1])

    def fetch(self, statement: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        return self._db.fetch(statement, params)

    def close(self) -> None:
        """Close the pool opened for a DSN (a pool or connection you gave stays open)."""
        self._db.close()
