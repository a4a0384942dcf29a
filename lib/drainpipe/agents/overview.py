"""What the console shows of the agent inboxes (docs/reference.md section 15): per inbox,
its events counted by state, the streams open now and the age of its oldest open event.
Metadata only: no body, outcome, error text, lease id or stream holder is read."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

from ..db.statement_shapes import Row

#: every state an agent inbox event can be in, in the order the console shows them
EVENT_STATES: Final = ("pending", "leased", "acked", "delivered", "failed", "expired")


@dataclass(frozen=True, slots=True)
class InboxOverview:
    """One agent inbox as the console shows it. ``counts`` has every state of
    :data:`EVENT_STATES` (0 when none); ``leased`` includes leases that ran out and wait
    for the next hand-out. ``open_streams``: stream slots held now (a crashed process's
    slot stops counting when its lease ends). ``oldest_open_age_s``: seconds since the
    oldest pending or leased event arrived, None when there is none."""

    id: str
    name: str
    counts: dict[str, int]
    open_streams: int
    oldest_open_age_s: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "inbox": self.id,
            "name": self.name,
            "counts": self.counts,
            "open_streams": self.open_streams,
            "oldest_open_age_s": self.oldest_open_age_s,
        }


def parse_overview(rows: list[Row]) -> list[InboxOverview]:
    found = []
    for inbox_id, name, raw_counts, streams, age in rows:
        counts = json.loads(raw_counts) if isinstance(raw_counts, str | bytes) else raw_counts
        kept = {str(state): int(n) for state, n in (counts or {}).items()}
        found.append(
            InboxOverview(
                id=str(inbox_id),
                name=str(name),
                counts={state: kept.get(state, 0) for state in EVENT_STATES},
                open_streams=int(streams or 0),
                oldest_open_age_s=None if age is None else max(float(age), 0.0),
            )
        )
    return found
