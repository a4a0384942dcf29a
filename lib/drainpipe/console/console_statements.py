"""The console's operations: the queue overview, the search behind ``GET /jobs``'s
extra filters and the bulk actions, the causes of death, and the audited pause, resume and
bulk call rows. Metadata only, as every Job Inbox statement. See :mod:`drainpipe.statements`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..backends.record_statements import parse_record
from ..db import jsonb
from ..db.statement_shapes import Params, Row
from ..models import JobRecord, Position

OVERVIEW = (
    "SELECT queue, counts, ready, oldest_ready_age_s, paused, series"
    " FROM drainpipe.job_queue_overview_v1(%s, %s)"
)


@dataclass(frozen=True, slots=True)
class QueueOverview:
    """One queue as the console shows it: counts per state, how many ready jobs wait, the
    age of the oldest (seconds, None when none), whether it is paused, and 60 per-minute
    points ``{"minute", "enqueued", "succeeded", "failed"}`` oldest first."""

    queue: str
    counts: dict[str, int]
    ready: int
    oldest_ready_age_s: float | None
    paused: bool
    series: list[dict[str, Any]]
    #: what its flow limits hold (``QueueStats.held`` of a running queue)
    held: dict[str, int] = field(default_factory=dict)


def overview_params(queues: Sequence[str], now: datetime | None) -> Params:
    return (list(queues), now)


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str | bytes) else value


def parse_overview(rows: list[Row]) -> list[QueueOverview]:
    return [
        QueueOverview(
            queue=str(row[0]),
            counts={str(k): int(v) for k, v in (_json(row[1]) or {}).items()},
            ready=int(row[2] or 0),
            oldest_ready_age_s=None if row[3] is None else max(float(row[3]), 0.0),
            paused=bool(row[4]),
            series=list(_json(row[5]) or []),
        )
        for row in rows
    ]


ENSURE_QUEUE_OVERVIEW = "SELECT drainpipe.ensure_queue_overview_v1(%s)"


def ensure_queue_overview_params(queues: Sequence[str]) -> Params:
    return (list(queues),)


SEARCH = "SELECT * FROM drainpipe.search_jobs_v1(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"


@dataclass(frozen=True, slots=True)
class JobFilter:
    """What the console's search and bulk actions match (None: any)."""

    queue: str | None = None
    state: str | None = None
    tenant: str | None = None
    code: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    dedupe_key: str | None = None
    id: int | None = None


def search_params(
    where: JobFilter, limit: int, before: Position | None, now: datetime | None = None
) -> Params:
    return (
        where.queue,
        where.state,
        where.tenant,
        where.code,
        where.since,
        where.until,
        where.dedupe_key,
        where.id,
        limit,
        None if before is None else before.id,
        None if before is None else before.queue,
        now,
    )


def parse_search(rows: list[Row], limit: int) -> tuple[list[JobRecord], Position | None]:
    """The page (newest first) and the position after it, None on the last (``limit + 1``
    rows are asked for)."""
    records = [parse_record(row) for row in rows[:limit]]
    if len(rows) <= limit or not records:
        return records, None
    return records, Position(records[-1].id, records[-1].queue)


CAUSES = "SELECT queue, id, code FROM drainpipe.job_causes_v1(%s, %s)"


def causes_params(jobs: Sequence[tuple[str, int]]) -> Params:
    return ([queue for queue, _ in jobs], [job_id for _, job_id in jobs])


def parse_causes(rows: list[Row]) -> dict[tuple[str, int], str]:
    return {(str(row[0]), int(row[1])): str(row[2]) for row in rows if row[2] is not None}


AUDITED_PAUSE = "SELECT drainpipe.audited_pause_queue_v1(%s, %s, %s, %s, %s)"


def audited_pause_params(
    target: str, actor: str, queue: str, pause: bool, now: datetime | None
) -> Params:
    return (target, actor, queue, pause, now)


def parse_audited_pause(rows: list[Row]) -> bool:
    """True when the queue changed (paused or resumed now)."""
    return bool(rows) and rows[0][0] == "ok"


AUDIT_BULK = "SELECT drainpipe.audit_bulk_action_v1(%s, %s, %s, %s, %s, %s, %s)"


def audit_bulk_params(
    target: str,
    actor: str,
    action: str,
    queue: str | None,
    idempotency_key: str | None,
    detail: dict[str, Any],
    now: datetime | None,
) -> Params:
    return (target, actor, action, queue, idempotency_key, jsonb(detail), now)
