"""Schedule operations (the drain scheduler; pg_cron answers through the same functions).
See :mod:`drainpipe.statements` for the shape."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..db import jsonb
from ..db.statement_shapes import Params, Row
from ..models import DueSchedule, ScheduleInfo

SCHEDULE = "SELECT drainpipe.schedule_job_v1(%s, %s, %s, %s, %s, %s, %s)"


def schedule_params(
    name: str,
    cron: str,
    queue: str,
    payload: Any,
    time_zone: str,
    next_run: datetime | None,
    tenant: str | None,
) -> Params:
    return (name, cron, queue, jsonb(payload), time_zone, next_run, tenant)


UNSCHEDULE = "SELECT drainpipe.unschedule_job_v1(%s)"


def unschedule_params(name: str) -> Params:
    return (name,)


def parse_unschedule(rows: list[Row]) -> bool:
    """False when there was no schedule of that name."""
    return bool(rows[0][0]) if rows else False


LIST_SCHEDULES = "SELECT * FROM drainpipe.list_schedules_v1(%s, %s)"


def list_schedules_params(prefix: str | None, tenant: str | None) -> Params:
    return (prefix, tenant)


def parse_list_schedules(rows: list[Row]) -> list[ScheduleInfo]:
    """Rows ``(name, cron, time_zone, queue, tenant, next_run, last_run, leased_until,
    created_at)``, ordered by name."""
    return [ScheduleInfo(*row) for row in rows]


UNSCHEDULE_TENANT = "SELECT drainpipe.unschedule_tenant_v1(%s)"


def unschedule_tenant_params(tenant: str) -> Params:
    return (tenant,)


def parse_unschedule_tenant(rows: list[Row]) -> int:
    """How many schedules were removed."""
    return int(rows[0][0] or 0) if rows else 0


DUE_SCHEDULES = "SELECT * FROM drainpipe.claim_due_schedules_v1(%s, %s)"


def due_schedules_params(lease: float, batch: int) -> Params:
    return (float(lease), batch)


def parse_due_schedules(rows: list[Row]) -> list[DueSchedule]:
    """Rows ``(name, cron, time_zone, queue, payload, next_run, first_after, claim_token)``,
    now leased to the caller; ``advance_schedule`` needs the token."""
    return [DueSchedule(*row) for row in rows]


ADVANCE_SCHEDULE = "SELECT drainpipe.advance_schedule_v1(%s, %s, %s, %s)"


def advance_schedule_params(
    name: str, ran: datetime | None, next_run: datetime | None, claim_token: Any
) -> Params:
    return (name, ran, next_run, claim_token)


def parse_advance_schedule(rows: list[Row]) -> bool:
    """False when the caller's claim on the schedule is gone."""
    return bool(rows[0][0]) if rows else False
