"""Job Inbox operations: the audited cancel and replay, and the audit log's pages. See
:mod:`drainpipe.statements` for the shape. Each write is one statement: the change and its audit
row commit together (``sql/migrations/jobs/*_management``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from ..db.statement_shapes import Params, Row

Outcome = Literal["ok", "refused"]

# ``now`` (p_now): the caller's clock, or None for the database's (clock_timestamp())
AUDITED_CANCEL = "SELECT drainpipe.audited_cancel_job_v1(%s, %s, %s, %s, %s)"


def audited_cancel_params(
    target: str, actor: str, queue: str, job_id: int, now: datetime | None = None
) -> Params:
    return (target, actor, queue, job_id, now)


def parse_audited_cancel(rows: list[Row]) -> Outcome | None:
    """``"ok"`` (cancelled now), ``"refused"`` (terminal already), None (unknown job)."""
    value = rows[0][0] if rows else None
    return None if value is None else "ok" if value == "ok" else "refused"


@dataclass(frozen=True, slots=True)
class ReplayOutcome:
    outcome: Outcome
    code: str | None
    new_job_id: int | None


# v2: the replay rules (the app's declared window/replayable on top of the stored ones) and
# the refusal code of the application's replay_check, audited by the same statement
AUDITED_REPLAY_V2 = (
    "SELECT outcome, code, new_job_id"
    " FROM drainpipe.audited_replay_job_v2(%s, %s, %s, %s, %s, %s, %s, %s, %s)"
)


def audited_replay_v2_params(
    target: str,
    actor: str,
    queue: str,
    job_id: int,
    idempotency_key: str | None,
    refusal: str | None,
    rules: tuple[float | None, bool],
    now: datetime | None = None,
) -> Params:
    window, replayable = rules
    return (target, actor, queue, job_id, idempotency_key, refusal, window, replayable, now)


def parse_audited_replay(rows: list[Row]) -> ReplayOutcome | None:
    """The replay's outcome, or None when the job is unknown (nothing audited)."""
    if not rows:
        return None
    outcome, code, new_job_id = rows[0]
    return ReplayOutcome(
        "ok" if outcome == "ok" else "refused",
        None if code is None else str(code),
        None if new_job_id is None else int(new_job_id),
    )


LIST_AUDIT = (
    "SELECT id, at, actor, action, queue, job_id, outcome, code, idempotency_key, new_job_id,"
    " detail FROM drainpipe.list_management_audit_v2(%s, %s, %s)"
)


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One audited write: who did what to which job (or queue), and how it ended. A pause
    or resume names its queue and no job; a bulk call's own row names neither job nor, when
    its filter spans queues, queue, and carries its filter and counts in ``detail``."""

    id: int
    at: datetime
    actor: str
    action: Literal["cancel", "replay", "pause", "resume", "bulk_cancel", "bulk_replay"]
    queue: str | None
    job_id: int | None
    outcome: Outcome
    code: str | None
    idempotency_key: str | None
    new_job_id: int | None
    detail: Any = None


def list_audit_params(target: str, limit: int, before: int | None) -> Params:
    return (target, limit, before)


def parse_list_audit(rows: list[Row]) -> list[AuditEntry]:
    return [AuditEntry(*row) for row in rows]
