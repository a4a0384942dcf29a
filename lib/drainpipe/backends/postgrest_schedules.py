"""Schedules over PostgREST: create, list and remove them, and the drain scheduler's lease and
advance (docs/schedules.md), one request each."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from . import postgrest_rows as rows

if TYPE_CHECKING:
    from ..models import DueSchedule, ScheduleInfo

__all__ = ["PostgrestSchedules"]


class PostgrestSchedules:
    """The schedule operations of :class:`~drainpipe.backends.postgrest.PostgrestBackend`."""

    schema: str
    if TYPE_CHECKING:

        def rpc(self, fn: str, params: Mapping[str, Any]) -> Any: ...

    async def schedule(
        self,
        name: str,
        cron: str,
        queue: str,
        payload: Any,
        *,
        time_zone: str,
        next_run: datetime | None,
        tenant: str | None,
    ) -> None:
        await self.rpc(
            "schedule_v1",
            {
                "name": name,
                "cron": cron,
                "queue": queue,
                "payload": payload,
                "time_zone": time_zone,
                "next_run": rows.instant(next_run),
                "tenant": tenant,
            },
        )

    async def unschedule(self, name: str) -> bool:
        return rows.flag(
            self.schema, "unschedule_v1", await self.rpc("unschedule_v1", {"name": name})
        )

    async def list_schedules(self, *, prefix: str | None, tenant: str | None) -> list[ScheduleInfo]:
        data = await self.rpc("list_schedules_v1", {"prefix": prefix, "tenant": tenant})
        return rows.schedules(self.schema, data)

    async def unschedule_tenant(self, tenant: str) -> int:
        data = await self.rpc("unschedule_tenant_v1", {"tenant": tenant})
        return rows.count(self.schema, "unschedule_tenant_v1", data)

    async def due_schedules(self, *, lease: float, batch: int) -> list[DueSchedule]:
        """Due schedules now leased to us; ``advance_schedule`` needs their token."""
        data = await self.rpc("claim_due_schedules_v1", {"lease": float(lease), "batch": batch})
        return rows.due_schedules(self.schema, data)

    async def advance_schedule(
        self, name: str, ran: datetime | None, next_run: datetime | None, claim_token: Any
    ) -> bool:
        data = await self.rpc(
            "advance_schedule_v1",
            {
                "name": name,
                "ran": rows.instant(ran),
                "next_run": rows.instant(next_run),
                "claim_token": None if claim_token is None else str(claim_token),
            },
        )
        return rows.flag(self.schema, "advance_schedule_v1", data)
