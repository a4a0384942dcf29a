"""What the Job Inbox shows of a job: its record as JSON, metadata only.

The fields are listed here rather than taken from the dataclass, so a field added to
``JobRecord`` later is not shown until someone decides it is safe to show.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

RECORD_FIELDS = (
    "id",
    "queue",
    "state",
    "attempts",
    "max_attempts",
    "attempts_left",
    "deadline",
    "tenant",
    "dedupe_key",
    "enqueued_at",
    "eligible_at",
    "started_at",
    "finished_at",
    "last_code",
    "parent_id",
    "replayed_by",
    "held_by",
    "waiting_for",
)
#: what the API shows of a record: its fields and, for a job that spent its attempts, the
#: ``cause`` of its death (the last attempt's code; None otherwise)
SHOWN_FIELDS = (*RECORD_FIELDS, "cause")
ATTEMPT_FIELDS = ("number", "started_at", "ended_at", "outcome", "code", "late_outcome")
#: a step's metadata: never its result
STEP_FIELDS = ("number", "name", "state", "started_at", "ended_at", "code")
STATES = ("queued", "leased", "retry_wait", "waiting", "succeeded", "dead", "cancelled")


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def record_json(record: Any, *, history: bool, cause: str | None = None) -> dict[str, Any]:
    """A ``JobRecord`` as the API answers it (with its attempts when ``history``).
    ``cause``: why a job that ended ``MAX_ATTEMPTS``/``DEADLINE_PASSED`` died (its last
    attempt's code), shown next to ``last_code``."""
    out = {name: _plain(getattr(record, name, None)) for name in RECORD_FIELDS}
    out["cause"] = cause
    if history:
        out["history"] = [
            {name: _plain(getattr(attempt, name, None)) for name in ATTEMPT_FIELDS}
            for attempt in getattr(record, "history", ()) or ()
        ]
        out["steps"] = [
            {name: _plain(getattr(step, name, None)) for name in STEP_FIELDS}
            for step in getattr(record, "steps", ()) or ()
        ]
    return out


def audit_json(entry: Any) -> dict[str, Any]:
    return {
        "id": entry.id,
        "at": _plain(entry.at),
        "actor": entry.actor,
        "action": entry.action,
        "queue": entry.queue,
        "job_id": entry.job_id,
        "outcome": entry.outcome,
        "code": entry.code,
        "idempotency_key": entry.idempotency_key,
        "new_job_id": entry.new_job_id,
        "detail": getattr(entry, "detail", None),
    }
