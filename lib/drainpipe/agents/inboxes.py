"""``drainpipe.AgentInboxes``: inboxes over webhook messages, their subscriptions, and the
settlements of leased events (docs/reference.md section 11).

Every settlement quotes the lease id the event was handed out with. The id carries the
event id, its delivery and the token the database minted in the hand-out transaction, all
signed with ``lease_secret``; the SQL locks the event and changes it only while exactly
that lease is current, so a holder whose lease ran out and went to someone else changes
nothing (``False``, over HTTP 409 ``LEASE_LOST``). The same ack (or release) repeated with
the same lease answers ``True`` again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Coroutine, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, Literal

from ..db import as_database, dump_json
from ..errors import DrainpipeError
from ..ops import agents as ops
from ..validation import MAX_NAME_LENGTH, aware, text_fault
from .batch import AckBatcher, Found, Pending
from .checks import (
    ACK_MODES,
    EVENT_NOT_FOUND,
    INBOX_NOT_FOUND,
    MAX_LEASE,
    MAX_OUTCOME_BYTES,
    ORDERS,
    bad_parameter,
    choice,
    error_text,
    lease_text,
    number,
    optional_name,
    path_parts,
    whole_number,
)
from .envelope import event_id_text, parse_event_id
from .lease import LeaseCodec
from .listen import Wakeups
from .overview import InboxOverview, parse_overview

if TYPE_CHECKING:
    from .pull import AgentInbox

#: How long a process trusts the inbox settings it read (create() refreshes its own).
SETTINGS_TTL: Final = 5.0

Op = Literal["ack", "release", "extend"]


@dataclass(frozen=True, slots=True)
class InboxSettings:
    id: str
    name: str
    lease_seconds: int
    hold_seconds: int
    max_attempts: int | None
    default_order: str
    default_ack: str
    allowed_ack: tuple[str, ...]
    priority_path: tuple[str, ...] | None
    view_paths: dict[str, list[str]] | None
    view_max_bytes: int


@dataclass(frozen=True, slots=True)
class Settlement:
    """What a settlement found: ``ok`` (the lease was current, or the same settlement was
    repeated), the event's ``state`` now and its ``lease_until`` (None once settled)."""

    ok: bool
    id: str
    inbox_id: str
    state: str
    lease_until: datetime | None

    def to_json(self) -> dict[str, Any]:
        until = None if self.lease_until is None else self.lease_until.isoformat()
        return {"id": self.id, "state": self.state, "lease_until": until}


def _view_paths(value: Any) -> dict[str, list[str]] | None:
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


