"""What the agent inbox's calls answer, for both twins: an inbox's settings, a settlement, a
page of peeked events and a claim's result (the envelope of an event is
:mod:`drainpipe.agents.reads`')."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .reads import Envelope


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


@dataclass(frozen=True, slots=True)
class EventPage:
    """A page of peeked events (envelopes without lease) and the cursor of the next one."""

    items: list[Envelope]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class ClaimResult:
    claimed: list[Envelope]
    unavailable: list[str]
    not_found: list[str]
