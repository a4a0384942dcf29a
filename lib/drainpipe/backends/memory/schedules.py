"""Schedules in memory: the drain scheduler's rows and their claim leases, as in
``sql/schedules_drain.sql``."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .clock import _round_trip
from .values import _check_queue, _floor_ms, _floor_ms_or_none, _invalid_input, _later, _to_json

_MAX_SCHEDULE_NAME = 200


@dataclass(slots=True)
class _Schedule:
    name: str
    cron: str
    time_zone: str
    queue: str
    payload: str
    tenant: str | None
    next_run: datetime | None
    first_after: datetime | None
    created_at: datetime
    last_run: datetime | None = None
    locked_until: datetime | None = None
    claim_token: uuid.UUID | None = None


class MemorySchedules:
    """The schedule capability of :class:`~drainpipe.testing.MemoryBackend` (a mixin: the
    backend owns ``_schedules`` and the clock)."""

    _schedules: dict[str, _Schedule]

    def now(self) -> datetime:
        raise NotImplementedError

    # -- schedules (the drain scheduler's rows and leases) --------------------------------

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
        await _round_trip()
        from ...schedules.cron import parse_cron, zone

        if not isinstance(name, str) or not 1 <= len(name) <= _MAX_SCHEDULE_NAME:
            raise _invalid_input(f"Invalid schedule name {name}: 1 to 200 characters")
        try:
            parse_cron(cron)
            zone(time_zone)
        except ValueError as exc:
            raise _invalid_input(str(exc)) from exc
        _check_queue(queue)
        stored = _to_json(payload)
        now = _floor_ms(self.now())
        text = cron.strip()
        first_after = now if next_run is None else None
        existing = self._schedules.get(name)
        if existing is None:
            self._schedules[name] = _Schedule(
                name=name,
                cron=text,
                time_zone=time_zone,
                queue=queue,
                payload=stored,
                tenant=tenant,
                next_run=_floor_ms_or_none(next_run),
                first_after=first_after,
                created_at=now,
            )
            return
        existing.queue, existing.payload, existing.tenant = queue, stored, tenant
        if existing.cron != text or existing.time_zone != time_zone:
            # a new cron or zone frees the schedule: a drain holding the old version cannot
            # advance it. The same cron and zone keep the next run and a drain's claim.
            existing.cron, existing.time_zone = text, time_zone
            existing.next_run, existing.first_after = _floor_ms_or_none(next_run), first_after
            existing.locked_until = existing.claim_token = None

    async def unschedule(self, name: str) -> bool:
        await _round_trip()
        return self._schedules.pop(name, None) is not None

    async def list_schedules(
        self, *, prefix: str | None, tenant: str | None
    ) -> list[tuple[Any, ...]]:
        """Rows ``(name, cron, time_zone, queue, tenant, next_run, last_run, leased_until,
        created_at)`` by name."""
        await _round_trip()
        return [
            (
                one.name,
                one.cron,
                one.time_zone,
                one.queue,
                one.tenant,
                one.next_run,
                one.last_run,
                one.locked_until,
                one.created_at,
            )
            for one in sorted(self._schedules.values(), key=lambda one: one.name)
            if (prefix is None or one.name.startswith(prefix))
            and (tenant is None or one.tenant == tenant)
        ]

    async def unschedule_tenant(self, tenant: str) -> int:
        await _round_trip()
        names = [one.name for one in self._schedules.values() if one.tenant == tenant]
        for name in names:
            del self._schedules[name]
        return len(names)

    async def due_schedules(self, *, lease: float, batch: int) -> list[tuple[Any, ...]]:
        """Lease the due schedules (and those without a next run yet) for ``lease`` seconds;
        rows ``(name, cron, time_zone, queue, payload, next_run, first_after, claim_token)``."""
        await _round_trip()
        now = self.now()
        free = [
            one
            for one in self._schedules.values()
            if (one.next_run is None or one.next_run <= now)
            and (one.locked_until is None or one.locked_until <= now)
        ]
        # not computed yet first, then by due time and name (the SQL's due_at order)
        free.sort(key=lambda one: (one.next_run is not None, one.next_run or now, one.name))
        rows = []
        until = _later(now, max(lease, 1))
        for one in free[: max(batch, 1)]:
            one.locked_until = until
            # a fresh token per claim: a drain whose lease ran out cannot advance a later one
            one.claim_token = uuid.uuid4()
            rows.append(
                (
                    one.name,
                    one.cron,
                    one.time_zone,
                    one.queue,
                    json.loads(one.payload),
                    one.next_run,
                    one.first_after,
                    one.claim_token,
                )
            )
        return rows

    async def advance_schedule(
        self, name: str, ran: datetime | None, next_run: datetime | None, claim_token: Any
    ) -> bool:
        """Move a schedule we claimed to its next run; False when our claim is gone."""
        await _round_trip()
        one = self._schedules.get(name)
        if one is None or one.claim_token is None or one.claim_token != claim_token:
            return False
        if one.next_run is None:
            if one.first_after is None:
                return False
        elif ran is None or _floor_ms(one.next_run) != _floor_ms(ran):
            return False
        one.next_run = _floor_ms_or_none(next_run)
        if ran is not None:
            one.last_run = _floor_ms(ran)
        one.first_after = one.locked_until = one.claim_token = None
        return True