class AgentInboxes:
    """Agent inboxes on ``db`` (a DSN, pool or connection; see :class:`drainpipe.Jobs`).

    * ``lease_secret``: signs lease ids and cursors (at least 16 bytes; keep it the same on
      every instance, and secret: a forged lease id is refused without touching the row).
    * ``now``: the clock of hand-outs, leases, holds and settlements (``p_now``); a test
      moves it instead of waiting.
    * ``listen``: True on a long-lived server (``drainpipe serve``, uvicorn): a session
      connection LISTENs so long polls wake when an event arrives. Needs a DSN; never on
      serverless functions (they keep 100 ms → 1 s poll steps).
    """

    def __init__(
        self,
        db: Any,
        *,
        lease_secret: str | bytes,
        now: Callable[[], datetime] | None = None,
        listen: bool = False,
    ) -> None:
        secret = lease_secret.encode() if isinstance(lease_secret, str) else lease_secret
        if not isinstance(secret, bytes) or len(secret) < 16:
            raise ValueError("lease_secret must be a string or bytes of at least 16 bytes")
        self._secret = secret
        self.leases = LeaseCodec(secret)
        self._db = as_database(db)
        self.now = now
        self._settings: dict[str, tuple[InboxSettings, float]] = {}
        self._wakeups: Wakeups | None = None
        self._acks = AckBatcher(self._db.fetch)
        if listen:
            if self._db.dsn is None:
                raise ValueError("listen=True needs a DSN (a session connection of its own)")
            if self._db.names_pooler:
                # a transaction pooler hands the LISTEN's session to others once its
                # transaction ends: no notification would ever arrive
                raise ValueError(
                    "listen=True cannot work behind a transaction pooler (the DSN names one:"
                    " port 6543 or 6432, or pgbouncer=true); give the AgentInboxes a direct"
                    " DSN, or leave listen off (polls then step 100 ms -> 1 s)"
                )
            self._wakeups = Wakeups(self._db.dsn)

    # -- helpers shared with pull and the app ---------------------------------------------

    def _instant(self) -> datetime | None:
        return None if self.now is None else aware(self.now(), "now()")

    @property
    def secret(self) -> bytes:
        return self._secret

    async def settings(self, inbox_id: str) -> InboxSettings:
        """The inbox's settings (cached for a few seconds); 404 ``INBOX_NOT_FOUND``."""
        loop_time = asyncio.get_running_loop().time()
        cached = self._settings.get(inbox_id)
        if cached is not None and loop_time - cached[1] < SETTINGS_TTL:
            return cached[0]
        if not isinstance(inbox_id, str) or len(inbox_id) > MAX_NAME_LENGTH or text_fault(inbox_id):
            raise DrainpipeError("not_found", "No such inbox", code=INBOX_NOT_FOUND)
        rows = await self._db.fetch(ops.INBOX, ops.inbox_params(inbox_id))
        if not rows:
            self._settings.pop(inbox_id, None)
            raise DrainpipeError("not_found", f"No inbox {inbox_id}", code=INBOX_NOT_FOUND)
        (id_, name, lease, hold, attempts, order, ack, allowed, priority, view, cap) = rows[0]
        found = InboxSettings(
            id_, name, lease, hold, attempts, order, ack, tuple(allowed),
            None if priority is None else tuple(priority),
            None if view is None else {name: path for name, path in view}, cap,
        )  # fmt: skip
        self._settings[inbox_id] = (found, loop_time)
        return found

    @property
    def wakeups(self) -> Wakeups | None:
        return self._wakeups

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
        paths = _view_paths(view_paths)
        cap = whole_number(view_max_bytes, "view_max_bytes", 64, 1048576)
        params = ops.create_inbox_params(
            name, lease, hold, attempts, order, ack, allowed, priority,
            None if paths is None else dump_json(list(paths.items())).decode(), cap,
        )  # fmt: skip
        inbox_id = ops.parse_text(await self._db.fetch(ops.CREATE_INBOX, params))
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
        params = ops.subscribe_params(inbox_id, source_name, type_list, where_json, correlation)
        found = ops.parse_text(await self._db.fetch(ops.SUBSCRIBE, params))
        if found is None:
            raise DrainpipeError("not_found", f"No inbox {inbox_id}", code=INBOX_NOT_FOUND)
        return found

    async def overview(self) -> list[InboxOverview]:
        """Every inbox, by name: its events counted by state, its open streams and the age of
        its oldest open event, in one round trip (metadata only; the console's
        ``GET /inboxes``). It counts every kept event: an overview, not a hot path."""
        rows = await self._db.fetch(ops.OVERVIEW, ops.overview_params(self._instant()))
        return parse_overview(rows)

    def inbox(self, inbox_id: str) -> AgentInbox:
        """The handle that pulls, peeks and claims events of one inbox."""
        from .pull import AgentInbox

        return AgentInbox(self, inbox_id)

    # -- settlements ----------------------------------------------------------------------

    def ack(self, event_id: str, lease_id: str, outcome: Any = None) -> Coroutine[Any, Any, bool]:
        """Done: True, or False when that lease is no longer the event's current one (nothing
        changed). ``outcome`` (any JSON, at most 64 KiB) is kept with the event.

        Await it as the coroutine it is typed as (``await agents.ack(...)``,
        ``asyncio.create_task``, ``asyncio.run``). Inside a running loop it is queued when
        called, for the batch the acks of this loop turn share, and is that batch's future
        too (:class:`~drainpipe.agents.batch.Pending`): ``asyncio.gather`` over a pull's acks
        needs no task per ack. A malformed argument raises at the call; an unknown event
        raises 404 at the await."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # made outside a loop, for asyncio.run: queued once it runs
            checked = self._checked_ack(event_id, lease_id, outcome)
            return self._ack_in_loop(checked, self._instant())
        return self._queue_ack_ok(loop, event_id, lease_id, outcome, None)

    async def _ack_in_loop(
        self, checked: tuple[int, int, str | None, str | None], now: datetime | None
    ) -> bool:
        return await self._acks.ack_ok(asyncio.get_running_loop(), *checked, None, now)

    def _queue_ack_ok(
        self,
        loop: asyncio.AbstractEventLoop,
        event_id: Any,
        lease_id: Any,
        outcome: Any,
        inboxes: Collection[str] | None,
    ) -> Pending[bool]:
        """:meth:`ack` within ``inboxes`` (None: all) in a running loop: checked (a malformed
        argument raises here) and queued for this turn's batch."""
        checked = self._checked_ack(event_id, lease_id, outcome)
        scope = None if inboxes is None else sorted(inboxes)
        return self._acks.ack_ok(loop, *checked, scope, self._instant())

    async def release(
        self, event_id: str, lease_id: str, *, delay_seconds: float = 0, error: str | None = None
    ) -> bool:
        """Give the event back: due again after ``delay_seconds`` (failed instead when this
        was its last delivery under ``max_attempts``)."""
        result = await self.settle(
            "release", event_id, lease_id, delay_seconds=delay_seconds, error=error
        )
        return result.ok

    async def extend(self, event_id: str, lease_id: str, seconds: float) -> bool:
        """Still working: the lease then ends ``seconds`` (1..3600) from now."""
        return (await self.settle("extend", event_id, lease_id, seconds=seconds)).ok

    def _fence(self, event_id: Any, lease_id: Any) -> tuple[int, int, str | None]:
        """``(event id, delivery, token)`` to fence a settlement with. A lease id that is not
        one of this event's (altered, forged, another event's) can only be refused, but an
        event outside the caller's inboxes must still be a 404: it fences with a delivery
        and token no hand-out has (the SQL answers not found or not ok)."""
        lease = lease_text(lease_id)
        number_id = parse_event_id(event_id)
        if number_id is None:
            raise DrainpipeError("not_found", "No such event", code=EVENT_NOT_FOUND)
        decoded = self.leases.read(lease)
        if decoded is None or decoded[0] != number_id:
            return number_id, -1, None
        # the token as hex text (Postgres reads it as a uuid): no UUID object per ack
        return number_id, decoded[1], decoded[2].hex()

    def _checked_ack(
        self, event_id: Any, lease_id: Any, outcome: Any
    ) -> tuple[int, int, str | None, str | None]:
        """An ack's fence (:meth:`_fence`) and its outcome as JSON text."""
        number_id, delivery, token = self._fence(event_id, lease_id)
        outcome_json = None
        if outcome is not None:
            outcome_json = dump_json(outcome, "outcome").decode()
            if len(outcome_json.encode()) > MAX_OUTCOME_BYTES:
                raise bad_parameter("outcome", "outcome must be at most 64 KiB of JSON")
        return number_id, delivery, token, outcome_json

    def _queue_ack(
        self, event_id: Any, lease_id: Any, outcome: Any, inboxes: Collection[str] | None
    ) -> tuple[int, Pending[Found]]:
        """``settle("ack")`` up to its await: checked (a malformed argument raises here) and
        queued for this turn's batch. The event's id, and the future of what the batch finds
        (None: no such event within ``inboxes``)."""
        number_id, delivery, token, outcome_json = self._checked_ack(event_id, lease_id, outcome)
        scope = None if inboxes is None else sorted(inboxes)
        queued = self._acks.ack(number_id, delivery, token, outcome_json, scope, self._instant())
        return number_id, queued

    async def settle(
        self,
        op: Op,
        event_id: Any,
        lease_id: Any,
        *,
        inboxes: Collection[str] | None = None,
        outcome: Any = None,
        delay_seconds: Any = 0,
        error: Any = None,
        seconds: Any = None,
    ) -> Settlement:
        """One fenced settlement; ``inboxes`` (None: all) bounds what the caller may touch.
        An unknown event, or one outside ``inboxes``, is 404 ``EVENT_NOT_FOUND``."""
        if op == "ack":
            number_id, queued = self._queue_ack(event_id, lease_id, outcome, inboxes)
            found = await queued
        else:
            number_id, delivery, token = self._fence(event_id, lease_id)
            scope = None if inboxes is None else sorted(inboxes)
            now = self._instant()
            if op == "release":
                delay = number(delay_seconds, "delay_seconds", 0, 7 * 86400)
                params = ops.release_params(
                    number_id, delivery, token, delay, error_text(error), scope, now
                )
                statement = ops.RELEASE
            else:
                extra = number(seconds, "seconds", 1, MAX_LEASE)
                statement = ops.EXTEND
                params = ops.extend_params(number_id, delivery, token, extra, scope, now)
            found = ops.parse_settlement(await self._db.fetch(statement, params))
        if found is None:
            raise DrainpipeError("not_found", f"No event {event_id}", code=EVENT_NOT_FOUND)
        ok, inbox_id, state, until = found
        return Settlement(ok, event_id_text(number_id), inbox_id, state, until)

    async def raw(self, event_id: str, *, inboxes: Collection[str] | None = None) -> bytes:
        """The whole body of an event as the webhook inbox received it, byte for byte, so a
        signature can be checked again (a ``store()``d message: its payload as serialised at
        store time; one stored before webhook-inbox 0012: its payload's JSON text). 404 when
        unknown, outside ``inboxes``, or its webhook message was purged."""
        number_id = parse_event_id(event_id)
        if number_id is None:
            raise DrainpipeError("not_found", "No such event", code=EVENT_NOT_FOUND)
        scope = None if inboxes is None else sorted(inboxes)
        rows = await self._db.fetch(ops.RAW, ops.raw_params(number_id, scope))
        if not rows or rows[0][1] is None:
            raise DrainpipeError("not_found", f"No event {event_id}", code=EVENT_NOT_FOUND)
        return bytes(rows[0][1])

    def app(
        self,
        *,
        authorize: Any,
        budget: float = 25.0,
        allowed_origins: Collection[str] | None = None,
    ) -> Any:
        """The HTTP routes and the WebSocket stream of section 11 (an ASGI app).
        ``allowed_origins``: the origins whose pages may write with cookies (default: the
        request's own host; docs/reference.md, "Hardening")."""
        from .app import build_app

        return build_app(self, authorize=authorize, budget=budget, allowed_origins=allowed_origins)

    async def close(self) -> None:
        """Stop the wake-up listener and close the pool opened for a DSN."""
        if self._wakeups is not None:
            await self._wakeups.close()
        await self._db.close()

    async def fetch(self, statement: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        return await self._db.fetch(statement, params)
